"""A warm runner for sandboxed test runs: a fork server with pytest already imported.

A cold `python -m pytest` pays interpreter start-up and pytest's imports before the first test runs, and a GRPO step
makes many test runs (docs/design-notes.md#codefix-warm-test-runner). The server is a separate process started once
(`python -I`, standard library + pytest only). For each request it forks a child that enters the same jail as a cold run
(`jail.enter`), then runs pytest's `main` or a piece of Python in-process and exits; the server enforces the wall-clock
limit and kills everything the uid left behind.

Every sandboxed child is forked from the server, so the server holds no secret: it never imports `agentic_rl`
(the corpus), it never reads what goes in or out of a run, and it starts with an environment of its own (SERVER_ENV),
not the trainer's. The trusted parent writes a run's stdin to a file
in a private directory and reads its stdout and stderr back from files there; the server passes only the paths,
and the child opens them before it enters the jail. Requests and replies are JSON lines over the server's
stdin/stdout; each reply carries its request's nonce, the child keeps no descriptor of the channel, and anything
on the channel that is not the awaited reply ends the server (a fresh one serves the next run) and fails the run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ...runtime.tools import InfrastructureError
from .files import remove_tree

JAIL_PATH = str(Path(__file__).with_name("jail.py"))
GRACE_SECONDS = 10.0
# The server's whole environment: never the trainer's, whose variables (API keys, tokens, credentials) no sandboxed
# program may read. Each run's child replaces it with the sandbox's own allow-list (`Sandbox.env`).
SERVER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # how much longer than a run's own limit the parent waits for the server's reply

SERVER = r'''
import importlib.util, json, os, signal, sys, tempfile, time, traceback
import pytest  # the point of the server: imported once, inherited by every child
# Plugins that only matter in a long session (their cleanup runs gc.collect twice: much of a short run's time).
FAST = ["-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:faulthandler", "-p", "no:pastebin",
        "-p", "no:legacypath", "-p", "no:setuponly", "-p", "no:setupplan", "-p", "no:stepwise"]
spec = importlib.util.spec_from_file_location("codefix_jail", sys.argv[1])
jail = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jail)
reply_fd = os.dup(1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the protocol
# Warm-up: one throwaway session imports the rest of pytest (plugins, collection, assertion rewriting, junitxml).
saved_path = list(sys.path)
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "test_warmup.py"), "w") as f:
        f.write("def test_ok():\n    assert 1 == 1\n")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    pytest.main(FAST + ["-q", "-p", "no:cacheprovider", "--junitxml", os.path.join(d, "j.xml"), d])
sys.path[:] = saved_path  # the warm-up's directory must not stay on every child's import path

def child(req):
    code = 1
    try:
        for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY), (2, "stderr", os.O_WRONLY)):
            opened = os.open(os.path.join(req["io"], name), flags)
            os.dup2(opened, fd)
            os.close(opened)
        os.environ.clear()  # the run's environment is the request's allow-list, nothing of the server's
        os.environ.update(req["env"])
        # No .pyc: one written in the same second as an edit of the same size passes as fresh (mtime and size
        # match), and the next run would silently test the code from before the edit.
        sys.dont_write_bytecode = True
        os.chdir(req["workspace"])
        jail.enter(req["workspace"], req["limits"], req["uid"], req["jail"], close_fds=True)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False)
        sys.stderr = open(2, "w", closefd=False)
        if req["kind"] == "pytest":
            sys.argv = ["pytest", *req["args"]]
            code = int(pytest.main(FAST + req["args"]))
        else:
            sys.argv = ["-c"]
            try:
                exec(compile(req["code"], "<string>", "exec"), {"__name__": "__main__"})
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:
                traceback.print_exc()
                code = 1
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        try:
            sys.stdout.flush(); sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        child(req)
    wall_out, status, usage = False, None, None
    deadline = t0 + req["wall_seconds"]
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            wall_out = True
            break
        time.sleep(0.0005)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if wall_out:
        _, status, usage = os.wait4(pid, 0)
    if req["uid"] is not None and jail.any_process(req["uid"]):
        jail.kill_uid(req["uid"])
    cpu = usage.ru_utime + usage.ru_stime
    # The CPU-time limit decides; the wall clock is the backstop for a program that waits: both are a timeout.
    timed_out = wall_out or jail.cpu_limited(status, cpu, req["limits"]["cpu_seconds"])
    rc = None if timed_out else (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    reply = {"id": req["id"], "returncode": rc, "timed_out": timed_out, "wall_seconds": time.monotonic() - t0,
             "cpu_seconds": cpu}
    os.write(reply_fd, (json.dumps(reply) + "\n").encode())
'''


class ProtocolError(Exception):
    """The server's channel held something other than the awaited reply."""


class ForkServer:
    """One warm server per trainer process, started on first use and restarted if it dies or misbehaves."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._buffer = b""

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            if importlib.util.find_spec("pytest") is None:  # the server imports it first thing, and would just die
                raise InfrastructureError("codefix runs the tests with pytest, which is not installed in this environment: "
                                   "pip install 'pytest>=8' (a dependency of agentic-rl; `pip install -e .` brings it)")
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", SERVER, JAIL_PATH], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0, cwd="/",
                                         env=SERVER_ENV)
            self._buffer = b""
        return self.proc

    def run(self, req: dict[str, Any], stdin: str, layout: tuple | None) -> Any:
        """Run one request in a jailed child; the RunResult. stdin goes in, and output comes back, through files
        in a private directory (root only) that the server never opens."""
        from .sandbox import RunResult, read_result

        io = tempfile.mkdtemp(prefix="agentic-rl-run-")
        try:
            for name in ("stdin", "stdout", "stderr"):
                Path(io, name).write_bytes(stdin.encode() if name == "stdin" else b"")
            os.mkdir(os.path.join(io, "root"))
            nonce = secrets.token_hex(16)
            req = {**req, "id": nonce, "io": io,
                   "jail": {"root": os.path.join(io, "root"), "layout": [list(op) for op in layout]} if layout else None}
            with self._lock:
                try:
                    reply = self._exchange(req, req["wall_seconds"] + GRACE_SECONDS)
                except ProtocolError as e:
                    self.close(kill=True)
                    return RunResult(1, "", f"sandbox: {e}", False, 0.0)
                except TimeoutError:
                    self.close(kill=True)
                    return RunResult(None, "", "", True, req["wall_seconds"])
            return read_result(io, reply["returncode"], reply["timed_out"], reply["wall_seconds"],
                               reply.get("cpu_seconds", 0.0))
        finally:
            remove_tree(io)

    def _exchange(self, req: dict[str, Any], seconds: float) -> dict[str, Any]:
        for attempt in (0, 1):
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write((json.dumps(req) + "\n").encode())
                line = self._read_line(proc, time.monotonic() + seconds)
            except (BrokenPipeError, EOFError):
                self.close(kill=True)
                if attempt:
                    raise InfrastructureError("the codefix fork server died twice in a row") from None
                continue
            try:
                reply = json.loads(line)
            except ValueError:
                raise ProtocolError("unreadable data on the control channel") from None
            if not isinstance(reply, dict) or reply.get("id") != req["id"]:
                raise ProtocolError("a reply that does not answer this request on the control channel")
            return reply
        raise AssertionError("unreachable")

    def _read_line(self, proc: subprocess.Popen, deadline: float) -> bytes:
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError
                self._buffer += chunk
                if len(self._buffer) > 1 << 20:
                    raise ProtocolError("too much data on the control channel")
        line, self._buffer = self._buffer.split(b"\n", 1)
        if self._buffer:
            raise ProtocolError("more than one reply on the control channel")
        return line

    def close(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                self.proc.kill()
            else:
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


_server: ForkServer | None = None


def server() -> ForkServer:
    global _server
    if _server is None or os.getpid() != getattr(_server, "_pid", os.getpid()):
        _server = ForkServer()
        _server._pid = os.getpid()  # type: ignore[attr-defined]
    return _server
