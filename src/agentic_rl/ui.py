"""Terminal output shared by every command: one rich console, a progress bar, and the evaluation and config tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(highlight=False)


def progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=not console.is_terminal)


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
