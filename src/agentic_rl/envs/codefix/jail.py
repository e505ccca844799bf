"""The child side of the sandbox: enter the jail after fork, and kill everything a sandbox uid left behind.

Standard library only, and no import of the `agentic_rl` package: the fork server (`runner.py`) loads this file by
path, so that its memory — which every sandboxed child inherits — never holds the corpus or its hidden tests.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
import time

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE, MS_RDONLY, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 1, 2, 4
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/root", "/home")  # covered by empty tmpfs inside the sandbox


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(workspace: str, limits: dict[str, int], uid: int | None, hide: str | None) -> None:
    """Call in the child between fork and exec (or before running code in a forked child).

    limits: cpu_seconds, memory_bytes, file_bytes, open_files, processes. uid None: rlimits and a new session only.
    hide: a directory to cover with an empty read-only tmpfs (the project's package).
    """
    os.setsid()
    if uid is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET), "unshare")
        _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        # The workspace (and the interpreter, if it lives there too) may sit under a directory about to be covered
        # by a tmpfs: open them in the new namespace first, then bind them back at their own paths.
        interpreter = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
        keep = [p for p in dict.fromkeys([workspace, sys.prefix, sys.base_prefix, interpreter])
                if any(p == d or p.startswith(d + "/") for d in PRIVATE_DIRS)]
        fds = {p: os.open(p, os.O_RDONLY | os.O_DIRECTORY) for p in keep}
        for d in PRIVATE_DIRS:
            if os.path.isdir(d):
                opts = b"size=16m,mode=1777" if "tmp" in d or "shm" in d else b"size=1m,mode=755"
                _check(libc.mount(b"tmpfs", d.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, opts), f"tmpfs on {d}")
        for p, fd in fds.items():
            os.makedirs(p, exist_ok=True)
            _check(libc.mount(f"/proc/self/fd/{fd}".encode(), p.encode(), None, MS_BIND, None), f"bind {p}")
            os.close(fd)
        if hide and os.path.isdir(hide) and not workspace.startswith(hide):
            _check(libc.mount(b"tmpfs", hide.encode(), b"tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV,
                              b"size=4k,mode=555"), "hide the package")
        os.chdir(workspace)
    for res, value in ((resource.RLIMIT_CPU, limits["cpu_seconds"]), (resource.RLIMIT_AS, limits["memory_bytes"]),
                       (resource.RLIMIT_FSIZE, limits["file_bytes"]), (resource.RLIMIT_NOFILE, limits["open_files"]),
                       (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, limits["processes"])):
        resource.setrlimit(res, (value, value))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: kill(-1) from a child that has become that uid, repeated until none is left
    alive (stopping them first: a stopped process cannot fork, so a fork bomb freezes), then reap the helper."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                try:
                    os.kill(-1, signal.SIGSTOP)
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


def any_process(uid: int) -> bool:
    """Whether `uid` has any process at all, zombies included."""
    return bool(live_processes(uid, zombies=True))


def live_processes(uid: int, zombies: bool = False) -> list[int]:
    """Pids of `uid` (not zombies unless asked: zombies hold nothing, but count against RLIMIT_NPROC)."""
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
