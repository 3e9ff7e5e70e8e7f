"""`pinchpoint try`'s scratch copies of the working directory: a trial's checkpoints and logs land in the
copy, never over the user's own files.

The copy is a farm of symbolic links to the working directory's entries, except along the paths the
baseline run wrote: those directories are real (their other entries linked again) and the files the
baseline wrote are copied, so the trial starts from the state it would have met in place (a program
that resumes from its last checkpoint resumes from the same one) and writing them replaces the copy,
not the user's file. Writes elsewhere (a directory the baseline left alone) still go through a link
into the working directory: `pinchpoint try` checks and says so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

Tree = dict[str, "Tree | None"]
"""{name: subtree} for directories along written paths, {name: None} for a written file."""


def _tree(written: Sequence[str]) -> Tree:
    tree: Tree = {}
    for rel in written:
        parts = Path(rel).parts
        node = tree
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node.setdefault(parts[-1], None)
    return tree


def farm(root: Path, dest: Path, written: Sequence[str], skip: Sequence[Path] = ()) -> Path:
    """Build the scratch copy of `root` at `dest` (which must not exist) and return it. `skip`: entries
    left out (pinchpoint's own run directories)."""
    skipped = {str(p.resolve()) for p in skip}
    _fill(root.resolve(), dest, _tree(written), skipped)
    return dest


def _fill(src: Path, dst: Path, tree: Tree, skipped: set[str]) -> None:
    dst.mkdir(parents=True, exist_ok=False)
    try:
        entries = list(os.scandir(src))
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        if str(path) in skipped or entry.name.startswith("pinchpoint-runs"):
            continue
        target = dst / entry.name
        sub = tree.get(entry.name, False)
        try:
            if isinstance(sub, dict) and entry.is_dir(follow_symlinks=False):
                _fill(path, target, sub, skipped)
            elif sub is None and entry.is_file(follow_symlinks=False):
                shutil.copy2(path, target)
            else:
                target.symlink_to(path)
        except OSError:
            continue  # unreadable: left out of the copy, as the program would fail to read it
