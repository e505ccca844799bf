"""A warm runner for sandboxed test runs: a fork server with pytest already imported.

A cold `python -m pytest` pays ~200 ms of interpreter start-up and imports before the first test runs; a GRPO step
of 128 trajectories × ~3 test runs would spend minutes on that alone. The server is a separate process started once
(`python -I`, standard library + pytest only — it never imports `agentic_rl`, so the corpus and its hidden tests
are not in the memory its children inherit). For each request it forks a child that enters the same jail as a cold
run (`jail.enter`: own uid, network and mount namespaces, rlimits), then runs pytest's `main` or a piece of
Python in-process and exits; the server enforces the wall-clock limit and kills everything the uid left behind.
Requests and replies are JSON lines over the server's stdin/stdout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

JAIL_PATH = str(Path(__file__).with_name("jail.py"))

SERVER = r'''
import importlib.util, json, os, signal, sys, tempfile, time, traceback
import pytest  # the point of the server: imported once, inherited by every child
# Plugins that only matter in a long session (their cleanup runs gc.collect twice: half of a short run's time).
FAST = ["-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:faulthandler", "-p", "no:pastebin",
        "-p", "no:legacypath", "-p", "no:setuponly", "-p", "no:setupplan", "-p", "no:stepwise"]
spec = importlib.util.spec_from_file_location("codefix_jail", sys.argv[1])
jail = importlib.util.module_from_spec(spec)
spec.loader.exec_module(jail)
reply_fd = os.dup(1)
os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # stray prints must not corrupt the protocol
# Warm-up: one throwaway session imports the rest of pytest (plugins, collection, assertion rewriting, junitxml).
with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "test_warmup.py"), "w") as f:
        f.write("def test_ok():\n    assert 1 == 1\n")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    pytest.main(FAST + ["-q", "-p", "no:cacheprovider", "--junitxml", os.path.join(d, "j.xml"), d])

def child(req, out_fd, err_fd, in_fd):
    os.dup2(in_fd, 0); os.dup2(out_fd, 1); os.dup2(err_fd, 2)
    for k, v in req["env"].items():
        os.environ[k] = v
    # No .pyc: one written in the same second as an edit of the same size passes as fresh (mtime and size match),
    # and the next run would silently test the code from before the edit. (-I ignored PYTHONDONTWRITEBYTECODE.)
    sys.dont_write_bytecode = True
    code = 1
    try:
        os.chdir(req["workspace"])
        jail.enter(req["workspace"], req["limits"], req["uid"], req["hide"])
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
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush(); sys.stderr.flush()
        except BaseException:
            pass
        os._exit(code)

for line in sys.stdin:
    req = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.TemporaryFile() as inp:
        inp.write(req.get("stdin", "").encode()); inp.flush(); inp.seek(0)
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            child(req, out.fileno(), err.fileno(), inp.fileno())
        timed_out, status = False, None
        deadline = t0 + req["wall_seconds"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.0005)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if timed_out:
            _, status = os.waitpid(pid, 0)
        leftovers = False
        if req["uid"] is not None and jail.any_process(req["uid"]):
            jail.kill_uid(req["uid"])
            leftovers = True
        rc = None if timed_out else (-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
        out.seek(0); err.seek(0)
        reply = {"returncode": rc, "stdout": out.read().decode(errors="replace"),
                 "stderr": err.read().decode(errors="replace"), "timed_out": timed_out,
                 "wall_seconds": time.monotonic() - t0, "leftovers": leftovers}
    os.write(reply_fd, (json.dumps(reply) + "\n").encode())
'''


class ForkServer:
    """One warm server per trainer process, started on first use and restarted if it dies."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            if importlib.util.find_spec("pytest") is None:  # the server imports it first thing, and would just die
                raise RuntimeError("codefix runs the tests with pytest, which is not installed in this environment: "
                                   "pip install 'pytest>=8' (a dependency of agentic-rl; `pip install -e .` brings it)")
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", SERVER, JAIL_PATH], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                         cwd="/")
        return self.proc

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            if not line:
                self.proc = None
                raise RuntimeError("the codefix fork server died; it will be restarted on the next run")
            return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=5)
        self.proc = None


_server: ForkServer | None = None


def server() -> ForkServer:
    global _server
    if _server is None or os.getpid() != getattr(_server, "_pid", os.getpid()):
        _server = ForkServer()
        _server._pid = os.getpid()  # type: ignore[attr-defined]
    return _server
