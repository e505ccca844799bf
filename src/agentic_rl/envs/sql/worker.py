"""The agent's queries run in a worker process, so that what SQLite cannot stop from inside cannot hang the trainer
or fill its memory.

`db.run_query` checks the time every PROGRESS_STEPS virtual-machine steps, but some work happens outside those
steps: preparing a statement whose common table expressions expand exponentially (a 1 KB query took 5 s and 1.7 GB
before its first step), or one call of a function whose cost is the product of its arguments' lengths (`trim` on
long strings, over a second per call). The worker runs every agent query under a CPU-time timer (ITIMER_PROF, the
query's limit + 0.25 s, whose signal ends the worker), RLIMIT_AS and RLIMIT_FSIZE (SQLite's temporary files), and
the trainer waits for its reply at most a wall-clock backstop; a worker that dies or overruns is replaced, and the query is a scored failure with the
same message as any other time limit. The worker is a plain `python -I` with its own small environment; it loads
only `db.py` (the standard library), never the trainer's packages.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

DB_PATH = str(Path(__file__).with_name("db.py"))
# The worker's address space: a query that would need more fails with "out of memory". Small enough that a query
# growing its memory meets this cap long before its CPU timer, so the same query gets the same message however busy
# or slow the machine is (docs/results-history.md#test-suite: why 256 MiB).
MEMORY_BYTES = 256 << 20
TEMP_FILE_BYTES = 256 << 20  # the largest temporary file a sort may write
BACKSTOP_FACTOR = 10.0  # the trainer waits at most this many times a query's limit for its reply
START_SECONDS = 10.0  # how long a new worker may take to answer its first request (imports, a loaded machine)
WORKER_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

WORKER = r'''
import base64, importlib.util, json, resource, signal, sqlite3, sys
GRACE = 0.25
spec = importlib.util.spec_from_file_location("sql_db", sys.argv[1])
db = importlib.util.module_from_spec(spec)
spec.loader.exec_module(db)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a temporary file at its cap: a write error, not death
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[3]), int(sys.argv[3])))
conns, pristine = {}, {}

def connection(req):
    if req["path"] is not None:
        if req["path"] not in conns:
            conns.clear()  # one episode's database at a time
            conns[req["path"]] = db.open_guarded(req["path"])
        return conns[req["path"]]
    if req["seed"] not in pristine:
        if len(pristine) >= 8:
            pristine.pop(next(iter(pristine))).close()
        pristine[req["seed"]] = db.open_guarded(None, req["seed"])
    return pristine[req["seed"]]

def value(v):
    return {"b": base64.b64encode(v).decode()} if isinstance(v, bytes) else v

for line in sys.stdin:
    req = json.loads(line)
    # SIGPROF's default action ends the worker once the query has used its CPU time and a little more: the
    # progress handler stops every query it can at `seconds`; this stops the rest (preparing, one long call)
    signal.setitimer(signal.ITIMER_PROF, req["seconds"] + GRACE)
    try:
        cols, rows = db.run_query(connection(req), req["sql"], req["seconds"], req["max_rows"], req["max_bytes"])
        reply = {"cols": cols, "rows": [[value(v) for v in r] for r in rows]}
    except (sqlite3.Error, ValueError, MemoryError, OverflowError, RecursionError) as e:
        reply = {"error": str(e) or type(e).__name__}
    signal.setitimer(signal.ITIMER_PROF, 0)
    reply["id"] = req["id"]
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
'''


class QueryError(Exception):
    """The query failed: it broke a guard, ran past its limit or out of memory (the message says which)."""


class QueryWorker:
    """One worker process per trainer process, started on first use and replaced when it dies or overruns."""

    _lock = threading.Lock()

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._next_id = 0

    def run(self, sql: str, seconds: float, max_rows: int, path: Path | None = None, seed: int | None = None,
            max_bytes: int = 1 << 20) -> tuple[list[str], list[tuple]]:
        """(column names, at most max_rows + 1 rows) of the query on the database file at `path` (read-only) or the
        pristine database of `seed`; QueryError when it fails."""
        with self._lock:
            self._next_id += 1
            req = {"id": self._next_id, "path": None if path is None else str(path), "seed": seed, "sql": sql,
                   "seconds": seconds, "max_rows": max_rows, "max_bytes": max_bytes}
            started = self.proc is None or self.proc.poll() is not None
            # the backstop for a worker that stops answering: generous, since the worker's own CPU timer decides
            reply = self._exchange(req, BACKSTOP_FACTOR * seconds + (START_SECONDS if started else 0.0))
        if reply is None:  # the worker died (its CPU timer, memory) or overran the wall-clock backstop
            raise QueryError(f"the query ran past its time limit ({seconds:g} s)")
        if "error" in reply:
            raise QueryError(reply["error"])
        rows = [tuple(bytes(base64.b64decode(v["b"])) if isinstance(v, dict) else v for v in r) for r in reply["rows"]]
        return reply["cols"], rows

    def _exchange(self, req: dict[str, Any], seconds: float) -> dict[str, Any] | None:
        proc = self._ensure()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write((json.dumps(req) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.close()
            return None
        deadline = time.monotonic() + seconds
        fd, buffer = proc.stdout.fileno(), b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            chunk = os.read(fd, 1 << 20) if ready else b""
            if not chunk:  # the deadline passed, or the worker died
                self.close()
                return None
            buffer += chunk
        reply = json.loads(buffer.split(b"\n", 1)[0])
        return reply if reply.get("id") == req["id"] else None

    def _ensure(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-I", "-c", WORKER, DB_PATH, str(MEMORY_BYTES),
                                          str(TEMP_FILE_BYTES)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd="/", env=WORKER_ENV)
        return self.proc

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc = None


_worker: QueryWorker | None = None
_worker_pid = 0


def worker() -> QueryWorker:
    """This process's worker (a forked child gets its own)."""
    global _worker, _worker_pid
    if _worker is None or _worker_pid != os.getpid():
        _worker, _worker_pid = QueryWorker(), os.getpid()
    return _worker
