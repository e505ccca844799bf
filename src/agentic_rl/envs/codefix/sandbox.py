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
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 1, 2, 4
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/root", "/home")  # covered by empty tmpfs inside the sandbox
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


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def isolation_available() -> bool:
    """True when we can give the child its own uid and namespaces (we are root and the kernel allows them)."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", "pass"], preexec_fn=lambda: _check(
            _libc().unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare"), capture_output=True, timeout=10)
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
        if not _any_process(base + _uid_turn):
            return base + _uid_turn
    raise RuntimeError("no free sandbox uid: 100 uids of this process still have processes")


class Sandbox:
    """Runs commands with `workspace` as the working directory and the only writable place."""

    def __init__(self, workspace: str | Path, limits: Limits | None = None, isolate: bool | None = None):
        global _warned
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
        if argv and argv[0] == "python":
            argv = [sys.executable, "-I", *argv[1:]]
        if self.isolate:
            _chown_tree(self.workspace, self.uid)  # files the parent wrote since the last run
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

    def _enter(self) -> None:
        os.setsid()
        lim = self.limits
        if self.isolate:
            libc = _libc()
            _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
            _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
            # The workspace (and the interpreter, if it lives there too) may sit under a directory about to be covered
            # by a tmpfs: open them in the new namespace first, then bind them back at their own paths.
            ws = str(self.workspace)
            interpreter = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
            keep = [p for p in dict.fromkeys([ws, sys.prefix, sys.base_prefix, interpreter])
                    if any(p == d or p.startswith(d + "/") for d in PRIVATE_DIRS)]
            fds = {p: os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in keep}
            for d in PRIVATE_DIRS:
                if os.path.isdir(d):
                    _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV,
                                      b"size=16m,mode=1777" if "tmp" in d or "shm" in d else b"size=1m,mode=755"),
                           f"tmpfs on {d}")
            for p, fd in fds.items():
                os.makedirs(p, exist_ok=True)
                _check(libc.mount(f"/proc/self/fd/{fd}".encode(), p.encode(), None, MS_BIND, None), f"bind {p}")
                os.close(fd)
            if os.path.isdir(PACKAGE_DIR) and not ws.startswith(PACKAGE_DIR):
                _check(libc.mount(b"tmpfs", PACKAGE_DIR.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                                  b"size=4k,mode=555"), "hide the package")
            os.chdir(ws)
        for res, value in ((resource.RLIMIT_CPU, lim.cpu_seconds), (resource.RLIMIT_AS, lim.memory_bytes),
                           (resource.RLIMIT_FSIZE, lim.file_bytes), (resource.RLIMIT_NOFILE, lim.open_files),
                           (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, lim.processes)):
            resource.setrlimit(res, (value, value))
        if self.isolate:
            os.setgroups([])
            os.setgid(self.uid)
            os.setuid(self.uid)

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
        if self.isolate and _any_process(self.uid):
            _kill_uid(self.uid)
            # Killed processes count against RLIMIT_NPROC until they are reaped; the next run gets a fresh uid so a
            # fork bomb's zombies cannot starve it.
            self.uid = _next_uid()


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) from a child that has become that uid, repeated until none is left
    alive (a fork bomb keeps forking between sweeps), then wait for the helper."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    os.kill(-1, signal.SIGSTOP)  # stopped processes cannot fork: a fork bomb freezes
                    os.kill(-1, signal.SIGSTOP)
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
                if not [p for p in live_processes(uid) if p != os.getpid()]:
                    break
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _any_process(uid: int) -> bool:
    """Whether `uid` has any process at all, zombies included."""
    return bool(live_processes(uid, zombies=True))


def live_processes(uid: int, zombies: bool = False) -> list[int]:
    """Pids of `uid` that are not zombies (zombies hold nothing; init reaps them)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        is_zombie = fields.get("State", "").strip().startswith("Z")
        if fields.get("Uid", "").split()[:1] == [str(uid)] and (zombies or not is_zombie):
            out.append(int(entry))
    return out


def _chown_tree(root: Path, uid: int) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        os.lchown(dirpath, uid, uid)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, uid)
