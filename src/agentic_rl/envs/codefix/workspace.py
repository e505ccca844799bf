"""An episode's workspace: a fresh git repository with one commit, in a private temporary directory.

The agent's file tools go through `resolve`, which confines every path to the workspace: absolute paths, `..`
and symlinks that lead out are errors the agent sees as observations. The directory is removed by `close()`, by
the context manager, and — if the episode crashes before either — by a finalizer when the object is collected.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

from ...tools import ToolError

MAX_READ_LINES = 200


class Workspace:
    def __init__(self, files: dict[str, str], prefix: str = "codefix-"):
        self.root = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)
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
        p = Path(path.strip())
        if p.is_absolute():
            raise ToolError(f"absolute paths are not allowed ({path!r}); use a path relative to the repository")
        if ".." in p.parts:
            raise ToolError(f"'..' is not allowed in paths ({path!r})")
        if p.parts and p.parts[0] == ".git":
            raise ToolError("the .git directory is not part of the task")
        real = (self.root / p).resolve()
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{path!r} leads outside the repository")
        return real

    # -- what the tools do --

    def list_files(self) -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = sorted(d for d in dirnames if d != ".git" and d != "__pycache__")
            for name in sorted(filenames):
                out.append(str(Path(dirpath, name).relative_to(self.root)))
        return out

    def read(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        real = self.resolve(path)
        if not real.is_file():
            raise ToolError(f"no such file: {path!r}; list_files() shows what exists")
        lines = real.read_text(errors="replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        start = max(1, start_line or 1)
        end = min(len(lines), end_line or len(lines), start + MAX_READ_LINES - 1)
        if start > max(1, len(lines)):
            raise ToolError(f"start_line {start} is past the end of {path!r} ({len(lines)} lines)")
        return "\n".join(f"{i:4d}| {lines[i - 1]}" for i in range(start, end + 1))

    def edit(self, path: str, old: str, new: str) -> str:
        real = self.resolve(path)
        if not real.is_file():
            raise ToolError(f"no such file: {path!r}; list_files() shows what exists")
        if not old:
            raise ToolError("old must be the exact, non-empty text to replace")
        text = real.read_text(errors="replace")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old text not found in {path!r}; read_file shows the exact current text")
        if count > 1:
            raise ToolError(f"old text occurs {count} times in {path!r}; include more lines so it is unique")
        real.write_text(text.replace(old, new, 1))
        return f"edited {path}: replaced {old.count(chr(10)) + 1} line(s)"

    def snapshot(self) -> dict[str, bytes]:
        """Every file (not .git), by relative path: what grading starts from."""
        return {rel: (self.root / rel).read_bytes() for rel in self.list_files() if not (self.root / rel).is_symlink()}
