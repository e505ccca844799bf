"""Grading the agent cannot forge.

1. A fresh copy of the task's pristine repository gets only the agent's changes to non-test Python source files.
   Test files come back as they were; new conftest.py, pytest.ini, pyproject.toml, setup.cfg, setup.py, tox.ini,
   `.pth`, sitecustomize.py, usercustomize.py and every non-`.py` file (a forged `__pycache__/*.pyc` among them) are
   dropped.
2. Visible tests run under pytest in the sandbox with `--noconftest -p no:cacheprovider -o addopts=""`, plugin
   autoloading off, and junit output. Every expected test id must be in the junit file, and the exit code, the
   junit counts and the ids must agree; if they do not, every visible test counts as failed. The same visible
   cases are also checked by value, as below: a test counts only if both say it passed, and a pass that the values
   contradict marks the grade `tampered`: no visible test counts, and the env pays 0 (`Grade.reward`).
3. Hidden tests (and the value check of the visible ones) never run inside pytest: code running in the pytest
   process can forge its results (a module-level monkeypatch of `_pytest.reports.TestReport` reports "passed" even
   under `--noconftest` with junit). A child in the sandbox imports the candidate module, evaluates each expression
   and prints the *values*, encoded by a strict function that accepts only plain data (`type(x) is int`, not
   isinstance: an int subclass with a lying `__eq__` does not pass); the trusted parent compares them with the
   expected values, which never leave it.
"""

from __future__ import annotations

import json
import math
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .corpus import Module, visible_test_file, visible_test_ids
from .files import UnsafeFile, read_regular, remove_tree
from .sandbox import Limits, Sandbox

DROPPED_NAMES = {"conftest.py", "pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini", "sitecustomize.py",
                 "usercustomize.py", "setup.py"}
PYTEST_FLAGS = ["--noconftest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "--tb=no", "-rN"]
MARKER = "@@CODEFIX-RESULT@@"
JUNIT_CAP = 1 << 20  # bytes of junit XML read back (the corpus tests write a few KiB)

# One definition of "plain data", used by the child (as source) and the parent (exec'd from the same text).
PLAIN_SRC = '''
def plain(x, depth=0):
    if depth > 50:
        return ["<too deep>"]
    t = type(x)
    if x is None or t is bool or t is int or t is str:
        return x
    if t is float:
        return x if x == x and x not in (float("inf"), float("-inf")) else repr(x)
    if t is list:
        return ["list", [plain(v, depth + 1) for v in x]]
    if t is tuple:
        return ["tuple", [plain(v, depth + 1) for v in x]]
    if t is dict and all(type(k) is str for k in x):
        return ["dict", {k: plain(v, depth + 1) for k, v in sorted(x.items())}]
    if t is set or t is frozenset:
        return ["set", sorted((plain(v, depth + 1) for v in x), key=repr)]
    return ["<not plain data>", t.__name__]
'''
_ns: dict[str, Any] = {}
exec(PLAIN_SRC, _ns)
plain = _ns["plain"]

HIDDEN_RUNNER = PLAIN_SRC + '''
import json, signal, sys, importlib
request = json.loads(sys.stdin.read())
sys.path.insert(0, ".")
marker, results = request["marker"], []
def on_alarm(signum, frame):
    raise TimeoutError("case timed out")
# CPU time decides (the same case meets the same limit on a busy machine); the wall clock, at 4x, only stops a case
# that waits without computing. Both are the same timeout.
signal.signal(signal.SIGPROF, on_alarm)
signal.signal(signal.SIGALRM, on_alarm)
try:
    namespace = dict(vars(importlib.import_module(request["module"])))
except BaseException as e:
    print(marker + json.dumps({"import_error": type(e).__name__}), flush=True)
    raise SystemExit(0)
for expr in request["cases"]:
    signal.setitimer(signal.ITIMER_PROF, request["seconds"])
    signal.setitimer(signal.ITIMER_REAL, 4 * request["seconds"])
    try:
        results.append({"ok": True, "value": plain(eval(expr, dict(namespace)))})
    except BaseException as e:
        results.append({"ok": False, "error": type(e).__name__})
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
sys.stdout.write(marker + json.dumps({"results": results}) + "\\n")
sys.stdout.flush()
'''


SECONDS_PER_CASE = 0.5  # each value check's own CPU-time limit (the corpus functions take microseconds)


@dataclass
class Grade:
    visible_passed: int
    visible_total: int
    hidden_passed: int
    hidden_total: int
    notes: list[str] = field(default_factory=list)  # what grading noticed: tampering, timeouts, dropped files
    tampered: bool = False  # pytest reported passes that the values contradict

    @property
    def reward(self) -> float:
        """What the env pays: the hidden pass fraction; 0 when grading caught tampering or the module has no hidden
        tests (env.py says why hidden tests only)."""
        return 0.0 if self.tampered or not self.hidden_total else self.hidden_passed / self.hidden_total

    @property
    def pass_fraction(self) -> float:
        total = self.visible_total + self.hidden_total
        return (self.visible_passed + self.hidden_passed) / total if total else 0.0


def pristine_files(module: Module, source: str) -> dict[str, str]:
    """The task's repository as the agent first sees it: the (buggy) module and its visible tests."""
    return {f"{module.name}.py": source, f"test_{module.name}.py": visible_test_file(module)}


def is_test_or_config(rel: str) -> bool:
    name = Path(rel).name
    return (name.startswith("test_") or name.endswith("_test.py") or name in DROPPED_NAMES
            or name.endswith(".pth") or not name.endswith(".py") or "__pycache__" in Path(rel).parts)


def grading_copy(module: Module, source: str, agent_files: dict[str, bytes], root: Path) -> list[str]:
    """Write pristine + the agent's non-test source changes into `root`; return notes on what it dropped.
    A path that cannot be written as given (under a pristine file, say) is dropped with a note, never an error."""
    notes = []
    pristine = pristine_files(module, source)
    for rel, text in pristine.items():
        (root / rel).write_text(text)
    for rel, data in sorted(agent_files.items()):
        if is_test_or_config(rel) or ".." in Path(rel).parts or Path(rel).is_absolute():
            if pristine.get(rel, "").encode() != data:
                notes.append(f"ignored {rel}")
            continue
        dest = root / rel
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        except (OSError, ValueError) as e:
            notes.append(f"ignored {rel} ({type(e).__name__})")
    return notes


def run_visible(module: Module, sandbox: Sandbox, junit_name: str = ".grade-junit.xml"
                ) -> tuple[list[bool], list[str]]:
    """Visible tests under pytest with junit; (passed per test, notes). Exit code, junit and ids must agree."""
    root = sandbox.workspace
    res = sandbox.run(["python", "-m", "pytest", *PYTEST_FLAGS, f"--junitxml={junit_name}", f"test_{module.name}.py"])
    expected = visible_test_ids(module)
    none = [False] * len(expected)
    if res.timed_out:
        return none, [f"visible tests: {res.outcome}"]
    try:  # the run's code may have replaced the report with anything: a FIFO, a link, a huge file, bad XML
        tree = ET.ElementTree(ET.fromstring(read_regular(root / junit_name, JUNIT_CAP)))
    except (UnsafeFile, ET.ParseError, ValueError, RecursionError):
        return none, [f"visible tests: no readable junit report (exit code {res.returncode})"]
    cases: dict[str, bool] = {}
    for tc in tree.iter("testcase"):
        tid = f"test_{module.name}.py::{tc.get('name')}"
        cases[tid] = not any(child.tag in ("failure", "error", "skipped") for child in tc)
    missing = [t for t in expected if t not in cases]
    passed = [cases.get(t, False) for t in expected]
    if missing:
        return none, [f"visible tests: {len(missing)} expected test(s) missing from the report"]
    all_passed = all(passed) and len(cases) == len(expected)
    if (res.returncode == 0) != all_passed:
        return none, [f"visible tests: exit code {res.returncode} disagrees with the junit report "
                      f"({sum(passed)} passed)"]
    return passed, []


def run_values(module: Module, cases: tuple, sandbox: Sandbox, seconds_per_case: float = 0.5
               ) -> tuple[list[bool], list[str]]:
    """Evaluate (expression, expected) cases out of pytest; values compared here. (passed per case, notes)."""
    marker = MARKER
    none = [False] * len(cases)
    request = {"module": module.name, "cases": [expr for expr, _ in cases], "seconds": seconds_per_case,
               "marker": marker}
    res = sandbox.run(["python", "-c", HIDDEN_RUNNER], stdin=json.dumps(request))
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(marker)]
    if not lines:
        return none, [f"value check: no result ({res.outcome})"]
    # The line comes from a process that ran the agent's code: anything may stand there.
    try:
        report = json.loads(lines[-1][len(marker):])
        results = report["results"] if isinstance(report, dict) and "import_error" not in report else None
        if results is None:
            error = report.get("import_error") if isinstance(report, dict) else None
            return none, [f"value check: the module failed to import ({error})" if isinstance(error, str)
                          else "value check: malformed result"]
        if not isinstance(results, list) or len(results) != len(cases):
            return none, ["value check: wrong number of results"]
        return [isinstance(got, dict) and got.get("ok") is True and json.dumps(got.get("value"), sort_keys=True)
                == json.dumps(plain(expected), sort_keys=True) for (_, expected), got in zip(cases, results)], []
    except (ValueError, TypeError, RecursionError):
        return none, ["value check: unreadable result"]


def grade(module: Module, source: str, agent_files: dict[str, bytes], limits: Limits | None = None) -> Grade:
    """Grade the agent's workspace files against the task's pristine repository (source = the buggy module)."""
    root = Path(tempfile.mkdtemp(prefix="codefix-grade-")).resolve()
    try:
        notes = grading_copy(module, source, agent_files, root)
        sandbox = Sandbox(root, limits or Limits(cpu_seconds=20, wall_seconds=60))
        by_pytest, vnotes = run_visible(module, sandbox)
        cases = module.visible + module.hidden
        # One child for all cases, with a budget that fits every case's own alarm: a case that loops forever must
        # fail alone, not take the cases after it down with the whole child (and make a no-op score 0).
        budget = len(cases) * SECONDS_PER_CASE + 2
        sandbox.limits = replace(sandbox.limits, wall_seconds=max(sandbox.limits.wall_seconds, 4 * budget + 2),
                                             cpu_seconds=max(sandbox.limits.cpu_seconds, math.ceil(budget)))
        values, cnotes = run_values(module, cases, sandbox, SECONDS_PER_CASE)
        by_value, hidden, hnotes = values[:len(module.visible)], values[len(module.visible):], []
        visible = sum(p and v for p, v in zip(by_pytest, by_value))
        tampered = any(p and not v for p, v in zip(by_pytest, by_value))
        if tampered:  # pytest reported a pass that the values contradict
            visible, vnotes = 0, vnotes + ["visible tests: pytest reported passes the values contradict (tampering)"]
        return Grade(visible, len(module.visible), sum(hidden), len(module.hidden), notes + vnotes + cnotes + hnotes,
                     tampered)
    finally:
        remove_tree(root)
