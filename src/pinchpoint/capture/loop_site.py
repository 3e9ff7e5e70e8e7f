"""Where the program's training or inference loop is: the `for`/`while` statement of the program's own
code that the first step ended inside, as a file, a function and a range of lines.

Stack samples (`--stacks`) cover the whole program: imports, building the model and the data, evaluation
after training. The loop's own Python is only what runs inside the loop's body, so the report keeps the
main thread's samples whose frames pass through these lines (`analysis/stacks.py`). Found once, at the
first step's end, from the frame that called the step's last hook: one walk up the stack and one parse
of that file.
"""

from __future__ import annotations

import ast
import os
import sys
import sysconfig
from types import FrameType
from typing import Any

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PATHS = sysconfig.get_paths()
_LIBRARY_DIRS = tuple(
    {os.path.realpath(p) + os.sep for p in (_PATHS.get(k) for k in ("stdlib", "purelib", "platlib")) if p}
)
MAX_FRAMES = 64


def is_program_file(path: str) -> bool:
    """A file of the program itself: not pinchpoint, not the standard library, not an installed package."""
    if not path or path.startswith("<"):
        return False
    real = os.path.realpath(path)
    if real.startswith(_OWN_DIR + os.sep):
        return False
    if "/site-packages/" in real or "/dist-packages/" in real:
        return False
    return not real.startswith(_LIBRARY_DIRS)


def loop_site(frame: FrameType | None = None) -> dict[str, Any] | None:
    """The innermost loop statement of the program's own code around the running step, or None (a loop
    that lives in a library, e.g. a trainer's `fit`, or a file that can't be read). A program frame
    with no loop around its call (a `train_step` helper) hands over to its caller."""
    f: FrameType | None = frame if frame is not None else sys._getframe(1)
    for _ in range(MAX_FRAMES):
        if f is None:
            return None
        code = f.f_code
        if is_program_file(code.co_filename):
            span = _enclosing_loop(code.co_filename, code.co_firstlineno, code.co_name, f.f_lineno)
            if span is not None:
                return {
                    "file": code.co_filename,
                    "function": code.co_name,
                    "qualname": getattr(code, "co_qualname", code.co_name),
                    "first_line": span[0],
                    "last_line": span[1],
                    "call_line": f.f_lineno,
                }
        f = f.f_back
    return None


def _enclosing_loop(path: str, def_line: int, name: str, line: int) -> tuple[int, int] | None:
    """(first, last) line of the innermost `for`/`while` around `line` in the scope that starts at
    `def_line` (the module for `<module>`), without entering nested functions or classes."""
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=path)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None
    scope: ast.AST | None = tree if name == "<module>" else _find_def(tree, def_line, name)
    if scope is None:
        return None
    best: tuple[int, int] | None = None
    stack = [scope]
    while stack:
        for child in ast.iter_child_nodes(stack.pop()):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or end is None or not start <= line <= end:
                continue
            if isinstance(child, (ast.For, ast.AsyncFor, ast.While)) and (
                best is None or end - start <= best[1] - best[0]
            ):
                best = (start, end)
            stack.append(child)
    return best


def _find_def(tree: ast.AST, def_line: int, name: str) -> ast.AST | None:
    """The function defined at `def_line` (a decorated function's code starts at its first decorator)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first == def_line or node.lineno == def_line:
                return node
    return None
