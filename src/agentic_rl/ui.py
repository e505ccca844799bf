"""Terminal output shared by every command: one rich console, a progress bar, and the evaluation and config tables."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(highlight=False)

# Where output is not a terminal (nohup, CI, a log file), bars and spinners show nothing: plain lines instead, at
# most one every PLAIN_EVERY_S seconds (and always the last).
PLAIN_EVERY_S = 30.0


def progress() -> Progress | PlainProgress:
    """A progress bar on a terminal; plain lines with the elapsed time and an ETA elsewhere."""
    if console.is_terminal:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console)
    return PlainProgress()


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def progress_line(what: str, done: int, total: int, started: float, since: int = 0) -> str:
    """`what done/total · elapsed h:mm:ss · ETA h:mm:ss` (the ETA from the pace since `since` was done)."""
    elapsed = time.monotonic() - started
    eta = elapsed / (done - since) * (total - done) if done > since else None
    return (f"{what} {done}/{total} · elapsed {_clock(elapsed)} · ETA "
            + ("?" if eta is None else _clock(eta)))


class PlainProgress:
    """rich's Progress API as used here (add_task, update) written as plain lines: a bar nobody sees is minutes
    of silence in a log."""

    def __init__(self) -> None:
        self.tasks: dict[int, dict[str, Any]] = {}

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def add_task(self, description: str, total: int, completed: int = 0) -> int:
        job = len(self.tasks)
        self.tasks[job] = {"description": description, "total": total, "completed": completed, "start": completed,
                           "started": time.monotonic(), "printed": -math.inf}
        return job

    def update(self, job: int, completed: int | None = None, description: str | None = None) -> None:
        t = self.tasks[job]
        t["completed"] = t["completed"] if completed is None else completed
        t["description"] = description or t["description"]
        now = time.monotonic()
        if t["completed"] >= t["total"] or now - t["printed"] >= PLAIN_EVERY_S:
            t["printed"] = now
            console.print(progress_line(t["description"], t["completed"], t["total"], t["started"], t["start"]),
                          markup=False)


class PlainStatus:
    """rich's Status API (update) as plain lines, for output that is not a terminal."""

    def __init__(self, text: str) -> None:
        self.text, self.printed = text, -math.inf
        self.update()

    def update(self, message: str | None = None) -> None:
        now = time.monotonic()
        if message is None or now - self.printed >= PLAIN_EVERY_S:
            self.printed = now
            console.print(self.text if message is None else message, markup=False)


@contextmanager
def status(text: str) -> Iterator[Any]:
    """A spinner with a message on a terminal; the same messages as plain lines, now and then, elsewhere."""
    if console.is_terminal:
        with console.status(text) as s:
            yield s
    else:
        yield PlainStatus(text)


EVAL_KEYS = ("success_rate", "mean_reward", "tool_calls_per_episode", "recovery_rate", "correct_stop_rate")


def eval_table(columns: dict[str, dict[str, Any]], greedy: dict[str, dict[str, Any]] | None = None) -> Table:
    """Policies side by side on the same held-out tasks: `columns` maps a name to its summary
    (`evaluation.summary.summarize`), `greedy` (optional) a name to the same policy's summary at temperature 0.

    Success per task kind comes last: an overall rate hides where a policy falls short of another."""
    table = Table(title="held-out evaluation")
    table.add_column("metric")
    for name in columns:
        table.add_column(name, justify="right")

    def row(label: str, vals: list[Any]) -> None:
        table.add_row(label, *("—" if v is None else f"{v:.3f}" for v in vals))

    for key in EVAL_KEYS:
        row(key, [c.get(key) for c in columns.values()])
    if greedy:
        row("success_rate (greedy)", [greedy.get(n, {}).get("success_rate") for n in columns])
    kinds = sorted({k for c in columns.values() for k in c.get("success_by_kind", {})})
    for kind in kinds:
        row(f"success · {kind}", [c.get("success_by_kind", {}).get(kind) for c in columns.values()])
    return table


def config_table(rows: list[tuple[str, str, str]], note: str = "") -> Table:
    """A command's config keys for its --help: key, default and docstring, one row each."""
    table = Table(title="config keys (key=value arguments, or in --config FILE)", title_justify="left",
                  caption=note or None, caption_justify="left", expand=True)
    table.add_column("key", style="cyan", no_wrap=True)
    table.add_column("default", overflow="fold")
    table.add_column("what it does", ratio=1)
    for key, default, doc in rows:
        table.add_row(key, escape(default), escape(doc))
    return table
