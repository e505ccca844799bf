import re
import signal
import sqlite3
from functools import partial

import pytest

from agentic_rl.envs import check_env, make_env
from agentic_rl.envs.sql import db
from agentic_rl.envs.sql.env import MAX_ROWS, same_results
from agentic_rl.policies import RandomPolicy, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.rollout import run_episodes


def test_check_env_passes():
    assert check_env(partial(make_env, "sql"), n=40) == []


def test_databases_are_real_deterministic_and_eval_ones_unseen(tmp_path):
    db.create(tmp_path / "a.db", 7), db.create(tmp_path / "b.db", 7)
    assert db.checksum(tmp_path / "a.db") == db.checksum(tmp_path / "b.db")
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert {r[0] for r in conn.execute("SELECT name FROM sqlite_master")} == {"customers", "products", "orders"}
        assert conn.execute("SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id").fetchone()[0] > 100
    env = make_env("sql")
    seeds = lambda split, n: {t.get("db_seed") for t in env.tasks(split, n)}
    assert not seeds("train", 300) & seeds("eval", 100)


def test_teacher_solves_random_does_not_and_the_file_never_changes():
    env = make_env("sql")
    tasks = env.tasks("eval", 40)
    for policy, lo, hi in ((TeacherPolicy(), 0.95, 1.0), (RandomPolicy(), 0.0, 0.1),
                           (TeacherPolicy(noise=env.default_noise), 0.0, 1.0)):
        trajs = run_episodes(partial(make_env, "sql"), tasks, policy)
        assert lo <= sum(t.success for t in trajs) / len(tasks) <= hi
        assert all(t.info["db_unchanged"] for t in trajs)


def test_results_compare_as_sets_unless_ordered_and_numbers_with_tolerance():
    assert same_results([(1,), (2,)], [(2,), (1,)], ordered=False)
    assert not same_results([(1,), (2,)], [(2,), (1,)], ordered=True)
    assert not same_results([(1,), (1,)], [(1,)], ordered=False)  # multisets: a duplicate row counts
    assert same_results([(0.1 + 0.2,)], [(0.3,)], ordered=False)


def test_any_query_that_answers_wins_not_only_the_gold():
    env = make_env("sql")
    task = next(t for t in env.tasks("eval", 40) if "COUNT(*) FROM customers" in t.answer)
    env.reset(task)
    city = task.answer.split("'")[1]
    r = env.step(f"```sql\nselect count(id) from customers c where c.city like '{city}'\n```")
    assert r.episode.success and r.reward == 1.0


@pytest.mark.parametrize("sql, error", [
    ("DROP TABLE orders", "only a single SELECT"),
    ("WITH x AS (SELECT 1) DELETE FROM orders", "not authorized"),
    ("SELECT load_extension('x')", "not authorized"),
    ("SELECT * FROM orders; DROP TABLE orders", "one statement"),
    ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT COUNT(*) FROM n", "time limit (0.5 s)"),
    ("SELECT length(printf('%.*c', 1000000000, 'x'))", "not authorized to use function: printf"),  # slow in one step
    ("SELECT zeroblob(1000000000)", "not authorized to use function: zeroblob"),
    ("WITH RECURSIVE s(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM s) SELECT max(x) FROM s", "too big"),
    ("SELECT " + ", ".join(["1"] * 100), "too many columns"),
    ("SELECT '" + "x" * 5000 + "'", "too long"),
])
def test_guards_refuse_and_stop(tmp_path, sql, error):
    db.create(tmp_path / "shop.db", 1)
    conn = db.open_guarded(tmp_path / "shop.db")
    with pytest.raises((sqlite3.Error, ValueError), match=re.escape(error)):
        db.run_query(conn, sql, seconds=0.5, max_rows=5)
    with pytest.raises(sqlite3.Error, match=r"not authorized|readonly"):
        conn.execute("DELETE FROM orders")  # even past the SELECT-only check, the connection cannot write
    with pytest.raises(sqlite3.Error):
        conn.execute(f"ATTACH DATABASE '{tmp_path / 'x.db'}' AS x")
    assert not (tmp_path / "x.db").exists()


def test_the_first_keyword_check_is_linear_in_the_query():
    # 161 characters of comments made the old statement-start regex backtrack for good; now one pass (under an
    # alarm, so a regression fails here instead of hanging the suite)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("the query check did not return within 20 s"))
    signal.alarm(20)
    try:
        _check_first_keyword()
    finally:
        signal.alarm(0)


def _check_first_keyword() -> None:
    query = "SELECT" + " /*/*" * 30 + " x"
    assert db.first_keyword("/*" + "*/ /*" * 32 + "*/ SELECT 1") == "select"
    assert db.first_keyword("-- c\n /* a */ WITH x") == "with" and db.first_keyword("/* never closed") == ""
    assert db.first_keyword(" /*/*" * 10_000) == ""  # 50,000 characters: a regex that backtracks would not return
    env = make_env("sql")
    env.reset(env.tasks("eval", 1)[0])
    assert env.step(query).episode.success is False


def test_the_agents_query_is_always_a_scored_failure_never_an_env_error():
    env = make_env("sql")
    task = env.tasks("eval", 1)[0]
    doubling = "WITH RECURSIVE s(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM s WHERE length(x) < 60000) "
    for answer in ("SELECT zeroblob(1000000000)", doubling + ", n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                   "LIMIT 100000) SELECT x FROM s, n", "SELECT length(printf('%.*c', 1000000000, 'x'))"):
        env.reset(task)
        result = env.step(answer)
        assert result.terminated and result.episode.success is False and result.reward == 0.0


def _expanding(levels: int) -> str:
    """A query whose common table expressions double at each level while SQLite prepares it (no VM step runs)."""
    ctes = ["a0(x) AS (SELECT 1)"] + [f"a{i}(x) AS (SELECT (SELECT x FROM a{i - 1}) + (SELECT x FROM a{i - 1}))"
                                      for i in range(1, levels + 1)]
    return "WITH " + ", ".join(ctes) + f" SELECT x FROM a{levels}"


LONG_TRIMS = ("WITH RECURSIVE s(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM s WHERE length(x) < 60000), "
              "t(y) AS (SELECT replace(substr(max(x), 1, 8000), 'a', 'b') || 'a' FROM s) SELECT "
              + ", ".join(f"length(trim((SELECT max(x) FROM s) || {i}, (SELECT y FROM t)))" for i in range(20)))


@pytest.mark.parametrize("query, error", [(_expanding(40), "out of memory"), (LONG_TRIMS, "time limit (2 s)")],
                         ids=["exponential-prepare", "one-long-call-per-step"])
def test_what_sqlite_cannot_stop_from_inside_is_stopped_by_the_worker(query, error, busy_cores):
    """Neither runs a VM step the progress handler could stop at: the worker's memory cap and CPU timer do, with the
    same observation on a busy machine."""
    from agentic_rl.envs.sql.worker import worker

    env = make_env("sql")
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    obs = env.step(format_tool_call("run_sql", {"query": query})).observation[0]["content"]
    assert obs.startswith("error: query failed:") and error in obs
    with busy_cores():
        env.reset(task)
        assert env.step(format_tool_call("run_sql", {"query": query})).observation[0]["content"] == obs
    result = env.step(query)  # as the answer: a scored failure, not an env error
    assert result.terminated and result.reward == 0.0 and not result.episode.success
    env.reset(task)  # the worker that died was replaced: the next query runs
    assert env.step(task.answer).episode.success
    assert worker().proc is not None and worker().proc.poll() is None


def test_run_sql_caps_each_value_and_the_whole_observation():
    env = make_env("sql")
    env.reset(env.tasks("eval", 1)[0])
    doubling = "WITH RECURSIVE s(x) AS (SELECT 'a' UNION ALL SELECT x || x FROM s WHERE length(x) < 60000) "
    obs = env.step(format_tool_call("run_sql", {"query": doubling + "SELECT max(x), max(x) FROM s"}))
    text = obs.observation[0]["content"]
    assert len(text) < 1000 and "…(65536 characters)" in text


@pytest.mark.parametrize("fence", ["```SQL\n{q}\n```", "```sql\n{q}\n```", "```\n{q}\n```", "```sqlite\n{q}```",
                                   "```{q}```", "{q}"])
def test_a_fenced_answer_is_read_whatever_the_case_of_its_language_tag(fence):
    env = make_env("sql")
    task = env.tasks("eval", 1)[0]
    env.reset(task)
    assert env.step(fence.format(q=task.answer)).episode.success


def test_run_sql_shows_at_most_max_rows():
    env = make_env("sql")
    env.reset(env.tasks("eval", 1)[0])
    obs = env.step(format_tool_call("run_sql", {"query": "SELECT * FROM orders"})).observation[0]["content"]
    assert obs.count("\n") == MAX_ROWS + 1 and f"more than {MAX_ROWS} rows" in obs


def test_exploit_probes_earn_no_more_than_giving_up_and_leave_the_database_alone():
    env = make_env("sql")
    rows = env.probe_hacks(env.tasks("eval", 2))
    assert {r["exploit"] for r in rows} >= {"drop_table", "attach_database", "vacuum_into", "load_extension",
                                            "endless_query", "huge_cross_join", "answer_in_text", "whole_table"}
    assert {r["exploit"] for r in rows} >= {"comment_backtracking", "slow_function", "huge_blob", "huge_observation",
                                            "memory_in_grading", "exponential_prepare", "long_calls_within_a_step"}
    assert all(r["guarded_reward"] <= r["noop_reward"] + 1e-9 and r["db_unchanged"] and not r["env_error"]
               for r in rows)
    assert next(r for r in rows if r["exploit"] == "answer_in_text")["naive_reward"] == 1.0
