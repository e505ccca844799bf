"""The scheduler: one thread owns the model and samples every request that is waiting as one batch.

HTTP handlers submit turns (`submit`) and await a future; the thread takes all submitted jobs at once — requests that
arrive while a batch decodes wait for the next one — and runs them through `HFPolicy.sample`, which prefills shared
prompt prefixes once, so 32 concurrent clients cost about what one 32-row batch costs in-process. Tokens are passed
to each job's `on_token` as they are sampled (streaming). A failing batch fails its jobs' futures, not the thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..policies.hf.sampler import HFPolicy, SampledTurn, TurnRequest


@dataclass
class Job:
    """The rows of one HTTP request (n choices) and where their tokens and results go."""

    rows: list[TurnRequest]
    on_token: Callable[[int, int], None] | None = None  # (choice index, token id), from the scheduler thread
    future: Future[list[SampledTurn]] = field(default_factory=Future)


class Engine:
    """Batches the turns of concurrent requests over one policy. `close` stops the thread."""

    def __init__(self, policy: HFPolicy, max_rows: int = 64, gather_s: float = 0.002):
        """max_rows: most rows in one batch (a job is never split); gather_s: after the first job arrives, how long
        to wait for others that are on their way (clients answering the same batch's replies)."""
        self.policy, self.max_rows, self.gather_s = policy, max_rows, gather_s
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.batches = 0
        self.rows_sampled = 0
        self._thread = threading.Thread(target=self._loop, name="agentic-rl-engine", daemon=True)
        self._thread.start()

    def submit(self, rows: list[TurnRequest], on_token: Callable[[int, int], None] | None = None
               ) -> Future[list[SampledTurn]]:
        job = Job(rows, on_token)
        self.jobs.put(job)
        return job.future

    def wait_idle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no job is queued or sampling (a trainer updates the weights only then); False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.jobs.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=30)

    def _take(self) -> list[Job] | None:
        first = self.jobs.get()
        if first is None:
            return None
        batch, rows = [first], len(first.rows)
        while rows < self.max_rows:
            try:
                job = self.jobs.get(timeout=self.gather_s)
            except queue.Empty:
                break
            if job is None:
                self.jobs.put(None)  # close after this batch
                break
            batch.append(job)
            rows += len(job.rows)
        return batch

    def _loop(self) -> None:
        while (taken := self._take()) is not None:
            try:
                self._run([j for j in taken if j.future.set_running_or_notify_cancel()])
            finally:
                for _ in taken:
                    self.jobs.task_done()

    def _run(self, batch: list[Job]) -> None:
        """Sample the jobs' rows as one batch and hand each job its turns."""
        if not batch:
            return
        rows = [r for j in batch for r in j.rows]
        owner = [(j, i) for j in batch for i in range(len(j.rows))]
        try:
            turns = self.policy.sample(rows, seed=self.batches, on_token=_dispatch(owner))
        except Exception as e:  # a bad batch fails its requests; the server goes on
            for j in batch:
                j.future.set_exception(e)
            return
        finally:
            self.batches += 1
        self.rows_sampled += len(rows)
        start = 0
        for j in batch:
            j.future.set_result(turns[start:start + len(j.rows)])
            start += len(j.rows)


def _dispatch(owner: list[tuple[Job, int]]) -> Callable[[int, int], None]:
    """Route a batch row's token to its job's callback, as (choice index, token id)."""
    def on_token(row: int, token: int) -> None:
        job, index = owner[row]
        if job.on_token is not None:
            try:
                job.on_token(index, token)
            except Exception:  # a stream whose client left: its rows still finish, the others too
                job.on_token = None
    return on_token
