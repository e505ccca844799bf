"""`codefix`: fix a buggy function in a real git repository with list_files, read_file, edit_file, run_test, finish.

Each episode gets a fresh git repository (one commit) holding one corpus module with an injected bug and its visible
tests; hidden tests stay with the env. All code runs in the sandbox (`sandbox.py`); grading is `grading.py`.

Reward (per turn; the episode reward is their sum):
    r_finish = fraction of the *hidden* tests that pass after grading, given on finish() (or a final answer);
               0 if grading caught tampering (pytest reporting passes the values contradict);
               no finish by the turn limit or the episode's time → no test credit (the agent did not submit)
    penalty  = STEP_COST × (turns beyond FREE_TURNS) + LOOP_COST × (stuck events), capped at MAX_PENALTY in total
Why hidden tests only: any credit for the visible tests is credit an agent can take by hard-coding their expected
outputs, which no grader can tell from a fix in general; paying hidden tests only, hard-coding earns exactly what
leaving the bug does (`agentic-rl probe-hacks`; docs/design-notes.md#codefix-reward-hidden-tests-only). The visible
tests remain the agent's feedback (`run_test`), and `info` reports them (`visible_passed`, `pass_fraction` over
visible + hidden) for evaluation only.
Transient faults (off by default; `fault_rate` for robustness evaluation): a tool call other than finish may get
"error: service unavailable, try again" instead of running — at most MAX_FAULTS per episode, decided by a hash of
(task id, call index) as in every ToolEnv; faulted turns are neither penalised nor stuck events.
The stuck detector counts a turn as stuck when it repeats an earlier action that got the same observation, re-reads
a file that has not changed since its last read, or closes an A-B-A-B alternation of actions.
Calibrated on the seed's three trajectories (`tests/envs/test_codefix.py`, a module with 10 hidden tests): A read → edit
→ test → finish with 10/10 = 1.0; B careless edits with 3/10 = 0.3; C reads the file 50 times = −0.2.
"""

from __future__ import annotations

import re
import time
from dataclasses import replace
from typing import Any, ClassVar

from ...runtime.parsing import ToolCall, format_tool_call, message_call, message_text
from ...runtime.tools import Toolbox, ToolError
from ..base import FAULT_TEXT, Message, Split, StepResult, Task, TurnRecord
from ..tool_env import Score, ToolEnv
from .corpus import BY_NAME, CORPUS, Module
from .grading import Grade, grade, pristine_files
from .sandbox import Limits, Sandbox
from .tasks import make_tasks, task_from_id, valid_mutants
from .workspace import Workspace

STEP_COST = 0.01
FREE_TURNS = 10
LOOP_COST = 0.05
MAX_PENALTY = 0.2
OUTPUT_LIMIT = 2000  # characters of pytest output shown to the agent
# A pytest node id: a relative path of plain characters, then ::name parts (parameters in brackets). Never an option.
TEST_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_./-]*(::[A-Za-z0-9_]+(\[[A-Za-z0-9_.,-]*\])?)*")

SYSTEM_PROMPT = (
    "You are a coding agent in a git repository. Use the tools to read the code, run the tests, fix the bug and "
    "call finish(). To call a tool, reply with only "
    '<tool_call>{"name":...,"arguments":{...}}</tool_call>.\nTools:\n'
)


class CodeFixEnv(ToolEnv):
    """Fix one injected bug; rewarded by the hidden tests, graded out of the agent's reach."""

    name: ClassVar[str] = "codefix"
    mistakes: ClassVar[tuple[str, ...]] = ("skip_read", "skip_test", "wrong_fix", "no_finish", "reread")
    default_noise: ClassVar[dict[str, float]] = {"skip_read": 0.2, "skip_test": 0.3, "wrong_fix": 0.15,
                                                 "no_finish": 0.05, "reread": 0.2}
    tokenizer_tasks: ClassVar[int] = 200
    supports_faults: ClassVar[bool] = True
    submit_tool: ClassVar[str | None] = "finish"
    # `agentic-rl run` defaults for codefix (docs/design-notes.md#codefix-run-defaults). Episodes run real
    # (sandboxed) tests and are long: a smaller budget than tool_use's. Micro-batches by row count alone
    # (`micro_batch_tokens: None`): tool_use's 2,048-token budget would hold only a row or two of these.
    # greedy_eval off: a greedy re-evaluation of each model costs a large share of the run's budget here, and the
    # tiny policy solves no codefix task either way.
    # teacher_samples 1: each noisy-teacher episode runs real tests, so tool_use's several draws per task would not
    # fit the run's budget.
    run_defaults: ClassVar[dict[str, Any]] = {
        "eval_tasks": 40, "robustness_tasks": 20, "greedy_eval": False,
        "sft": {"demos": 400, "epochs": 2.0, "batch_size": 16, "micro_batch_size": 8, "micro_batch_tokens": None,
                "eval_every": 0, "eval_tasks": 20, "teacher_samples": 1},
        "grpo": {"steps": 10, "tasks_per_step": 4, "group_size": 4, "eval_every": 0, "eval_tasks": 20,
                 "micro_batch_size": 4, "micro_batch_tokens": None},
    }
    # The teacher's edit_file calls are long (the tiny tokenizer spends a token per indentation space), and a turn the
    # sampler cuts off can never be imitated whole (docs/design-notes.md#codefix-turn-budget).
    max_new_tokens: ClassVar[int] = 192

    def __init__(self, max_turns: int = 12, limits: Limits | None = None, modules: list[Module] | None = None,
                 fault_rate: float = 0.0, episode_seconds: float = 120.0):
        """`fault_rate`: the chance that a tool call (not finish) meets a transient fault instead of running —
        0 by default; robustness evaluation raises it. `episode_seconds`: the env's own time per episode (time
        inside `step`, not the policy's); each test run gets at most what is left, and a tool turn that finds none
        left ends the episode as truncated, unsubmitted (finish() is always graded, within grading's own limits)."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be ≥ 1, got {max_turns}")
        if episode_seconds <= 0:
            raise ValueError(f"episode_seconds must be > 0, got {episode_seconds}")
        self.episode_seconds = episode_seconds
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate must be in [0, 1], got {fault_rate}")
        self.max_turns, self.fault_rate = max_turns, fault_rate
        # The corpus tests take milliseconds: 2 s of CPU time decide, 6 s of wall clock stop a run that waits.
        self.limits = limits or Limits(cpu_seconds=2, wall_seconds=6)
        self.modules = {m.name: m for m in (modules or CORPUS)}
        self._custom = modules is not None
        self.tools = Toolbox([self.list_files, self.read_file, self.edit_file, self.run_test, self.finish])
        self.system_prompt = SYSTEM_PROMPT + self.tools.schemas_text()
        self.workspace: Workspace | None = None
        self._sandbox: Sandbox | None = None

    # -- tasks --

    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        return make_tasks(split, n, seed, list(self.modules.values()) if self._custom else None)

    def task_by_id(self, task_id: str, seed: int = 0) -> Task:
        """The task an id names (`codefix/<split>/<module>/<operator>/<site>`), whatever the seed."""
        return task_from_id(task_id, list(self.modules.values()) if self._custom else None)

    def task_source(self, task: Task) -> tuple[Module, str]:
        """The task's module and its buggy source."""
        module = self.modules.get(task.get("module")) or BY_NAME[task.get("module")]
        mut = next(m for m in valid_mutants(module) if (m.operator, m.site) == (task.get("operator"), task.get("site")))
        return module, mut.source

    # -- tools (bound to the current episode's workspace) --

    def list_files(self) -> str:
        """List the files in the repository."""
        return "\n".join(self._ws().list_files())

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """Read a file with numbered lines.

        Args:
            path: Path relative to the repository root, for example "slug.py".
            start_line: First line to show (1-based); default the first.
            end_line: Last line to show; default the last.
        """
        return self._ws().read(path, start_line, end_line)

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace an exact, unique piece of text in a file.

        Args:
            path: Path relative to the repository root.
            old: The exact text to replace; it must occur exactly once.
            new: The replacement text.
        """
        return self._ws().edit(path, old, new)

    def run_test(self, test_id: str | None = None) -> str:
        """Run the tests (all, or one test id such as "test_slug.py::test_01") and show pytest's summary.

        Args:
            test_id: A test file or test id; default all tests.
        """
        ws = self._ws()
        target = test_id.strip() if test_id else ""
        if target:
            if not TEST_ID.fullmatch(target):
                raise ToolError(f"test_id must be a test file or test id such as 'test_slug.py::test_01', got "
                                f"{target[:80]!r}")
            ws.resolve(target.split("::")[0])  # confined like every path
        if self._sandbox is None:
            self._sandbox = Sandbox(ws.root, self.limits)
        limit = min(self.limits.wall_seconds, self.episode_seconds - self._spent)  # the episode's time left
        res = self._sandbox.run(
            ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line", "-o", "console_output_style=classic",
             *([target] if target else [])], wall_seconds=limit)
        if res.outcome != "ok":
            self._sandbox_events.append(res.outcome)
        # The workspace's temporary path and pytest's timing would make every observation unique (the same
        # trajectory must give the same observations): paths relative to the repo, no "in 0.01s".
        text = (res.stdout + res.stderr).replace(str(ws.root) + "/", "").replace(str(ws.root), ".")
        text = re.sub(r" in \d+(\.\d+)?s\b", "", text).strip()
        text = (text[-OUTPUT_LIMIT:] if len(text) > OUTPUT_LIMIT else text) + f"\n(exit code {res.returncode})"
        if res.timed_out:
            # Not the partial output: how far the tests got in the time limit depends on the machine's load, and
            # the same trajectory must give the same observation (and reward).
            text = (f"timeout: the tests did not finish in {self.limits.cpu_seconds:g} s (an infinite loop or very "
                    f"slow code?); run one test id to see which" if limit >= self.limits.wall_seconds else
                    "timeout: the episode's time ran out while the tests ran")
        elif res.outcome.startswith("killed"):
            text = f"{res.outcome}: the test process was killed (a resource limit); run one test id to see which"
        return text

    def finish(self) -> str:
        """Submit the repository as it is now and end the episode."""
        return "finished"

    def _ws(self) -> Workspace:
        if self.workspace is None or self.workspace.closed:
            raise ToolError("no episode is running")
        return self.workspace

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, Any]]:
        from .exploits import probe_hacks

        return probe_hacks(self, tasks)

    def solved_at(self, task: Task, messages: list[Message]) -> int | None:
        """The first turn whose full test run passed: from then on, the right move is finish()."""
        turns = 0
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            turns += 1
            obs = str(messages[i + 1]["content"]) if i + 1 < len(messages) else ""
            if message_call(m) == ("run_test", {}) and obs.endswith("(exit code 0)"):
                return turns
        return None

    def _perturbed(self, task: Task, how: str) -> Task | None:
        """The same bug report in another form: reworded, lower-cased, spaced out, or in Chinese."""
        name = task.get("module")
        if how == "rephrase":
            prompt = (f"The tests in test_{name}.py are failing. Repair {name}.py (leave the tests as they are), "
                      f"then call finish().")
        elif how == "casing":
            prompt = task.prompt.lower()  # file names are lower case already, so they survive
        elif how == "language":
            prompt = f"test_{name}.py 中有测试失败。请找到并修复 {name}.py 中的错误，不要修改测试。完成后调用 finish()。"
        else:
            return super()._perturbed(task, how)
        return replace(task, prompt=prompt)

    # -- the episode (the turn loop is ToolEnv's) --

    def start(self, task: Task) -> None:
        module, source = self.task_source(task)
        self._module, self._source = module, source
        self.workspace = Workspace(pristine_files(module, source))
        self._sandbox = None  # made on the first run_test, kept for the episode
        self._penalty = 0.0
        self._sandbox_events: list[str] = []
        self._spent = 0.0  # seconds inside step() this episode

    def step(self, action: str) -> StepResult:
        if getattr(self, "_task", None) is None or self.workspace is None:
            raise RuntimeError("call reset(task) before step()")
        t0 = time.monotonic()
        try:
            return super().step(action)
        finally:
            self._spent += time.monotonic() - t0

    def out_of_budget(self) -> str | None:
        return "time_limit" if self._spent >= self.episode_seconds else None

    def read_state(self, call: ToolCall) -> tuple[str, Any] | None:
        """For read_file: the file's current bytes, so re-reading an unchanged file counts as stuck."""
        if call.name != "read_file":
            return None
        path = str(call.arguments.get("path", ""))
        try:
            return path.strip(), self._ws().read_bytes(path)
        except ToolError:
            return None

    def turn_reward(self, task: Task, turn: TurnRecord) -> float:
        """STEP_COST past FREE_TURNS and LOOP_COST per stuck turn, capped; a faulted turn costs nothing."""
        return 0.0 if turn.fault else self._penalise(turn.stuck)

    def _penalise(self, stuck: bool) -> float:
        """This turn's share of the shaping penalty, keeping the episode's total within MAX_PENALTY."""
        want = STEP_COST * (self._turns > FREE_TURNS) + LOOP_COST * stuck
        take = min(want, MAX_PENALTY - self._penalty)
        self._penalty += take
        return -take if take else 0.0  # not -0.0

    def score(self, task: Task, answer: str) -> Score:
        """Grade the repository as it is now (finish() or a final answer): the hidden tests' pass fraction."""
        files, notes = self._ws().snapshot()
        g: Grade = grade(self._module, self._source, files, self.limits)
        return Score(g.reward + self._penalise(False), g.reward == 1.0, False,
                     {"pass_fraction": g.pass_fraction, "visible_passed": g.visible_passed,
                      "hidden_passed": g.hidden_passed, "grade_notes": notes + g.notes})

    def episode_info(self) -> dict[str, Any]:
        return {"sandbox_events": list(self._sandbox_events)}

    def close(self) -> None:
        if self.workspace is not None:
            self.workspace.close()

    # -- the teacher: read → run_test → fix the mutated line → run_test → finish --

    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        noise = noise or {}
        name = task.get("module")
        if messages[-1]["role"] == "tool" and messages[-1]["content"] == FAULT_TEXT:
            return message_text(messages[-2])  # a transient fault: the same call again
        # the plan's progress: assistant turns whose call ran (a faulted call is made again, not counted)
        done = [m for i, m in enumerate(messages) if m["role"] == "assistant"
                and not (i + 1 < len(messages) and messages[i + 1]["content"] == FAULT_TEXT)]
        plan: list[str | tuple[str, dict[str, Any]]] = []
        if not noise.get("skip_read"):
            plan.append(("read_file", {"path": f"{name}.py"}))
        if noise.get("reread"):
            plan.append(("read_file", {"path": f"{name}.py"}))
        if not noise.get("skip_test"):
            plan.append(("run_test", {}))
        buggy, fixed = task.get("buggy_line"), task.get("fixed_line")
        if noise.get("wrong_fix"):
            plan.append(("edit_file", {"path": f"{name}.py", "old": buggy, "new": buggy + "  # checked"}))
        else:
            plan.append(("edit_file", {"path": f"{name}.py", "old": buggy, "new": fixed}))
        plan.append(("run_test", {}))
        if noise.get("no_finish"):
            plan += [("run_test", {})] * self.max_turns
        plan.append(("finish", {}))
        step = len(done)
        if step < len(plan):
            call_name, args = plan[step]
            return format_tool_call(call_name, args)
        return format_tool_call("finish", {})
