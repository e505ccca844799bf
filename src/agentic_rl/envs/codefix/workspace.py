"""An episode's workspace: a fresh git repository with one commit, in a private temporary directory.

The agent's file tools go through `resolve`, which confines every path to the workspace: absolute paths, `..`,
`.git` (by name or through a link) and links that lead out are errors the agent sees as observations. Files are
read through `files.read_regular` (regular files only, size-capped, never blocking) and listed through a capped
walk. The directory is removed by `close()`, by the context manager, and — if the episode crashes before either —
by a finalizer when the object is collected.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import weakref
from pathlib import Path

from ...runtime.tools import ToolError
from .files import UnsafeFile, read_regular, remove_tree, walk

MAX_READ_LINES = 200
MAX_LIST = 200  # files list_files shows
MAX_FILE_BYTES = 1 << 20  # a file the tools or grading will read
MAX_SNAPSHOT_BYTES = 8 << 20  # all the source files grading takes, together


class Workspace:
    def __init__(self, files: dict[str, str], prefix: str = "codefix-"):
        self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        self._finalizer = weakref.finalize(self, remove_tree, str(self.root))
        for rel, text in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git = ["git", "-c", "user.name=codefix", "-c", "user.email=codefix@localhost", "-c", "init.defaultBranch=main",
               "-c", "commit.gpgsign=false"]
        subprocess.run([*git, "init", "-q"], cwd=self.root, check=True)
        subprocess.run([*git, "add", "-A"], cwd=self.root, check=True)
        subprocess.run([*git, "commit", "-q", "-m", "task"], cwd=self.root, check=True,
                       env={**os.environ, "GIT_AUTHOR_DATE": "2000-01-01T00:00:00", "GIT_COMMITTER_DATE":
                            "2000-01-01T00:00:00"})
        # Sticky and root's: the sandbox may add files here and change its own, but cannot move or remove `.git`
        # (root's too, read-only to it).
        os.chmod(self.root, 0o1777)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    # -- confinement --

    def resolve(self, path: str) -> Path:
        """The real path of `path` inside the workspace, or a ToolError saying why not."""
        if not isinstance(path, str) or not path.strip():
            raise ToolError("path must be a non-empty relative path, for example 'slug.py'")
        if "\x00" in path or len(path) > 1000:
            raise ToolError("path must be a relative path of printable characters, at most 1000 long")
        p = Path(path.strip())
        if p.is_absolute():
            raise ToolError(f"absolute paths are not allowed ({path!r}); use a path relative to the repository")
        if ".." in p.parts:
            raise ToolError(f"'..' is not allowed in paths ({path!r})")
        try:
            real = (self.root / p).resolve()
        except (OSError, RuntimeError) as e:
            raise ToolError(f"cannot resolve {path!r}: {type(e).__name__}") from None
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{path!r} leads outside the repository")
        if real != self.root and real.relative_to(self.root).parts[0] == ".git":
            raise ToolError("the .git directory is not part of the task")
        return real

    def read_bytes(self, path: str) -> bytes:
        """A file's bytes, if it is a regular file of at most MAX_FILE_BYTES; ToolError otherwise."""
        real = self.resolve(path)
        try:
            return read_regular(real, MAX_FILE_BYTES)
        except UnsafeFile as e:
            if not real.exists():
                raise ToolError(f"no such file: {path!r}; list_files() shows what exists") from None
            raise ToolError(f"{path!r} cannot be read: {e}") from None

    # -- what the tools do --

    def list_files(self) -> list[str]:
        """Regular files (and links) by relative path, without .git and __pycache__; at most MAX_LIST."""
        return [rel for rel, _ in self._files()][:MAX_LIST]

    def _files(self) -> list[tuple[str, bool]]:
        return [(rel, is_file) for rel, is_file in walk(self.root)
                if is_file or not (self.root / rel).is_dir() or (self.root / rel).is_symlink()]

    def read(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        lines = self.read_bytes(path).decode(errors="replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        start = max(1, start_line or 1)
        end = min(len(lines), end_line or len(lines), start + MAX_READ_LINES - 1)
        if start > max(1, len(lines)):
            raise ToolError(f"start_line {start} is past the end of {path!r} ({len(lines)} lines)")
        return "\n".join(f"{i:4d}| {lines[i - 1]}" for i in range(start, end + 1))

    def edit(self, path: str, old: str, new: str) -> str:
        text = self.read_bytes(path).decode(errors="replace")
        if not old:
            raise ToolError("old must be the exact, non-empty text to replace")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old text not found in {path!r}; read_file shows the exact current text")
        if count > 1:
            raise ToolError(f"old text occurs {count} times in {path!r}; include more lines so it is unique")
        fd = os.open(self.resolve(path), os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "w") as f:
            f.write(text.replace(old, new, 1))
        return f"edited {path}: replaced {old.count(chr(10)) + 1} line(s)"

    def snapshot(self) -> tuple[dict[str, bytes], list[str]]:
        """What grading starts from: every regular `.py` file (not under .git), by relative path, and notes on
        what it passed over (other kinds of file, files over MAX_FILE_BYTES, past MAX_SNAPSHOT_BYTES in all)."""
        files: dict[str, bytes] = {}
        notes: list[str] = []
        total = 0
        for rel, is_file in self._files():
            if not rel.endswith(".py"):
                continue
            if not is_file:
                notes.append(f"ignored {rel} (not a regular file)")
                continue
            try:
                data = read_regular(self.root / rel, min(MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES - total))
            except UnsafeFile as e:
                notes.append(f"ignored {rel} ({e})")
                continue
            files[rel] = data
            total += len(data)
        return files, notes
