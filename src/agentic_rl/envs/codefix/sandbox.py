"""Run untrusted code (the agent's edits, the tests) in a contained child process.

Threat model: everything the agent writes — module code, test edits, files it makes at run time — is hostile, and
runs as root would let it. The trusted side (the trainer, the fork server, grading's comparison) keeps the
secrets: the corpus's original sources, hidden test cases and their expected values.

Every run gets, in a fresh child:
  - an allow-list filesystem (`jail.py`): new mount, network and IPC namespaces and a root built from nothing, in
    which exist only the Python runtime (interpreter, its shared libraries, the standard library) and the test
    framework (pytest and what it needs) read-only, /dev/null, /dev/zero, /dev/random and /dev/urandom, a private
    16 MiB /tmp, and the workspace read-write. No project checkout, no `.git` but the task's own, no home, no /run,
    no /dev/shm, no /proc, no other site-packages; SysV IPC objects die with the namespace;
  - only descriptors 0–2 (stdin, and files for stdout and stderr that the trusted parent made and reads back, at
    most OUTPUT_CAP of each);
  - its own unprivileged uid (it owns only the workspace), RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE,
    RLIMIT_NPROC, RLIMIT_CORE = 0, a new session, `python -I` and a minimal environment;
  - a wall-clock timeout; after the run every process of the sandbox uid is killed — nothing is left behind.
Without root (or on a system that refuses namespaces) only the rlimits, the session and the timeout remain:
`Sandbox.isolation` says which, and a warning is logged once.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.metadata
import os
import re
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from ...runtime.tools import InfrastructureError
from . import jail
from .files import read_tail, remove_tree, walk

PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # .../agentic_rl: never inside the sandbox
TEST_FRAMEWORK = "pytest"  # this distribution and its requirements are the only packages the sandbox sees
OUTPUT_CAP = 1 << 20  # bytes of a run's stdout and of its stderr read back (the tail)
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


@dataclass(frozen=True)
class Limits:
    """A run's limits. CPU time decides when a run has taken too long, so the same program meets the same limit
    however busy the machine is; the wall clock is only the backstop for a program that waits without computing
    (sleeps, blocks), and should leave room for a loaded machine (a few times `cpu_seconds`). Either ends the run
    as a timeout."""

    wall_seconds: float = 30.0
    cpu_seconds: int = 10
    memory_bytes: int = 1 << 30
    file_bytes: int = 8 << 20
    processes: int = 32
    open_files: int = 256


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # None when a time limit ended the run
    stdout: str
    stderr: str
    timed_out: bool  # the CPU-time limit, or the wall-clock backstop, ended the run
    wall_seconds: float
    cpu_seconds: float = 0.0  # of the run's main process

    @property
    def outcome(self) -> str:
        """'ok', 'failed' (non-zero exit), 'timeout' (a time limit), 'killed:SIGNAME' (another signal)."""
        if self.timed_out:
            return "timeout"
        if self.returncode is not None and self.returncode < 0:
            return f"killed:{signal.Signals(-self.returncode).name}"
        return "ok" if self.returncode == 0 else "failed"


# -- the allow-list ---------------------------------------------------------------------------------------------------

def _resolving(path: str, limit: int = 40) -> list[list[str]]:
    """Layout entries that make `path` resolve inside the new root as on the host: each symlink on the way
    (replicated), then the file or directory it ends at (bound)."""
    ops: list[list[str]] = []
    todo = os.path.abspath(path)
    for _ in range(limit):
        parts = todo.strip("/").split("/")
        for i in range(len(parts)):
            cur = "/" + "/".join(parts[:i + 1])
            if os.path.islink(cur):
                target = os.readlink(cur)
                ops.append(["symlink", cur, target])
                todo = os.path.normpath(os.path.join(os.path.dirname(cur), target, *parts[i + 1:]))
                break
        else:
            return ops + [["bind", todo]]
    raise OSError(f"too many symlinks resolving {path}")


def _framework_entries() -> dict[str, list[str]]:
    """site-packages dir → the top-level entries of the test framework's distributions (their requirements too)."""
    out: dict[str, list[str]] = {}
    seen, todo = set(), [TEST_FRAMEWORK]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional requirement that is not installed
        for req in dist.requires or []:
            r = Requirement(req)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
        site = os.path.realpath(str(dist.locate_file("")))
        tops = {str(f).split("/")[0] for f in dist.files or []} - {"..", "__pycache__", ""}
        out.setdefault(site, []).extend(sorted(t for t in tops if os.path.lexists(os.path.join(site, t))))
    return out


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


@functools.lru_cache(maxsize=1)
def layout() -> tuple[tuple[str, ...], ...]:
    """What exists inside the sandbox, as entries for `jail.build_root` (computed once per process). The private
    /tmp comes first, so that what is bound from under the host's /tmp (a venv there) lands inside it."""
    ops: list[list[str]] = [["tmp", "/tmp"]]
    # Shared libraries and the dynamic loader: /lib* (links into /usr on merged-/usr systems) and /usr/lib*.
    for d in ("/lib", "/lib32", "/lib64", "/libx32", "/usr/lib", "/usr/lib32", "/usr/lib64", "/usr/libx32",
              "/etc/ld.so.cache"):
        if os.path.lexists(d):
            ops += _resolving(d)
    # The interpreter (through the venv's links), libpython, the standard library and its extension modules.
    ops += _resolving(sys.executable)
    for lib in glob.glob(os.path.join(sysconfig.get_config_var("LIBDIR") or "/nonexistent", "libpython*")):
        ops += _resolving(lib)
    ops += [["bind", p] for p in sys.path if _under(p, [sys.base_prefix]) and os.path.isdir(p)
            and "-packages" not in p]
    if sys.prefix != sys.base_prefix and os.path.exists(os.path.join(sys.prefix, "pyvenv.cfg")):
        ops += _resolving(os.path.join(sys.prefix, "pyvenv.cfg"))
    ops += [["dev", d] for d in DEVICES if os.path.exists(d)]
    # Drop binds that sit inside another bind (lib-dynload inside the stdlib) and repeats; keep the order.
    binds = [op[1] for op in ops if op[0] == "bind"]
    out, done = [], set()
    for op in ops:
        key = tuple(op)
        if key in done or (op[0] == "bind" and _under(op[1], [b for b in binds if b != op[1]])):
            continue
        done.add(key)
        out.append(op)
    bound = [op[1] for op in out if op[0] == "bind"]
    # Site-packages: every one inside a bind is covered by an empty directory; the interpreter's own get an empty
    # directory with only the test framework bound into it.
    framework = _framework_entries()
    candidates = {p for b in bound if os.path.isdir(b) for p in glob.glob(os.path.join(b, "*", "*-packages"))}
    candidates |= {p for b in bound if os.path.isdir(b) for p in glob.glob(os.path.join(b, "*-packages"))}
    for site in sorted(candidates | set(framework)):
        if os.path.isdir(site) and (_under(site, bound) or site in framework):
            out.append(["empty", site])
            out += [["bind", os.path.join(site, entry)] for entry in framework.get(site, [])]
    if _under(PACKAGE_DIR, bound) and not any(op[0] == "empty" and _under(PACKAGE_DIR, [op[1]]) for op in out):
        out.append(["empty", PACKAGE_DIR])
    return tuple(tuple(op) for op in out)


# -- runs --------------------------------------------------------------------------------------------------------------

def _cold_run(argv: list[str], workspace: str, limits: Limits, uid: int | None, env: dict[str, str],
              stdin: str) -> RunResult:
    """One jailed run in a fresh interpreter (isolate=uid given)."""
    io = tempfile.mkdtemp(prefix="agentic-rl-run-")
    try:
        os.mkdir(os.path.join(io, "root"))
        Path(io, "stdin").write_text(stdin)
        jail_spec = {"root": os.path.join(io, "root"), "layout": [list(op) for op in layout()]} if uid else None
        t0 = time.monotonic()
        with open(os.path.join(io, "stdin"), "rb") as i, open(os.path.join(io, "stdout"), "wb") as o, \
                open(os.path.join(io, "stderr"), "wb") as e:
            proc = subprocess.Popen(argv, cwd=workspace, env=env, stdin=i, stdout=o, stderr=e, close_fds=True,
                                    preexec_fn=lambda: jail.enter(workspace, dataclasses.asdict(limits), uid,
                                                                  jail_spec, close_fds=False))
            wall_out, status, usage = False, 0, None
            try:
                while True:  # wait4, not Popen.wait: the CPU time the run used comes with its exit status
                    done, status, usage = os.wait4(proc.pid, os.WNOHANG)
                    if done:
                        break
                    if time.monotonic() - t0 > limits.wall_seconds:
                        wall_out = True
                        break
                    time.sleep(0.001)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if usage is None or wall_out:
                    _, status, usage = os.wait4(proc.pid, 0)
                proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        cpu = usage.ru_utime + usage.ru_stime
        timed_out = wall_out or jail.cpu_limited(status, cpu, limits.cpu_seconds)
        return read_result(io, None if timed_out else proc.returncode, timed_out, time.monotonic() - t0, cpu)
    finally:
        remove_tree(io)


def read_result(io: str, returncode: int | None, timed_out: bool, wall: float, cpu: float = 0.0) -> RunResult:
    """A finished run's result from the files its output went to (the last OUTPUT_CAP bytes of each)."""
    out, err = (read_tail(os.path.join(io, name), OUTPUT_CAP).decode(errors="replace") for name in ("stdout", "stderr"))
    return RunResult(returncode, out, err, timed_out, wall, cpu)


@functools.lru_cache(maxsize=1)
def isolation_available() -> bool:
    """True when the full jail works here: we are root on Linux and the kernel gives us the namespaces."""
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    ws = tempfile.mkdtemp(prefix="agentic-rl-probe-")
    try:
        os.chown(ws, 199_999, 199_999)
        res = _cold_run([sys.executable, "-I", "-c", "print('ok')"], ws, Limits(wall_seconds=10), 199_999,
                        {"PATH": "/usr/bin:/bin"}, "")
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        remove_tree(ws)
    return res.returncode == 0 and res.stdout.strip() == "ok"


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
    raise InfrastructureError("no free sandbox uid: 100 uids of this process still have processes")


class Sandbox:
    """Runs commands with `workspace` as the working directory and the only writable place."""

    def __init__(self, workspace: str | Path, limits: Limits | None = None, isolate: bool | None = None,
                 warm: bool = True):
        """warm: run `python -m pytest` and `python -c` through the fork server (runner.py), same jail, less
        start-up (no interpreter to start, pytest already imported); False: a fresh interpreter per run."""
        global _warned
        self.warm = warm
        self.workspace = Path(workspace).resolve()
        self.limits = limits or Limits()
        self.isolate = isolation_available() if isolate is None else isolate
        self.uid = _next_uid() if self.isolate else None
        self.isolation = "allow-list root+uid+netns+ipcns+rlimits" if self.isolate else "rlimits-only"
        if not self.isolate and not _warned:
            _warned = True
            warnings.warn("codefix sandbox: not root or namespaces unavailable — running untrusted code with rlimits "
                          "and a timeout only (no filesystem or network isolation, no separate uid)",
                          RuntimeWarning, stacklevel=2)

    def env(self) -> dict[str, str]:
        return {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": str(self.workspace),
                "TMPDIR": str(self.workspace), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
                "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}

    def run(self, argv: list[str], stdin: str | None = None, wall_seconds: float | None = None) -> RunResult:
        """Run argv (argv[0] == 'python' means this interpreter, with -I) and return what happened.
        wall_seconds: a shorter time limit for this run (the episode's time left)."""
        limits = self.limits if wall_seconds is None else dataclasses.replace(
            self.limits, wall_seconds=max(0.05, min(self.limits.wall_seconds, wall_seconds)))
        if self.isolate:
            chown_tree(self.workspace, self.uid)  # files the parent wrote since the last run
        if self.warm and argv[:3] == ["python", "-m", "pytest"]:
            return self._run_warm({"kind": "pytest", "args": argv[3:]}, stdin, limits)
        if self.warm and argv[:2] == ["python", "-c"] and len(argv) == 3:
            return self._run_warm({"kind": "code", "code": argv[2]}, stdin, limits)
        if argv and argv[0] == "python":
            # -I ignores PYTHONDONTWRITEBYTECODE, so -B: a .pyc written in the same second as an edit of the same
            # size would be taken as fresh, and the next run would test the code from before the edit.
            argv = [sys.executable, "-I", "-B", *argv[1:]]
        res = _cold_run(argv, str(self.workspace), limits, self.uid, self.env(), stdin or "")
        self._after_run()
        return res

    def _run_warm(self, req: dict, stdin: str | None, limits: Limits) -> RunResult:
        from .runner import server

        res = server().run({**req, "workspace": str(self.workspace), "limits": dataclasses.asdict(limits),
                            "uid": self.uid, "env": self.env(), "wall_seconds": limits.wall_seconds},
                           stdin or "", layout() if self.isolate else None)
        self._after_run()
        return res

    def _after_run(self) -> None:
        if self.isolate and jail.any_process(self.uid):
            jail.kill_uid(self.uid)
        if self.isolate and jail.any_process(self.uid):
            # Killed processes count against RLIMIT_NPROC until they are reaped; the next run gets a fresh uid so a
            # fork bomb's zombies cannot starve it.
            self.uid = _next_uid()


def chown_tree(root: Path, uid: int) -> None:
    """Give the sandbox uid the workspace (at most files.MAX_ENTRIES entries), except `.git`, which stays root's:
    readable, not writable from inside. A root directory that is root's and sticky (a `Workspace`) stays so, so
    the sandbox can add files but not move `.git` away."""
    st = os.lstat(root)
    if not (st.st_uid == 0 and st.st_mode & stat.S_ISVTX):
        os.lchown(root, uid, uid)
    for rel, _ in walk(root, skip=(".git",)):
        try:
            os.lchown(os.path.join(root, rel), uid, uid)
        except OSError:
            pass
