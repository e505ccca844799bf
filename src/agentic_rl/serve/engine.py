"""The scheduler: one thread owns the model and runs continuous batching over it (`policies/hf/live_batch.py`).

HTTP handlers submit turns (`submit`) and await a future. Between two decode steps the thread admits every request
that has arrived — it joins the running batch at the next step, its prompt prefilled reading the batch's shared
prefix — so 32 concurrent clients cost about what one 32-row batch costs in-process, even when their requests
arrive spread over a decode. Tokens are passed to each job's `on_token` as they are sampled (streaming), and a job
is answered as soon as its rows end their turns. A request for which the batch has no room waits, and nothing queued
behind it overtakes it. A request the batch cannot take (an empty prompt, one past the context) fails alone; a
failing step fails the jobs in the batch, not the thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from ..policies.hf.live_batch import MAX_PARKED, LiveBatch
from ..policies.hf.sampler import HFPolicy, SampledTurn, TurnRequest


class RowRefused(ValueError):
    """A request the batch cannot take (`LiveBatch.problem`): its own fault, answered alone as a 400."""


class Abandoned(RuntimeError):
    """The request's client went away (`Engine.cancel`): its rows stopped, its turn is not answered."""


@dataclass
class Job:
    """The rows of one HTTP request (n choices) and where their tokens and results go."""

    rows: list[TurnRequest]
    on_token: Callable[[int, int], None] | None = None  # (choice index, token id), from the scheduler thread
    future: Future[list[SampledTurn]] = field(default_factory=Future)
    turns: list[SampledTurn | None] = field(default_factory=list)
    left: int = 0  # rows still sampling
    since: int = 0  # the decode step at which the scheduler first saw it


class Engine:
    """Batches the turns of concurrent requests over one policy. `close` stops the thread."""

    def __init__(self, policy: HFPolicy, max_rows: int = 64, gather_s: float = 0.002, join_share: float = 0.25,
                 join_wait_steps: int = 8, max_parked: int = MAX_PARKED):
        """max_rows: most rows sampling at once (a job is never split: one larger than that runs alone); gather_s:
        when the first job arrives at an idle engine, how long to wait for others that are on their way. Waiting
        jobs join a running batch together, once their rows are `join_share` of the running ones or the first has
        waited `join_wait_steps` decode steps: each join is a prefill and a copy of the cache, so it pays to make
        few. max_parked: most rollouts whose cache row is kept between their turns."""
        self.policy, self.max_rows, self.gather_s = policy, max_rows, gather_s
        self.join_share, self.join_wait_steps = join_share, join_wait_steps
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.batches = 0  # batches started from idle (requests that join a running one do not count)
        self.steps = 0  # decode steps
        self.rows_sampled = 0
        self._owner: dict[int, tuple[Job, int]] = {}  # a batch row's key → its job and choice index
        self._released: queue.SimpleQueue[str] = queue.SimpleQueue()  # sessions whose rows can go
        self._cancelled: queue.SimpleQueue[Future[list[SampledTurn]]] = queue.SimpleQueue()  # abandoned requests
        self.requests_cancelled = 0  # requests whose client went away, stopped running or queued
        self._keys = 0
        self.max_parked = max_parked
        self._live = LiveBatch(policy, seed=0, on_token=self._dispatch, max_parked=max_parked)
        self._thread = threading.Thread(target=self._loop, name="agentic-rl-engine", daemon=True)
        self._thread.start()

    def submit(self, rows: list[TurnRequest], on_token: Callable[[int, int], None] | None = None
               ) -> Future[list[SampledTurn]]:
        job = Job(rows, on_token)
        self.jobs.put(job)
        return job.future

    def release(self, session: str) -> None:
        """The session (a rollout) has ended: its kept cache row can go (before the next admission)."""
        self._released.put(session)

    def cancel(self, future: Future[list[SampledTurn]]) -> None:
        """The client of `future`'s request has gone: its rows stop before the next decode step."""
        self._cancelled.put(future)

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

    def _loop(self) -> None:
        waiting: deque[Job] = deque()
        closing = False
        while True:
            if not self._live.running and not waiting:
                if closing:
                    return
                first = self.jobs.get()
                if first is None:
                    return
                first.since = self.steps
                waiting.append(first)
                closing = self._gather(waiting, self.gather_s)
            closing = self._gather(waiting, 0.0) or closing
            self._admit(waiting)
            if self._live.running:
                self._step()

    def _gather(self, waiting: deque[Job], wait_s: float) -> bool:
        """Move the submitted jobs to `waiting`, waiting up to wait_s between arrivals; True when asked to close."""
        while True:
            try:
                job = self.jobs.get(timeout=wait_s) if wait_s > 0 else self.jobs.get_nowait()
            except queue.Empty:
                return False
            if job is None:
                self.jobs.task_done()
                return True
            job.since = self.steps
            waiting.append(job)

    def _admit(self, waiting: deque[Job]) -> None:
        """Admit waiting jobs, in arrival order, while the batch has room for them (each joins at the next step)."""
        live, taken = self._live, []
        while not self._cancelled.empty():
            self._drop(self._cancelled.get(), waiting)
        while not self._released.empty():
            live.release(self._released.get())
        rows = live.running
        if rows and waiting and (sum(len(j.rows) for j in waiting) < self.join_share * rows
                                 and self.steps - waiting[0].since < self.join_wait_steps):
            return
        while waiting:
            job = waiting[0]
            if (live.running or taken) and rows + len(job.rows) > self.max_rows:
                break
            waiting.popleft()
            if not job.future.set_running_or_notify_cancel():
                self.jobs.task_done()
                continue
            why = next((w for r in job.rows if (w := live.problem(r)) is not None), None)
            if why is not None:  # a request the batch cannot take fails alone
                job.future.set_exception(RowRefused(why))
                self.jobs.task_done()
                continue
            job.turns, job.left = [None] * len(job.rows), len(job.rows)
            taken.append(job)
            rows += len(job.rows)
        if not taken:
            return
        if not live.running:
            self.batches += 1
        requests = []
        for job in taken:
            for i, row in enumerate(job.rows):
                self._keys += 1
                self._owner[self._keys] = (job, i)
                requests.append((self._keys, row))
        try:
            live.admit(requests)
        except Exception as e:  # a bad prefill fails the batch's requests; the engine goes on
            self._fail(e)
            return
        self.rows_sampled += len(requests)

    def _step(self) -> None:
        try:
            done = self._live.step()
        except Exception as e:
            self._fail(e)
            return
        self.steps += 1
        for key, turn in done:
            job, i = self._owner.pop(key)
            job.turns[i] = turn
            job.left -= 1
            if job.left == 0:
                job.future.set_result(list(job.turns))  # type: ignore[arg-type]
                self.jobs.task_done()

    def _drop(self, future: Future[list[SampledTurn]], waiting: deque[Job]) -> None:
        """Stop an abandoned request's rows (or take it out of the queue) and fail it with `Abandoned`."""
        keys = [k for k, (job, _) in self._owner.items() if job.future is future]
        queued = [j for j in waiting if j.future is future]
        if not keys and not queued:
            return  # answered already (or never submitted here)
        for k in keys:
            self._live.cancel(k)
            del self._owner[k]
        for j in queued:
            waiting.remove(j)
            j.future.set_running_or_notify_cancel()
        self.requests_cancelled += 1
        future.set_exception(Abandoned("the client went away"))
        self.jobs.task_done()

    def _fail(self, error: Exception) -> None:
        """Fail every job in the batch and start a fresh one."""
        for job in {id(j): j for j, _ in self._owner.values()}.values():
            job.future.set_exception(error)
            self.jobs.task_done()
        self._owner.clear()
        self._live = LiveBatch(self.policy, seed=self.batches, on_token=self._dispatch, max_parked=self.max_parked)

    def _dispatch(self, key: int, token: int) -> None:
        """Route a batch row's token to its job's callback, as (choice index, token id)."""
        job, index = self._owner[key]
        if job.on_token is not None:
            try:
                job.on_token(index, token)
            except Exception:  # a stream whose client left: its rows still finish, the others too
                job.on_token = None
