"""Files written whole or not at all, with the modes the user's umask gives, and output paths checked before work.

A write goes to a temporary file in the same directory, flushed, then one rename: a process killed mid-write leaves
the old file or the new one, never half of one, and a write that fails leaves no temporary file behind. Run
directories, summaries, trajectories and evaluation results are written this way. Temporary files and directories
start private (mkstemp's 0600, mkdtemp's 0700); they, and model directories, get the mode an ordinary `open` or
`mkdir` would give before they are renamed into place, so outputs are as readable as the user's umask says.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from .text import json_text

_umask_lock = threading.Lock()


class OutputPathError(ValueError):
    """An output path cannot be written (a directory where a file goes, a file where a directory goes, no write
    permission, a read-only file system); the message names the path and what is wrong."""


def umask() -> int:
    """The process's umask (read by setting it and putting it back: there is no other portable way)."""
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def file_mode() -> int:
    """The mode `open(path, "w")` gives a new file."""
    return 0o666 & ~umask()


def dir_mode() -> int:
    """The mode `mkdir` gives a new directory."""
    return 0o777 & ~umask()


def umask_modes(root: str | Path) -> None:
    """Give every file and directory under `root` (itself included) the mode the umask gives new ones: libraries
    that write through private temporary files (safetensors' weights are 0600) would leave a model unreadable to
    the user's group."""
    root = Path(root)
    root.chmod(dir_mode())
    for path in root.rglob("*"):
        if not path.is_symlink():
            path.chmod(dir_mode() if path.is_dir() else file_mode())


@contextmanager
def atomic_open(path: str | Path) -> Iterator[IO[str]]:
    """A text file to write `path` through: renamed into place when the block ends, removed if it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json_text(obj, indent=2) + "\n")


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _check_parent_writable(path: Path, what: str) -> None:
    """The directory `path` would be made in exists or can be made, and is writable."""
    anc = _nearest_existing(path.parent)
    if not anc.is_dir():
        raise OutputPathError(f"{what} {path}: {anc} is a file, so nothing can be written under it")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise OutputPathError(f"{what} {path}: {anc} is not writable (no permission, or a read-only file system)")


def check_output_file(path: str | Path, what: str = "output file") -> None:
    """Refuse, before any work, an output file that could not be written: a directory, a path under a file, a place
    without write permission."""
    path = Path(path)
    if path.is_dir():
        raise OutputPathError(f"{what} {path} is a directory; give the path of a file to write")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputPathError(f"{what} {path} is not writable")
    _check_parent_writable(path, what)


def check_output_dir(path: str | Path, what: str = "output directory") -> None:
    """Refuse, before any work, an output directory that could not be written: a file, a path under a file, a place
    without write permission."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputPathError(f"{what} {path} is a file; give a directory (a new or an existing one)")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputPathError(f"{what} {path} is not writable (no permission, or a read-only file system)")
        return
    _check_parent_writable(path, what)
