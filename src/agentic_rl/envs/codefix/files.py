"""Reading and removing agent-made files without blocking, following links or running out of memory.

Everything under a workspace is written by untrusted code. The trusted side touches it only through these
functions: a walk that never follows links and stops at a count, a read that opens only regular files (never
waiting on a FIFO, never following a final symlink) and stops at a size, and a removal that copes with any depth.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

MAX_ENTRIES = 5000  # directory entries one walk looks at
SKIP_DIRS = (".git", "__pycache__")


class UnsafeFile(Exception):
    """A file the trusted side will not read: not a regular file, a link, or too large."""


def walk(root: Path, limit: int = MAX_ENTRIES, skip: tuple[str, ...] = SKIP_DIRS) -> Iterator[tuple[str, bool]]:
    """(relative path, is a regular file) for every entry under `root`, breadth-first and sorted, without following
    links or entering `skip` directories; stops after `limit` entries. Unreadable directories are passed over."""
    seen = 0
    queue = [""]
    while queue:
        rel_dir = queue.pop(0)
        try:
            with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                return
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_file = entry.is_file(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if entry.name not in skip:
                    queue.append(rel)
                    yield rel, False
            else:
                yield rel, is_file


def read_regular(path: str | Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; UnsafeFile for anything else (a FIFO, socket, device,
    directory, a final symlink, a file too large). Never blocks: the open is non-blocking and checked by fstat."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as e:
        raise UnsafeFile(f"cannot open: {type(e).__name__}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFile("not a regular file")
        if st.st_size > max_bytes:
            raise UnsafeFile(f"larger than {max_bytes} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # grew after the fstat
                raise UnsafeFile(f"larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_tail(path: str | Path, max_bytes: int) -> bytes:
    """The last `max_bytes` of a file the trusted side created itself (a run's captured output)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        f.seek(max(0, f.tell() - max_bytes))
        return f.read(max_bytes)


def remove_tree(path: str | Path) -> None:
    """Remove a directory tree of any shape; `rm -rf` when shutil cannot (a tree deeper than Python's recursion)."""
    if not os.path.lexists(path):
        return
    try:
        shutil.rmtree(path)
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
