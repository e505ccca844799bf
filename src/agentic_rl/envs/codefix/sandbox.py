"""Run untrusted code (the agent's edits, the tests) in a contained child process.

Every run gets, in a fresh child:
  - a wall-clock timeout; on expiry the whole process group is killed, and so is every process of the sandbox uid
    (children that left the group with setsid) — nothing is left behind;
  - RLIMIT_CPU, RLIMIT_AS (memory), RLIMIT_FSIZE (file size), RLIMIT_NOFILE, RLIMIT_CORE = 0, and RLIMIT_NPROC;
  - when we are root: its own unprivileged uid (RLIMIT_NPROC does nothing for root, so a fork bomb needs this), a new
    network namespace (no network, not even the host's loopback), and a new mount namespace in which /tmp, /var/tmp,
    /dev/shm, /root and /home are fresh, empty tmpfs (the workspace and the Python installation are bound back in
    at their own paths) and the project's own
    package directory is hidden (it holds the corpus, and with it the hidden tests). The uid owns only the
    workspace, so it can write nowhere else;
  - `python -I` (no user site, no PYTHON* variables) and a minimal environment.
Without root (or on a system that refuses namespaces) only the rlimits, the process group and the timeout remain:
`Sandbox.isolation` says which, and a warning is logged once.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from . import jail

PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # .../agentic_rl: hidden inside the sandbox


@dataclass(frozen=True)
class Limits:
    wall_seconds: float = 10.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    file_bytes: int = 8 << 20
    processes: int = 32
    open_files: int = 256


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # None when killed for the timeout
    stdout: str
    stderr: str
    timed_out: bool
    wall_seconds: float

    @property
    def outcome(self) -> str:
        """'ok', 'failed' (non-zero exit), 'timeout', 'killed:SIGNAME' (e.g. SIGXCPU, SIGKILL after a memory bomb)."""
        if self.timed_out:
            return "timeout"
        if self.returncode is not None and self.returncode < 0:
            return f"killed:{signal.Signals(-self.returncode).name}"
        return "ok" if self.returncode == 0 else "failed"


@functools.lru_cache(maxsize=1)
def isolation_available() -> bool:
    """True when we can give the child its own uid and namespaces (we are root and the kernel allows them)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", "pass"], preexec_fn=lambda: jail._check(
            ctypes.CDLL(None, use_errno=True).unshare(jail.CLONE_NEWNS | jail.CLONE_NEWNET), "unshare"), capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


_warned = False
_uid_turn = 0


def _next_uid() -> int:
    """A uid no process has: 100 per parent process (by pid), taken in turn, skipping any still in use."""
    global _uid_turn
    base = 200_000 + (os.getpid() % 10_000) * 100
    for _ in range(100):
        _uid_turn = (_uid_turn + 1) % 100
        if not jail.any_process(base + _uid_turn):
            return base + _uid_turn
    raise RuntimeError("no free sandbox uid: 100 uids of this process still have processes")


class Sandbox:
    """Runs commands with `workspace` as the working directory and the only writable place."""

    def __init__(self, workspace: str | Path, limits: Limits | None = None, isolate: bool | None = None,
                 warm: bool = True):
        """warm: run `python -m pytest` and `python -c` through the fork server (runner.py), same jail, ~10× less
        start-up; False: a fresh interpreter per run."""
        global _warned
        self.warm = warm
        self.workspace = Path(workspace).resolve()
        self.limits = limits or Limits()
        self.isolate = isolation_available() if isolate is None else isolate
        self.uid = _next_uid() if self.isolate else None
        self.isolation = ("uid+netns+mountns+rlimits" if self.isolate else "rlimits-only")
        if not self.isolate and not _warned:
            _warned = True
            warnings.warn("codefix sandbox: not root or namespaces unavailable — running untrusted code with rlimits "
                          "and a timeout only (no network isolation, no separate uid, writes not confined)",
                          RuntimeWarning, stacklevel=2)
        if self.isolate:
            _chown_tree(self.workspace, self.uid)

    def env(self) -> dict[str, str]:
        return {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(self.workspace),
                "TMPDIR": str(self.workspace), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}

    def run(self, argv: list[str], stdin: str | None = None) -> RunResult:
        """Run argv (argv[0] == 'python' means this interpreter, with -I) and return what happened."""
        if self.isolate:
            _chown_tree(self.workspace, self.uid)  # files the parent wrote since the last run
        if self.warm and argv[:3] == ["python", "-m", "pytest"]:
            return self._run_warm({"kind": "pytest", "args": argv[3:]}, stdin)
        if self.warm and argv[:2] == ["python", "-c"] and len(argv) == 3:
            return self._run_warm({"kind": "code", "code": argv[2]}, stdin)
        if argv and argv[0] == "python":
            # -I ignores PYTHONDONTWRITEBYTECODE, so -B: a .pyc written in the same second as an edit of the same
            # size would be taken as fresh, and the next run would test the code from before the edit.
            argv = [sys.executable, "-I", "-B", *argv[1:]]
        t0 = time.monotonic()
        # Output goes to files, not pipes: a detached grandchild holding a pipe open cannot stall us, and a chatty
        # child cannot block on a full pipe. RLIMIT_FSIZE caps them.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, cwd=self.workspace, env=self.env(),
                                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=out, stderr=err, preexec_fn=self._enter, close_fds=True)
            timed_out = False
            try:
                if stdin is not None:
                    try:
                        proc.stdin.write(stdin.encode())
                        proc.stdin.close()
                    except BrokenPipeError:
                        pass
                proc.wait(timeout=self.limits.wall_seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                self._kill_all(proc)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        return RunResult(None if timed_out else proc.returncode, stdout.decode(errors="replace"),
                         stderr.decode(errors="replace"), timed_out, time.monotonic() - t0)

    # -- inside the child, between fork and exec --

    def _run_warm(self, req: dict, stdin: str | None) -> RunResult:
        from .runner import server

        reply = server().request({**req, "workspace": str(self.workspace), "limits": dataclasses.asdict(self.limits),
                                  "uid": self.uid, "hide": PACKAGE_DIR if self.isolate else None, "env": self.env(),
                                  "wall_seconds": self.limits.wall_seconds, "stdin": stdin or ""})
        if reply["leftovers"] and self.isolate:
            self.uid = _next_uid()  # the old uid's zombies count against RLIMIT_NPROC until reaped
        return RunResult(reply["returncode"], reply["stdout"], reply["stderr"], reply["timed_out"],
                         reply["wall_seconds"])

    def _enter(self) -> None:
        jail.enter(str(self.workspace), dataclasses.asdict(self.limits), self.uid, PACKAGE_DIR)

    # -- cleanup --

    def _kill_all(self, proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.isolate and jail.any_process(self.uid):
            jail.kill_uid(self.uid)
            # Killed processes count against RLIMIT_NPROC until they are reaped; the next run gets a fresh uid so a
            # fork bomb's zombies cannot starve it.
            self.uid = _next_uid()


def _chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.lchown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)
