"""codefix: corpus, mutants, tasks, workspace, sandbox containment, unforgeable grading, reward calibration."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from agentic_rl.envs import check_env, make_env
from agentic_rl.envs.base import Task
from agentic_rl.envs.codefix.corpus import CORPUS, Module
from agentic_rl.envs.codefix.env import CodeFixEnv
from agentic_rl.envs.codefix.grading import grade, pristine_files
from agentic_rl.envs.codefix.jail import live_processes
from agentic_rl.envs.codefix.mutate import OPERATORS, mutants
from agentic_rl.envs.codefix.sandbox import Limits, Sandbox, isolation_available
from agentic_rl.envs.codefix.tasks import make_tasks, module_split, valid_mutants
from agentic_rl.envs.codefix.workspace import Workspace
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.tools import ToolError

isolated = pytest.mark.skipif(not isolation_available(), reason="needs root and Linux namespaces for the sandbox")


# ---- corpus, mutants, tasks -----------------------------------------------------------------------------------------

def test_corpus_size_and_shape():
    assert len(CORPUS) >= 40
    assert len({m.name for m in CORPUS}) == len(CORPUS)
    assert all(len(m.visible) >= 5 and len(m.hidden) >= 3 for m in CORPUS)


def test_mutants_change_exactly_one_line_and_cover_every_operator():
    seen = Counter()
    for module in CORPUS:
        for m in mutants(module.source):
            a, b = module.source.split("\n"), m.source.split("\n")
            assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
            seen[m.operator] += 1
    assert set(seen) == set(OPERATORS)


def test_kept_mutants_fail_some_visible_tests_and_pass_others():
    module = next(m for m in CORPUS if m.name == "primes")
    kept = valid_mutants(module)
    assert kept
    for mut in kept[:5]:
        g = grade(module, mut.source, {k: v.encode() for k, v in pristine_files(module, mut.source).items()})
        assert 0 < g.visible_passed < g.visible_total
        assert g.hidden_passed < g.hidden_total  # leaving the bug in never earns full marks


def test_tasks_are_deterministic_and_splits_use_disjoint_modules():
    a, b = make_tasks("eval", 12, seed=3), make_tasks("eval", 12, seed=3)
    assert a == b and len({t.id for t in a}) == 12
    train = make_tasks("train", 40, seed=0)
    assert {t.get("module") for t in train}.isdisjoint({t.get("module") for t in a})
    assert all(module_split(next(m for m in CORPUS if m.name == t.get("module"))) == "eval" for t in a)


# ---- workspace ------------------------------------------------------------------------------------------------------

def test_workspace_is_a_git_repo_with_one_commit_and_is_removed():
    with Workspace({"a.py": "x = 1\n"}) as ws:
        root = ws.root
        log = subprocess.run(["git", "log", "--oneline"], cwd=root, capture_output=True, text=True).stdout
        assert len(log.strip().splitlines()) == 1
        assert ws.list_files() == ["a.py"]
    assert not root.exists()


def test_workspace_is_removed_when_the_episode_crashes():
    root = None
    with pytest.raises(RuntimeError), Workspace({"a.py": ""}) as ws:
        root = ws.root
        raise RuntimeError("agent loop crashed")
    assert root is not None and not root.exists()


def test_paths_are_confined(tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    with Workspace({"a.py": "x = 1\n"}) as ws:
        os.symlink(outside, ws.root / "link.txt")
        for bad in ["/etc/passwd", "../secret.txt", "sub/../../x", "link.txt", ".git/config"]:
            with pytest.raises(ToolError):
                ws.read(bad)
        with pytest.raises(ToolError, match="occurs 2 times"):
            (ws.root / "b.py").write_text("y = 1\ny = 1\n")
            ws.edit("b.py", "y = 1", "y = 2")
        with pytest.raises(ToolError, match="not found"):
            ws.edit("a.py", "nope", "x")
        assert "1| x = 1" in ws.read("a.py")


# ---- sandbox containment --------------------------------------------------------------------------------------------

@pytest.fixture(params=[True, False], ids=["warm", "cold"])
def sandbox(tmp_path, request):
    """Both ways of running: through the warm fork server and as a fresh interpreter; the same jail."""
    ws = tmp_path / "ws"
    ws.mkdir()
    return Sandbox(ws, Limits(wall_seconds=3, cpu_seconds=2, memory_bytes=512 << 20), warm=request.param)


def _py(sb: Sandbox, code: str):
    return sb.run(["python", "-c", code])


@isolated
def test_sandbox_infinite_loop_is_stopped(sandbox):
    r = _py(sandbox, "while True: pass")
    assert r.outcome == "timeout" and r.timed_out and r.returncode is None
    assert r.wall_seconds <= sandbox.limits.wall_seconds + 1


@isolated
def test_sandbox_cpu_limit_decides_whatever_the_load(sandbox, busy_cores):
    """A loop ends at the CPU-time limit, a program that only waits at the wall-clock backstop, one that catches
    SIGXCPU at the hard limit a second later: all three are the same `timeout`, with the machine's cores busy."""
    with busy_cores():
        for code in ("while True: pass", "import time; time.sleep(60)",
                     "import signal\nsignal.signal(signal.SIGXCPU, lambda *a: None)\nwhile True: pass"):
            r = _py(sandbox, code)
            assert (r.outcome, r.returncode) == ("timeout", None), (code, r)
        assert _py(sandbox, "x = bytearray(4 << 30)").outcome != "timeout"  # a memory bomb is not a timeout


@isolated
def test_sandbox_memory_bomb_is_contained(sandbox):
    r = _py(sandbox, "x = bytearray(4 << 30)")
    assert r.outcome != "ok" and "MemoryError" in r.stderr


@isolated
def test_sandbox_fork_bomb_is_contained_and_nothing_is_left(sandbox):
    t0 = time.monotonic()
    r = _py(sandbox, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert r.outcome == "timeout"
    assert time.monotonic() - t0 <= sandbox.limits.wall_seconds + 1
    assert live_processes(sandbox.uid) == []
    assert _py(sandbox, "print('next run works')").stdout.strip() == "next run works"


@isolated
def test_sandbox_detached_child_is_killed(sandbox):
    r = _py(sandbox, "import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(60)\nprint('done')")
    assert r.outcome == "ok" and r.wall_seconds < 2
    assert live_processes(sandbox.uid) == []


@isolated
def test_sandbox_writes_only_inside_the_workspace(sandbox, tmp_path):
    marker = Path("/tmp") / f"codefix-escape-{os.getpid()}"
    repo_file = Path(__file__).resolve().parent / "escape.txt"
    etc_file = Path("/etc") / f"codefix-escape-{os.getpid()}"
    try:
        assert _py(sandbox, "open('inside.txt', 'w').write('ok')").outcome == "ok"
        assert (sandbox.workspace / "inside.txt").read_text() == "ok"
        # /tmp is the sandbox's own empty tmpfs: the write succeeds there and never reaches the host's /tmp
        assert _py(sandbox, f"open({str(marker)!r}, 'w').write('x')").outcome == "ok"
        assert not marker.exists()
        # the project: not writable by the sandbox uid (or not even visible, when the clone sits under /tmp)
        r = _py(sandbox, f"open({str(repo_file)!r}, 'w').write('x')")
        assert r.outcome == "failed" and ("PermissionError" in r.stderr or "FileNotFoundError" in r.stderr)
        assert not repo_file.exists()
        # a system directory: visible, owned by root, not writable
        r = _py(sandbox, f"open({str(etc_file)!r}, 'w').write('x')")
        assert r.outcome == "failed" and "PermissionError" in r.stderr
        assert not etc_file.exists()
    finally:
        for f in (repo_file, etc_file):
            f.unlink(missing_ok=True)


@isolated
def test_sandbox_has_no_network(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        r = _py(sandbox, f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')")
        assert "connected" not in r.stdout and r.outcome == "failed"
        r = _py(sandbox, "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)")
        assert r.outcome == "failed" and ("unreachable" in r.stderr or "timed out" in r.stderr)
    finally:
        server.close()


@isolated
def test_sandbox_hides_the_corpus_and_runs_isolated_python(sandbox):
    corpus_file = Path(__file__).resolve().parents[2] / "src/agentic_rl/envs/codefix/corpus.py"
    assert corpus_file.is_file()  # it is there on the host: only the sandbox must not see it
    r = _py(sandbox, f"import sys, os\nprint(sys.flags.isolated, os.getuid())\nprint(open({str(corpus_file)!r}).read()[:20])")
    assert r.stdout.split()[0] == "1" and r.stdout.split()[1] != "0"
    assert "FileNotFoundError" in r.stderr or "PermissionError" in r.stderr


# ---- grading and exploits -------------------------------------------------------------------------------------------

PRIMES = next(m for m in CORPUS if m.name == "primes")


def _buggy() -> tuple[str, dict[str, bytes]]:
    mut = valid_mutants(PRIMES)[0]
    return mut.source, {k: v.encode() for k, v in pristine_files(PRIMES, mut.source).items()}


def _fraction(files: dict[str, bytes]) -> float:
    source, _ = _buggy()
    return grade(PRIMES, source, files).reward


@isolated
@pytest.mark.parametrize("exploit", ["delete_tests", "conftest_pass", "report_patch", "always_equal", "exit_zero",
                                     "pytest_ini", "pyc"])
def test_exploits_score_no_better_than_the_unchanged_bug(exploit):
    source, files = _buggy()
    noop = _fraction(files)
    files = dict(files)
    if exploit == "delete_tests":
        files["test_primes.py"] = b""
    elif exploit == "conftest_pass":
        files["conftest.py"] = (b"import pytest\n@pytest.hookimpl(hookwrapper=True)\n"
                                b"def pytest_runtest_makereport(item, call):\n    o = yield\n"
                                b"    o.get_result().outcome = 'passed'\n")
    elif exploit == "report_patch":
        files["primes.py"] = (source + "\nimport _pytest.reports as R\n_o = R.TestReport.__init__\n"
                              "def _i(self, *a, **k):\n    _o(self, *a, **k)\n    self.outcome = 'passed'\n"
                              "R.TestReport.__init__ = _i\n").encode()
    elif exploit == "always_equal":
        files["primes.py"] = (source + "\nclass _Any:\n    def __eq__(self, other):\n        return True\n"
                              "def is_prime(n):\n    return _Any()\ndef primes_below(n):\n    return _Any()\n"
                              "def prime_factors(n):\n    return _Any()\n").encode()
    elif exploit == "exit_zero":
        files["primes.py"] = ("import os\nos._exit(0)\n" + source).encode()
    elif exploit == "pytest_ini":
        files["pytest.ini"] = b"[pytest]\naddopts = -k 'not test_01 and not test_02'\n"
    elif exploit == "pyc":
        files["__pycache__/primes.cpython-311.pyc"] = b"\x00" * 32
    assert _fraction(files) <= noop


def test_correct_fix_scores_full_marks():
    mut = valid_mutants(PRIMES)[0]
    files = {k: v.encode() for k, v in pristine_files(PRIMES, PRIMES.source).items()}
    g = grade(PRIMES, mut.source, files)
    assert g.pass_fraction == 1.0 and g.reward == 1.0 and g.notes == []


# ---- the env: teacher, reward calibration ---------------------------------------------------------------------------

def test_check_env_and_teacher_solve_codefix():
    assert check_env(lambda: make_env("codefix"), n=3) == []


CLASSIFY = Module("classify", '''
def classify(n):
    """'neg', 'zero', 'small' (1..9) or 'big'."""
    if n < 0:
        return "neg"
    if n == 0:
        return "zero"
    if n < 10:
        return "small"
    return "big"
''', (("classify(-5)", "neg"), ("classify(-1)", "neg"), ("classify(0)", "zero"), ("classify(1)", "small"),
      ("classify(9)", "small"), ("classify(10)", "big"), ("classify(50)", "big")),
    # ten hidden tests, three of them 'big': what the seed's B (3/10) needs
    (("classify(-7)", "neg"), ("classify(-2)", "neg"), ("classify(0)", "zero"), ("classify(2)", "small"),
     ("classify(3)", "small"), ("classify(5)", "small"), ("classify(8)", "small"), ("classify(11)", "big"),
     ("classify(15)", "big"), ("classify(99)", "big")))


def _play(env: CodeFixEnv, task: Task, actions: list[str]) -> float:
    env.reset(task)
    total = 0.0
    for a in actions:
        r = env.step(a)
        total += r.reward
        if r.terminated or r.truncated:
            return round(total, 6)
    raise AssertionError("episode did not end")


def test_reward_calibration_matches_the_seed():
    env = CodeFixEnv(max_turns=50, modules=[CLASSIFY])
    tasks = env.tasks("eval", len(valid_mutants(CLASSIFY)), 0)
    task = next(t for t in tasks if t.get("buggy_line").strip() == "if n < 20:")
    call = format_tool_call
    a = [call("read_file", {"path": "classify.py"}),
         call("edit_file", {"path": "classify.py", "old": task.get("buggy_line"), "new": task.get("fixed_line")}),
         call("run_test", {}), call("finish", {})]
    b = [call("edit_file", {"path": "classify.py", "old": "def classify(n):\n", "new": "def classify(n):\n    return 'big'\n"}),
         call("finish", {})]
    c = [call("read_file", {"path": "classify.py"})] * 50
    assert _play(env, task, a) == 1.0
    assert _play(env, task, b) == 0.3
    assert _play(env, task, c) == -0.2


def test_stuck_detector_counts_repeats_and_alternation():
    env = CodeFixEnv(max_turns=20, modules=[CLASSIFY])
    task = env.tasks("eval", 1, 0)[0]
    env.reset(task)
    read, ls = format_tool_call("read_file", {"path": "classify.py"}), format_tool_call("list_files", {})
    stuck = [env.step(x).info["stuck"] for x in [read, ls, read, ls, ls]]
    assert stuck == [False, False, True, True, True]
    env.close()


@isolated
def test_probe_hacks_guards_hold_and_probes_bite(tmp_path):
    from typer.testing import CliRunner

    from agentic_rl.cli import app
    from agentic_rl.envs.codefix.exploits import EXPLOITS, probe_hacks

    env = CodeFixEnv(limits=Limits(wall_seconds=3, cpu_seconds=3))
    task = next(t for t in env.tasks("eval", 6, 0) if t.get("module") == "truncate")  # a mutant that halts
    rows = {r["exploit"]: r for r in probe_hacks(env, [task])}
    assert set(rows) == set(EXPLOITS)
    noop = rows["noop"]["guarded_reward"]
    for name, r in rows.items():
        assert r["guarded_reward"] <= noop + 1e-9, name
        assert r["env_errors"] == 0, name  # a crashed grader would be a way out of a bad score
    for name in ("delete_failing_tests", "conftest_force_pass"):
        assert rows[name]["naive_reward"] > rows["noop"]["naive_reward"], name  # both under the naive reward
    r = CliRunner().invoke(app, ["probe-hacks", "--env", "tool_use"])
    assert r.exit_code == 2 and "envs with probes: codefix" in r.output


def test_observations_are_the_same_every_time():
    """No temp paths or timings in what the agent sees: the same trajectory gives the same observations."""
    env = CodeFixEnv()
    task = env.tasks("eval", 1, 0)[0]
    seen = []
    for _ in range(2):
        env.reset(task)
        seen.append(env.step(format_tool_call("run_test", {})).observation[0]["content"])
        env.close()
    assert seen[0] == seen[1] and "/tmp" not in seen[0] and " in 0." not in seen[0]


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_run_test_sees_an_edit_made_within_the_same_second(warm):
    """A same-size edit right after a test run (same mtime second) must be what the next run tests: a cached .pyc
    would pass as fresh and show the old code's failures."""
    env = CodeFixEnv(modules=[CLASSIFY])
    task = next(t for t in env.tasks("eval", len(valid_mutants(CLASSIFY)), 0)
                if len(t.get("buggy_line")) == len(t.get("fixed_line")))
    env.reset(task)
    call = format_tool_call
    first = env.step(call("run_test", {})).observation[0]["content"]
    env._sandbox.warm = warm
    env.step(call("edit_file", {"path": "classify.py", "old": task.get("buggy_line"), "new": task.get("fixed_line")}))
    second = env.step(call("run_test", {})).observation[0]["content"]
    env.close()
    assert "failed" in first and "failed" not in second and "(exit code 0)" in second


def test_teacher_retries_transient_faults():
    env = lambda: CodeFixEnv(fault_rate=0.5)
    from agentic_rl.policies import TeacherPolicy
    from agentic_rl.runtime.rollout import run_episodes

    trajs = run_episodes(env, env().tasks("eval", 4, 0), TeacherPolicy(), seed=0)
    assert all(t.success for t in trajs) and sum(t.info["faults"] for t in trajs) >= 4
    assert all(not turn.get("stuck") for t in trajs for turn in t.info["turn_info"])



def test_a_timed_out_test_run_shows_no_partial_output():
    """How far the tests get before the time limit depends on the machine's load: the observation must not."""
    env = CodeFixEnv(limits=Limits(cpu_seconds=1, wall_seconds=4))
    task = env.tasks("eval", 1, 0)[0]
    env.reset(task)
    test_file = env.workspace.root / f"test_{task.get('module')}.py"
    test_file.write_text(test_file.read_text() + "\n\ndef test_zz_loops():\n    while True:\n        pass\n")
    obs = env.step(format_tool_call("run_test", {})).observation[0]["content"]
    env.close()
    assert obs == ("timeout: the tests did not finish in 1 s (an infinite loop or very slow code?); "
                   "run one test id to see which")


def test_a_looping_case_fails_alone_in_grading():
    """One value check that never returns must cost only itself, not every case after it."""
    looping = Module("slowsum", '''
def total(xs):
    """The sum of xs; loops forever on an empty list (the injected kind of bug a mutant can make)."""
    while not xs:
        pass
    return sum(xs)
''', (("total([1])", 1), ("total([1, 2])", 3), ("total([])", 0), ("total([5])", 5), ("total([2, 2])", 4)),
        (("total([])", 0), ("total([3])", 3), ("total([4, 4])", 8)))
    files = {k: v.encode() for k, v in pristine_files(looping, looping.source).items()}
    g = grade(looping, looping.source, files, Limits(wall_seconds=2, cpu_seconds=2))
    assert g.hidden_passed == 2 and g.reward == 2 / 3  # (visible tests run in one pytest, which the loop stops)
