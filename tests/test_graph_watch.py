"""Compiled graphs counted and timed as they run (`capture/graph_watch.py`): wrapped when inductor's
module is loaded or loads, put back on detach, nothing for a program that never compiles."""

from __future__ import annotations

import sys
import types

from pinchpoint.capture.graph_watch import CLASS, MODULE, GraphWatch
from pinchpoint.capture.patches import Patches


def _inductor() -> types.ModuleType:
    """A stand-in for inductor's output-code module: a graph class whose call returns its inputs."""
    module = types.ModuleType(MODULE)

    class Graph:
        def __call__(self, inputs: list[int]) -> list[int]:
            return [x + 1 for x in inputs]

    setattr(module, CLASS, Graph)
    return module


def test_a_loaded_module_is_wrapped_counted_and_put_back() -> None:
    module, watch, patches = _inductor(), GraphWatch(), Patches()
    graph = getattr(module, CLASS)()
    original = vars(getattr(module, CLASS))["__call__"]
    sys.modules[MODULE] = module
    try:
        watch.install(patches)
        watch.install(patches)  # (once per process)
        assert graph([1, 2]) == [2, 3] and graph(inputs=[5]) == [6]
        assert watch.calls == 2 and watch.ns > 0
        patches.undo()
        assert vars(getattr(module, CLASS))["__call__"] is original
        graph([1])
        assert watch.calls == 2
    finally:
        sys.modules.pop(MODULE, None)


def test_the_finder_waits_for_the_module_and_steps_aside_for_every_other_import() -> None:
    watch, patches = GraphWatch(), Patches()
    saved = sys.modules.pop(MODULE, None)
    try:
        watch.install(patches)
        finder = sys.meta_path[0]
        assert finder.find_spec("json") is None  # type: ignore[call-arg]
        module = _inductor()
        watch.wrap_module(module)  # what the finder does once the real module has executed
        getattr(module, CLASS)()([0])
        assert watch.calls == 1
        patches.undo()
        assert finder not in sys.meta_path
    finally:
        if saved is not None:
            sys.modules[MODULE] = saved


def test_the_module_call_wrapper_is_marked_for_dynamo_to_skip_now_or_once_dynamo_loads() -> None:
    """Its code object goes to dynamo's `skip_code` (the frame is never compiled on its own) — at once
    where dynamo is loaded, else by a finder that waits for it and leaves with pinchpoint."""
    from pinchpoint.capture.graph_watch import DYNAMO, _skip_quietly, skip_in_dynamo

    skipped: list[types.CodeType] = []
    stand_in = types.ModuleType(DYNAMO)
    stand_in.skip_code = skipped.append  # type: ignore[attr-defined]

    def wrapper() -> None: ...

    saved = sys.modules.pop(DYNAMO, None)
    try:
        patches = Patches()
        skip_in_dynamo(patches, wrapper.__code__)
        finder = sys.meta_path[0]
        assert not skipped and finder.find_spec("json") is None  # type: ignore[call-arg]
        _skip_quietly(wrapper.__code__, stand_in)  # what the finder does once dynamo has executed
        patches.undo()
        assert finder not in sys.meta_path
        sys.modules[DYNAMO] = stand_in
        skip_in_dynamo(Patches(), wrapper.__code__)
        assert skipped == [wrapper.__code__, wrapper.__code__]
        _skip_quietly(wrapper.__code__, types.ModuleType("an old torch"))  # no skip_code: nothing breaks
    finally:
        sys.modules.pop(DYNAMO, None)
        if saved is not None:
            sys.modules[DYNAMO] = saved
