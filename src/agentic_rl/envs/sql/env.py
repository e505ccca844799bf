"""`sql`: answer a question about a real SQLite database with a query (the seed's §5: an SQL result is verifiable).

Each task has its own database, generated from the task's seed (`db.py`), a question and a gold query. Tools:
`list_tables`, `describe_table`, `run_sql` (at most MAX_ROWS rows shown); the final answer is a query. Every agent
query runs guarded (`db.run_query`) in a worker process (`worker.py`) on a read-only file; the reward is computed on
the trusted side, on a pristine
copy built in memory from the seed:
    r = 1[the answer's result set equals the gold's] − INVALID_COST × (turns that fail to parse)
compared as multisets (in order when the question asks for one), numbers to 1e-6.
Eval databases are never trained on (the split is by database seed); the file's checksum is reported at the end.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from ...runtime.parsing import format_tool_call, message_text
from ...runtime.tools import Toolbox, ToolError
from ..base import FAULT_TEXT, Draft, Message, Split, Task, TurnRecord, draw_tasks, reference_turns, stream_tasks
from ..tool_env import Score, ToolEnv
from . import db
from .questions import QUESTIONS
from .worker import QueryError, worker

MAX_ROWS = 20
FENCE_LANGUAGES = ("", "sql", "sqlite", "sqlite3")  # what may follow ``` on a fenced answer's first line
MAX_CELL_CHARS = 200  # a longer value is shown cut, with its length
MAX_OBSERVATION_CHARS = 4000  # what run_sql shows at most
SECONDS = 2.0  # CPU time a query may take (db.run_query)
INVALID_COST = 0.1
SYSTEM_PROMPT = ("You answer questions about a SQLite database. Look at the tables, try queries with run_sql, and "
                 "when a query answers the question, reply with that SQL query only. To call a tool, reply with only "
                 '<tool_call>{"name":...,"arguments":{...}}</tool_call>.\nTools:\n')


def unfence(answer: str) -> str:
    """The query inside a Markdown code fence (```sql, ```SQL, ```sqlite or a bare ```), or the answer as it is."""
    text = answer.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        body = text[3:-3]
        first, _, rest = body.partition("\n")
        return (rest if first.strip().lower() in FENCE_LANGUAGES else body).strip()
    return text


def _cell(value: object) -> str:
    text = str(value)
    return text if len(text) <= MAX_CELL_CHARS else f"{text[:MAX_CELL_CHARS]}…({len(text)} characters)"


def same_results(got: list[tuple], want: list[tuple], ordered: bool) -> bool:
    """Result sets equal as multisets of rows (as lists when `ordered`), numbers compared to 1e-6."""
    norm = lambda rows: [tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows]
    a, b = norm(got), norm(want)
    return a == b if ordered else Counter(a) == Counter(b)


class SQLEnv(ToolEnv):
    """Write the query that answers the question; graded by its result on a pristine copy."""

    name: ClassVar[str] = "sql"
    mistakes: ClassVar[tuple[str, ...]] = ("skip_schema", "bad_column", "no_check", "text_answer")
    default_noise: ClassVar[dict[str, float]] = {"skip_schema": 0.3, "bad_column": 0.2, "no_check": 0.2,
                                                 "text_answer": 0.08}
    supports_faults: ClassVar[bool] = True
    reference_solutions: ClassVar[bool] = True
    # The SmolLM2 ladder's budget on this CPU: demos are ~2x math's tokens, so half the demos and steps; a query turn
    # runs to 77 tokens (docs/results-history.md#the-sql-and-game-ladders-on-smollm2-135m-instruct).
    pretrained_run_defaults: ClassVar[dict[str, Any]] = {
        "eval_tasks": 50, "robustness_tasks": 5,
        "sft": {"demos": 256, "max_steps": 16, "eval_tasks": 10, "max_new_tokens": 80},
        "grpo": {"steps": 6, "eval_tasks": 10, "max_new_tokens": 80}}

    def __init__(self, max_turns: int = 8, fault_rate: float = 0.0):
        if max_turns < 1 or not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"max_turns must be ≥ 1 and fault_rate in [0, 1], got {max_turns}, {fault_rate}")
        self.max_turns, self.fault_rate = max_turns, fault_rate
        self.tools = Toolbox([self.list_tables, self.describe_table, self.run_sql])
        self.system_prompt = SYSTEM_PROMPT + self.tools.schemas_text()
        self._dir: str | None = None

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        return draw_tasks("sql", split, n, seed, self._draw)

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        return stream_tasks("sql", split, seed, self._draw)

    def _draw(self, rng: random.Random) -> Draft:
        db_seed = rng.randrange(10**6)
        kind, question, gold, tables, ordered = rng.choice(QUESTIONS)
        names = db.product_names(db_seed)
        params = {"city": rng.choice(db.CITIES), "category": rng.choice(sorted(db.PRODUCTS)),
                  "product": rng.choice(names), "year": rng.randint(2015, 2024), "year2": rng.randint(2021, 2024)}
        # the database's name leads the question: the same question about another database is another task
        gold, question = gold.format(**params), f"Database shop_{db_seed:06d}. " + question.format(**params)
        ref = (("list_tables", ()), *(("describe_table", (("table", t),)) for t in tables),
               ("run_sql", (("query", gold),)))
        return Draft(f"db:{db_seed}", f"{db_seed}:{question}", kind, question, gold, ref,
                     (("db_seed", db_seed), ("ordered", ordered)))

    def _perturbed(self, task: Task, how: str) -> Task | None:
        if how == "casing":
            return replace(task, prompt=task.prompt.upper())
        if how == "rephrase":
            return replace(task, prompt="Using the database, answer this: " + task.prompt)
        return super()._perturbed(task, how)

    # -- tools (the episode's database, read-only) --

    def list_tables(self) -> str:
        """List the tables in the database."""
        return ", ".join(r[0] for r in self._query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")[1])

    def describe_table(self, table: str) -> str:
        """Show a table's columns (its CREATE TABLE statement).

        Args:
            table: The table name, for example "orders".
        """
        rows = self._query(f"SELECT sql FROM sqlite_master WHERE type = 'table' AND name = '{table.replace(chr(39), '')}'")[1]
        if not rows:
            raise ToolError(f"no table {table!r}; list_tables() shows the tables")
        return " ".join(str(rows[0][0]).split())

    def run_sql(self, query: str) -> str:
        """Run a read-only SQL query and show its first rows.

        Args:
            query: One SELECT statement, for example "SELECT COUNT(*) FROM orders".
        """
        cols, rows = self._query(query, agent=True)
        lines = [" | ".join(map(_cell, cols)), *(" | ".join(map(_cell, r)) for r in rows[:MAX_ROWS])]
        more = f"\n(more than {MAX_ROWS} rows; only the first {MAX_ROWS} shown)" if len(rows) > MAX_ROWS else ""
        text = "\n".join(lines)
        if len(text) > MAX_OBSERVATION_CHARS:
            text = text[:MAX_OBSERVATION_CHARS] + f"\n(output cut at {MAX_OBSERVATION_CHARS} characters)"
        return text + more

    def _query(self, sql: str, agent: bool = False) -> tuple[list[str], list[tuple]]:
        """Our own queries run here; the agent's in the worker process."""
        try:
            if agent:
                return worker().run(sql, SECONDS, MAX_ROWS, path=self.db_path)
            return db.run_query(self._conn, sql, SECONDS, MAX_ROWS)
        except (sqlite3.Error, ValueError, QueryError) as e:
            raise ToolError(f"query failed: {e}") from None

    # -- the episode --

    def start(self, task: Task) -> None:
        self._dir = tempfile.mkdtemp(prefix="agentic-rl-sql-")
        self.db_path = Path(self._dir) / "shop.db"
        db.create(self.db_path, task.get("db_seed"))
        self._checksum = db.checksum(self.db_path)
        self._conn = db.open_guarded(self.db_path)

    def score(self, task: Task, answer: str) -> Score:
        """Run the answer and the gold on a pristine copy; equal result sets win."""
        query = unfence(answer)
        pristine = db.open_guarded(None, task.get("db_seed"))
        try:
            want = db.run_query(pristine, task.answer, SECONDS, 10**5)[1]
        finally:
            pristine.close()
        try:  # one row more than the gold has is enough to know the answer is wrong, and bounds what is read
            got = worker().run(query, SECONDS, len(want), seed=task.get("db_seed"))[1]
            ok = same_results(got, want, task.get("ordered"))
        except QueryError:  # anything the agent's query causes is a wrong answer, never a crash
            ok = False
        return Score(float(ok), ok, not query)

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        return -INVALID_COST if turn.parsed == "ParseError" else 0.0

    def episode_info(self) -> dict[str, Any]:
        return {"db_unchanged": db.checksum(self.db_path) == self._checksum}

    def close(self) -> None:
        if getattr(self, "_conn", None) is not None:
            self._conn.close()
            self._conn = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- the teacher: list the tables, describe the ones the gold reads, run the gold, answer with it --

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        noise = noise or {}
        turns = [m for m in messages if m["role"] == "assistant"]
        if messages[-1]["role"] == "tool" and messages[-1]["content"] == FAULT_TEXT:
            return message_text(turns[-1])
        ref = [c for c in task.reference_calls if not (noise.get("skip_schema") and c[0] != "run_sql")]
        done = len(reference_turns(ref, messages))
        if done == len(ref) - 1 and noise.get("bad_column") and "no such column" not in str(messages[-1]["content"]):
            return format_tool_call("run_sql", {"query": "SELECT amount FROM orders"})  # a column that is not there
        if done < len(ref) - int(bool(noise.get("no_check"))):
            return format_tool_call(*ref[done])
        return "The answer is in the table." if noise.get("text_answer") else task.answer

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, object]]:
        from .exploits import probe_hacks

        return probe_hacks(self, tasks)
