"""codefix tasks: one mutant of one corpus module each, kept only if it is a real, findable bug.

A mutant is kept when the original module passes every visible and hidden case, the mutant fails at least one
visible case while passing at least one (so the visible tests point at the bug and the module still mostly works),
and it fails at least one hidden case (so leaving the bug in never scores full marks).
Candidates are checked in the sandbox, one child per module, with a per-case time limit (a removed `d += 1` makes
an infinite loop). Train and eval tasks come from disjoint modules (`split_of(module name)`); tasks are
deterministic for a seed and have stable ids `codefix/<split>/<module>/<operator>/<site>`.
"""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from functools import cache
from pathlib import Path

from ..base import Split, Task, split_of, stable_hash
from .corpus import CORPUS, Module
from .grading import MARKER, PLAIN_SRC, plain
from .mutate import OPERATORS, Mutant, mutants
from .sandbox import Limits, Sandbox

EVAL_FRACTION = 0.25

# Each case gets `seconds` of CPU time (ITIMER_PROF), not of wall-clock time, so a loaded machine sorts mutants the
# same way as an idle one: which tasks exist must not depend on what else the machine is doing.
_CHECK_RUNNER = PLAIN_SRC + '''
import json, signal, sys
request = json.loads(sys.stdin.read())
def on_alarm(signum, frame):
    raise TimeoutError
signal.signal(signal.SIGPROF, on_alarm)
out = []
for source in request["sources"]:
    row = []
    try:
        signal.setitimer(signal.ITIMER_PROF, request["seconds"])
        ns = {"__name__": request["module"]}
        exec(compile(source, request["module"] + ".py", "exec"), ns)
        signal.setitimer(signal.ITIMER_PROF, 0)
    except BaseException:
        signal.setitimer(signal.ITIMER_PROF, 0)
        out.append(None)
        continue
    for expr, want in zip(request["cases"], request["want"]):
        signal.setitimer(signal.ITIMER_PROF, request["seconds"])
        try:
            row.append(json.dumps(plain(eval(expr, dict(ns))), sort_keys=True) == want)
        except BaseException as e:
            row.append(False)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
        if request["early_stop"] and True in row and False in row:
            break  # enough to know it is a good task
    out.append(row)
sys.stdout.write(request["marker"] + json.dumps(out) + "\\n")
'''


def _case_results(module: Module, sources: list[str], cases: list, early_stop: bool, seconds: float = 0.1
                  ) -> list[list[bool] | None]:
    """For each source: pass/fail of the cases, in order (None if the module failed to load). With `early_stop`,
    a source's row ends as soon as it has both a pass and a fail."""
    root = Path(tempfile.mkdtemp(prefix="codefix-check-")).resolve()
    try:
        sandbox = Sandbox(root, Limits(wall_seconds=30 + seconds * len(sources) * len(cases), cpu_seconds=120))
        req = {"module": module.name, "sources": sources, "cases": [e for e, _ in cases], "seconds": seconds,
               "marker": MARKER, "early_stop": early_stop,
               "want": [json.dumps(plain(v), sort_keys=True) for _, v in cases]}
        res = sandbox.run(["python", "-c", _CHECK_RUNNER], stdin=json.dumps(req))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise RuntimeError(f"checking mutants of {module.name} failed: {res.outcome} {res.stderr[-500:]}")
    return json.loads(lines[-1][len(MARKER):])


@cache
def valid_mutants(module: Module) -> tuple[Mutant, ...]:
    """The module's mutants that make good tasks (see the module docstring)."""
    candidates = mutants(module.source)
    original = _case_results(module, [module.source], list(module.visible + module.hidden), early_stop=False)[0]
    if original is None or not all(original):
        raise ValueError(f"corpus module {module.name} does not pass its own cases")
    results = _case_results(module, [m.source for m in candidates], list(module.visible), early_stop=True)
    # The buggy line must be unique in the file, so "replace this line" names one place.
    kept = [m for m, r in zip(candidates, results)
            if r is not None and True in r and False in r and m.source.count(m.mutated_line) == 1]
    # The hidden tests must catch the bug too: otherwise submitting the bug untouched scores full marks, and
    # "success" would not mean "fixed" (docs/design-notes.md#codefix-task-filter).
    hidden = _case_results(module, [m.source for m in kept], list(module.hidden), early_stop=False) if kept else []
    return tuple(m for m, r in zip(kept, hidden) if r is None or False in r)


def module_split(module: Module) -> Split:
    return split_of(f"codefix:{module.name}", EVAL_FRACTION)


def prompt_for(module: Module) -> str:
    return (f"Some tests in test_{module.name}.py fail. Find and fix the bug in {module.name}.py so that they pass, "
            f"without changing the tests. Call finish() when you are done.")


def make_tasks(split: Split, n: int, seed: int, modules: list[Module] | None = None) -> list[Task]:
    """`n` distinct tasks of `split`: operators drawn evenly, then a module and a site, all from `seed`."""
    pool = [m for m in (modules or CORPUS) if module_split(m) == split] if modules is None else list(modules)
    by_op: dict[str, list[tuple[Module, Mutant]]] = {}
    for module in pool:
        for mut in valid_mutants(module):
            by_op.setdefault(mut.operator, []).append((module, mut))
    total = sum(len(v) for v in by_op.values())
    if n > total:
        raise ValueError(f"only {total} distinct codefix {split} tasks exist, asked for {n}")
    rng = random.Random(stable_hash("codefix", split, seed))
    ops = [op for op in OPERATORS if op in by_op]
    out: list[Task] = []
    used: set[tuple[str, str, int]] = set()
    while len(out) < n:
        op = rng.choice(ops)
        module, mut = rng.choice(by_op[op])
        key = (module.name, mut.operator, mut.site)
        if key in used:
            continue
        used.add(key)
        out.append(_task(split, module, mut))
    return out


def _task(split: Split, module: Module, mut: Mutant) -> Task:
    tid = f"codefix/{split}/{module.name}/{mut.operator}/{mut.site}"
    meta = (("module", module.name), ("operator", mut.operator), ("site", mut.site), ("line", mut.line),
            ("buggy_line", mut.mutated_line), ("fixed_line", mut.original_line))
    return Task(tid, split, mut.operator, prompt_for(module), "", (), meta)


def task_from_id(task_id: str, modules: list[Module] | None = None) -> Task:
    """The task an id names; ValueError that says what a valid id looks like when it names none. With custom
    `modules`, as in make_tasks, any module serves either split."""
    custom = modules is not None
    modules = list(modules or CORPUS)
    parts = task_id.split("/")
    by_name = {m.name: m for m in modules}
    if len(parts) == 5 and parts[0] == "codefix" and parts[1] in ("train", "eval") and parts[2] in by_name \
            and parts[4].isdigit():
        module = by_name[parts[2]]
        for mut in valid_mutants(module):
            if (mut.operator, mut.site) == (parts[3], int(parts[4])) and (custom or module_split(module) == parts[1]):
                return _task(parts[1], module, mut)  # type: ignore[arg-type]
    raise ValueError(f"no codefix task with id {task_id!r}; ids read codefix/<split>/<module>/<operator>/<site>, "
                     f"for example {_task(module_split(modules[0]), modules[0], valid_mutants(modules[0])[0]).id}")
