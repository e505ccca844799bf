"""The child side of the sandbox: enter the jail after fork, and kill everything a sandbox uid left behind.

Standard library only, and no import of the `agentic_rl` package: the fork server (`runner.py`) loads this file by
path, so that its memory — which every sandboxed child inherits — never holds the corpus or its hidden tests.

The jail is an allow-list. In new mount, network and IPC namespaces the child builds a fresh root on an empty
tmpfs and moves into it with pivot_root, so nothing of the host exists there except what the parent's layout
names (`sandbox.layout()`): the Python runtime and the test framework bound read-only, a few device files, a
private size-capped /tmp, and the workspace (read-write). Then it closes every descriptor but 0–2, sets its
rlimits and drops to its own unprivileged uid.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
import time

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC = 0x00020000, 0x40000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
TMP_SIZE = b"size=16m,mode=1777"


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc: ctypes.CDLL, src: str | None, dst: str, fstype: str | None, flags: int, opts: bytes | None,
           what: str) -> None:
    _check(libc.mount(src.encode() if src else None, dst.encode(), fstype.encode() if fstype else None, flags, opts),
           what)


def _mountpoint(path: str, is_dir: bool) -> None:
    """An empty directory or file at `path` to mount onto (inside the new root's tmpfs)."""
    if is_dir:
        os.makedirs(path, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if not os.path.lexists(path):
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def build_root(libc: ctypes.CDLL, new_root: str, layout: list[list[str]], workspace: str) -> None:
    """Mount a tmpfs at `new_root` and lay out the sandbox's whole filesystem in it.

    layout, in order: ["symlink", path, target], ["bind", path] (read-only, at the same path), ["dev", path] (a
    device file, read-write), ["empty", dir] (an empty read-only directory over what a bind brought in), ["tmp", dir]
    (the private /tmp). The workspace is bound read-write last.
    """
    _mount(libc, "tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755", "tmpfs root")
    for op in layout:
        kind, path = op[0], op[1]
        inside = new_root + path
        if kind == "symlink":
            os.makedirs(os.path.dirname(inside), exist_ok=True)
            if not os.path.lexists(inside):
                os.symlink(op[2], inside)
        elif kind in ("bind", "dev"):
            _mountpoint(inside, os.path.isdir(path))
            _mount(libc, path, inside, None, MS_BIND | MS_REC, None, f"bind {path}")
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | (0 if kind == "dev" else MS_NODEV)
            _mount(libc, None, inside, None, flags & ~MS_RDONLY if kind == "dev" else flags, None, f"seal {path}")
        elif kind == "empty":
            _mountpoint(inside, True)
            _mount(libc, "tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, b"size=1m,mode=755", f"empty {path}")
        elif kind == "tmp":
            _mountpoint(inside, True)
            _mount(libc, "tmpfs", inside, "tmpfs", MS_NOSUID | MS_NODEV, TMP_SIZE, f"tmpfs {path}")
        else:
            raise ValueError(f"unknown layout entry {op!r}")
    _mountpoint(new_root + workspace, True)
    _mount(libc, workspace, new_root + workspace, None, MS_BIND, None, "bind the workspace")
    _mount(libc, None, new_root + workspace, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, None,
           "seal the workspace")


def pivot(libc: ctypes.CDLL, new_root: str) -> None:
    """Make `new_root` the root and detach the old one, so no path leads back to the host."""
    os.chdir(new_root)
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:  # an architecture we have no syscall number for: chroot, still without the old root's paths
        _check(libc.chroot(b"."), "chroot")
    else:
        _check(libc.syscall(number, b".", b"."), "pivot_root")
        _check(libc.umount2(b".", MNT_DETACH), "detach the old root")
    os.chdir("/")


def enter(workspace: str, limits: dict[str, int], uid: int | None, jail: dict | None,
          close_fds: bool = True) -> None:
    """Call in the child between fork and exec (or before running code in a forked child).

    limits: cpu_seconds, memory_bytes, file_bytes, open_files, processes. uid None: rlimits and a new session only.
    jail: {"root": an empty directory to build the new root on, "layout": see build_root}; with uid only.
    close_fds: close every descriptor above 2 (the fork server's pipes among them).
    """
    os.setsid()
    if uid is not None:
        assert jail is not None
        libc = ctypes.CDLL(None, use_errno=True)
        _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
        _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None, "make / private")
        build_root(libc, jail["root"], jail["layout"], workspace)
        pivot(libc, jail["root"])
        os.chdir(workspace)
    if close_fds:
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    # CPU: SIGXCPU at the limit, SIGKILL a second later for a program that catches it (`cpu_limited` tells both).
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 1))
    for res, value in ((resource.RLIMIT_AS, limits["memory_bytes"]), (resource.RLIMIT_FSIZE, limits["file_bytes"]),
                       (resource.RLIMIT_NOFILE, limits["open_files"]), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_NPROC, limits["processes"])):
        resource.setrlimit(res, (value, value))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def cpu_limited(status: int, cpu_seconds: float, limit: float) -> bool:
    """Whether a wait status and the CPU time the process used say that the CPU-time limit ended it (SIGXCPU, or
    the SIGKILL one second of CPU later), not a crash or a memory kill."""
    if not os.WIFSIGNALED(status):
        return False
    sig = os.WTERMSIG(status)
    return sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_seconds >= limit)


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
