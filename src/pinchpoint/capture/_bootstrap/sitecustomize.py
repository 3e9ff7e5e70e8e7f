"""pinchpoint's bootstrap: `pinchpoint run` puts this folder first on PYTHONPATH.

Every Python process the program starts (ranks under torchrun, spawned DataLoader workers) imports it
at start-up. When PINCHPOINT_RUN_DIR is set it starts the capture agent, which waits for torch to be
imported. It never raises: a program must run the same with or without pinchpoint. Afterwards it
hands over to any other `sitecustomize` further along the path.
"""

import os
import sys


def _pinchpoint_start() -> None:
    run_dir = os.environ.get("PINCHPOINT_RUN_DIR")
    if not run_dir:
        return
    try:
        parent = os.environ.get("PINCHPOINT_PKG_PARENT")
        if parent and parent not in sys.path:
            sys.path.append(parent)
        from pinchpoint.capture import bootstrap

        bootstrap.start_from_environment(run_dir)
    except Exception as exc:  # never break the user's program
        try:
            with open(os.path.join(run_dir, "agent.log"), "a") as f:
                f.write(f"[pid {os.getpid()}] bootstrap failed: {exc!r}\n")
        except OSError:
            pass


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    import contextlib
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    # A broken user sitecustomize must not stop the program.
    with contextlib.suppress(Exception):
        spec.loader.exec_module(module)


_pinchpoint_start()
_chain_next_sitecustomize()
