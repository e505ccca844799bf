import re
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
    ("WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT COUNT(*) FROM n", "interrupted"),
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
    assert all(r["guarded_reward"] <= r["noop_reward"] + 1e-9 and r["db_unchanged"] for r in rows)
    assert next(r for r in rows if r["exploit"] == "answer_in_text")["naive_reward"] == 1.0
