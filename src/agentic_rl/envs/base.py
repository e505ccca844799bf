"""The environment contract (Gymnasium-like): tasks, `reset`, `step`, a teacher, and `check_env` to prove it holds."""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import islice
from typing import Any, ClassVar, Literal

from ..runtime.parsing import message_calls
from ..runtime.tools import Toolbox

Split = Literal["train", "eval"]
# The observation of an injected transient tool fault; the right move is to call again. Envs that take a
# `fault_rate` decide faults by a hash of (task id, call index), so a trajectory always meets the same faults.
FAULT_TEXT = "error: service unavailable, try again"
MAX_FAULTS = 2  # faults per episode at most, so retrying always gets through
SEARCH_TASKS = 2000  # tasks per split that Env.task_by_id looks through by default


def injects_fault(task_id: str, call_index: int, faults_so_far: int, rate: float) -> bool:
    """Whether this call meets a transient fault (deterministic for the task and call index)."""
    return faults_so_far < MAX_FAULTS and stable_hash("fault", task_id, call_index) % 10_000 < rate * 10_000


# Prompt perturbations for robustness evaluation (see Env.perturb).
PERTURBATIONS: tuple[str, ...] = ("rephrase", "casing", "whitespace", "language")
Message = dict[str, Any]


@dataclass(frozen=True)
class Task:
    """One problem for the agent. `id` is stable: the same generator, seed and index give the same id."""

    id: str
    split: Split
    kind: str  # the task type, for per-type metrics
    prompt: str  # the user message
    answer: str  # the gold final answer
    reference: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()  # the reference solution's tool calls
    meta: tuple[tuple[str, Any], ...] = ()  # anything else the env needs (hashable, so tasks are too)

    @property
    def reference_calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(name, dict(args)) for name, args in self.reference]

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.meta).get(key, default)


@dataclass(frozen=True)
class TurnRecord:
    """What the env made of one assistant turn; kept per turn (`Trajectory.info["turn_info"]`) for evaluation."""

    parsed: Literal["FinalAnswer", "ToolCall", "ParseError"]
    tool: str | None = None  # the tool called, also when the call met a fault
    fault: bool = False  # the call met an injected transient fault and did not run
    stuck: bool = False  # the stuck detector fired: a repeat, an A-B-A-B alternation, a re-read of what is unchanged
    parse_error: str | None = None  # the ParseError's kind
    calls: int = 0  # the calls the turn made: 1, or several for parallel calls (an env with max_calls > 1)


@dataclass(frozen=True)
class EpisodeRecord:
    """The episode's totals, reported on its last step; they become `Trajectory.success` and `Trajectory.info`."""

    success: bool  # the env's verifiable check passed
    episode_reward: float  # the sum of the episode's per-turn rewards
    turns: int = 0  # assistant turns
    tool_calls: int = 0  # calls that ran (neither faulted nor failing to parse)
    faults: int = 0  # calls that met an injected fault
    invalid: int = 0  # turns that failed to parse (or called a tool with invalid arguments)
    stuck_turns: int = 0  # turns the stuck detector fired on
    extra_calls: int = 0  # calls beyond the reference solution (envs with reference solutions)
    no_answer: bool = False  # no submission (a turn or time limit ended the episode) or an empty one


@dataclass
class StepResult:
    """What `Env.step` returns, as in Gymnasium: observation messages, this turn's reward, the end flags, and typed
    records of the turn and (on the last step) the episode."""

    observation: list[Message]  # messages to append to the conversation (empty when the episode ends)
    reward: float  # this turn's reward; the per-turn rewards of an episode sum to its final reward
    terminated: bool  # the agent ended the episode: a final answer, or a submitting tool (codefix's finish())
    truncated: bool  # a limit of the env ended the episode (the turn limit; codefix's time per episode)
    turn: TurnRecord | None = None
    episode: EpisodeRecord | None = None  # set on the step that ends the episode
    extra: dict[str, Any] = field(default_factory=dict)  # env-specific facts (codefix: the grade's details)

    @property
    def info(self) -> dict[str, Any]:
        """Everything the step reports, flat (Gymnasium's `info`): the turn's record, the episode's, the extras."""
        return {**(asdict(self.turn) if self.turn else {}), **(asdict(self.episode) if self.episode else {}),
                **self.extra}


class Env(ABC):
    """One episode at a time: `reset(task)` then `step(action)` until terminated or truncated.

    Subclasses supply a task generator, their tools as plain typed functions, a reward and a teacher.
    """

    name: ClassVar[str]
    tools: Toolbox
    max_turns: int

    @abstractmethod
    def tasks(self, split: Split, n: int, seed: int = 0) -> list[Task]:
        """`n` tasks of `split`, deterministic for `seed`. Train and eval tasks never overlap."""

    @abstractmethod
    def reset(self, task: Task) -> list[Message]:
        """Start an episode; return the opening messages (system prompt with the tool schemas, user message)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one assistant turn (its raw text) and return what happened."""

    @abstractmethod
    def teacher_turn(self, task: Task, messages: list[Message], noise: dict[str, bool] | None = None) -> str:
        """The scripted teacher's next assistant turn. `noise` names the mistakes to make in this episode."""

    def task_stream(self, split: Split, seed: int = 0) -> Iterator[Task]:
        """The tasks of `split` one at a time, in the order `tasks` gives them, for finding one by id. Default: the
        first SEARCH_TASKS of `tasks` (as many as it can make); envs built on `draw_tasks` stream them instead."""
        for n in (SEARCH_TASKS, 200):
            try:
                return iter(self.tasks(split, n, seed))
            except ValueError:  # fewer tasks than that exist
                continue
        return iter(())

    def task_by_id(self, task_id: str, seed: int = 0) -> Task:
        """The task with this stable id; ValueError naming the id when there is none. Default: a search of the
        first SEARCH_TASKS tasks of the split the id names (each split if it names none) for `seed`, stopping at
        the task; envs whose ids name the task outright override this."""
        named = task_id.split("/")[1] if task_id.count("/") >= 2 else ""
        for split in (named,) if named in ("train", "eval") else ("eval", "train"):
            for task in islice(self.task_stream(split, seed), SEARCH_TASKS):  # type: ignore[arg-type]
                if task.id == task_id:
                    return task
        raise ValueError(f"no {self.name} task with id {task_id!r} among the first {SEARCH_TASKS} of "
                         f"{'the ' + named + ' split' if named in ('train', 'eval') else 'each split'} for seed {seed}; "
                         f"ids read {self.name}/<train|eval>/<hash>, as rollout and eval print them")

    def noise_plan(self, task: Task, rng: random.Random, rates: dict[str, float]) -> dict[str, bool]:
        """Which mistakes the noisy teacher makes in one episode, drawn once at its start."""
        unknown = set(rates) - set(self.mistakes)
        if unknown:
            raise ValueError(f"unknown mistake(s) {sorted(unknown)} for env {self.name}; valid: {sorted(self.mistakes)}")
        return {m: rng.random() < rates.get(m, 0.0) for m in self.mistakes}

    mistakes: ClassVar[tuple[str, ...]] = ()
    default_noise: ClassVar[dict[str, float]] = {}
    # Noisy-teacher episodes the tiny tokenizer is trained on (slow envs use fewer).
    tokenizer_tasks: ClassVar[int] = 1500
    # `agentic-rl run` settings this env needs by default (a budget that fits), beneath the user's file and options.
    run_defaults: ClassVar[dict[str, Any]] = {}
    # Over PRETRAINED_RUN_DEFAULTS (pipeline.py) when `run` starts from a pretrained model: this env's own budget then.
    pretrained_run_defaults: ClassVar[dict[str, Any]] = {}
    # The most tokens a policy may sample in one assistant turn here, unless a config says otherwise: long enough for
    # every turn the teacher demonstrates.
    max_new_tokens: ClassVar[int] = 96

    # Whether the env takes `fault_rate` and injects transient tool faults (robustness evaluation varies it).
    supports_faults: ClassVar[bool] = False

    # The most tool calls one assistant turn may make (parallel calls); more is a `multiple_calls` parse error.
    max_calls: ClassVar[int] = 1

    # Whether Task.reference is this env's solution in tool calls (tool_use), so evaluation can score tool choice,
    # arguments and restraint against it; codefix has no single reference sequence.
    reference_solutions: ClassVar[bool] = False

    def solved_at(self, task: Task, messages: list[Message]) -> int | None:
        """After how many assistant turns the agent had what it needed to stop (None: never), for the stopping
        metrics. Default: once the reference calls have all run in order without an error observation."""
        if not self.reference_solutions:
            return None
        done = reference_turns(task.reference_calls, messages)
        if len(done) < len(task.reference):
            return None
        return done[-1] if done else 0

    def probe_hacks(self, tasks: list[Task]) -> list[dict[str, Any]] | None:
        """Try this env's known reward hacks on `tasks`: rows of {exploit, naive_reward, guarded_reward,
        noop_reward}. None for an env without exploit probes."""
        return None

    def perturb(self, task: Task, how: str) -> Task | None:
        """`task` asked in another form but with the same content, for robustness evaluation; None where this env
        cannot make that perturbation. `how` is one of PERTURBATIONS."""
        if how not in PERTURBATIONS:
            raise ValueError(f"unknown perturbation {how!r}; valid: {', '.join(PERTURBATIONS)}")
        return self._perturbed(task, how)

    def _perturbed(self, task: Task, how: str) -> Task | None:
        """Envs override this for the perturbations they can make; the base class knows only whitespace."""
        if how == "whitespace":
            return replace(task, prompt="  " + task.prompt.replace(" ", "   ") + "\n\n")
        return None

    def close(self) -> None:  # noqa: B027 (optional hook: most envs hold nothing)
        """Release what the episode holds (temp dirs, processes). Safe to call twice."""


def reference_turns(ref: list[tuple[str, dict[str, Any]]], messages: list[Message]) -> list[int]:
    """The assistant turn (1-based) at which each reference call succeeded, in order: the call matches the next
    reference call and its observation (the tool message answering it) is not an error. Calls are read from
    `tool_calls` or, in raw-text conversations, parsed from the content; a turn of parallel calls can match several."""
    out: list[int] = []
    turn = 0
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        turn += 1
        for j, call in enumerate(message_calls(m)):
            obs = messages[i + 1 + j] if i + 1 + j < len(messages) else None
            if len(out) == len(ref) or obs is None or obs["role"] != "tool":
                break
            if call == ref[len(out)] and not str(obs["content"]).startswith("error"):
                out.append(turn)
    return out


def stable_hash(*parts: Any) -> int:
    """A hash that does not change between processes (Python's `hash` of str is salted per process)."""
    h = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "big")


def split_of(key: str, eval_fraction: float = 0.2) -> Split:
    """Assign a task's content key to a split by hash: disjoint by construction, stable across versions."""
    return "eval" if stable_hash("split", key) % 1000 < eval_fraction * 1000 else "train"


@dataclass(frozen=True)
class Draft:
    """One drawn task before it gets its id: what decides its split (`key`: a template, an entity — content that
    must not cross splits) and what makes two drafts the same task (`identity`)."""

    key: str
    identity: str
    kind: str
    prompt: str
    answer: str
    reference: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    meta: tuple[tuple[str, Any], ...] = ()
    split: Split | None = None  # set: the draft belongs to this split outright (a held-out template)


def draw_tasks(env_name: str, split: Split, n: int, seed: int, draw: Callable[[random.Random], Draft],
               eval_fraction: float = 0.2, tries_per_task: int = 200) -> list[Task]:
    """`n` distinct tasks of `split`: drafts from `draw` whose key hashes into this split, with stable ids
    (`<env>/<split>/<hash of the identity>`). Deterministic for `seed`; ValueError when the generator runs dry."""
    out = list(islice(stream_tasks(env_name, split, seed, draw, eval_fraction, n * tries_per_task), n))
    if len(out) < n:
        raise ValueError(f"could only make {len(out)} distinct {env_name} {split} tasks, asked for {n}")
    return out


def stream_tasks(env_name: str, split: Split, seed: int, draw: Callable[[random.Random], Draft],
                 eval_fraction: float = 0.2, max_draws: int = SEARCH_TASKS * 200) -> Iterator[Task]:
    """The tasks `draw_tasks` makes, one at a time in the same order, until `max_draws` drafts have been drawn:
    `draw_tasks(n)` is the first n of them, and a task can be found by its id without making thousands."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    rng = random.Random(stable_hash(env_name, split, seed))
    seen: set[str] = set()
    for _ in range(max_draws):
        d = draw(rng)
        if (d.split or split_of(d.key, eval_fraction)) != split or d.identity in seen:
            continue
        seen.add(d.identity)
        tid = f"{env_name}/{split}/{stable_hash(d.identity) % 16**10:010x}"
        yield Task(tid, split, d.kind, d.prompt, d.answer, d.reference, d.meta)


def check_env(env_factory: Any, n: int = 50, seed: int = 0) -> list[str]:
    """Exercise the env contract and return the problems found (empty list: the contract holds).

    Checks: tasks are deterministic for a seed and have unique stable ids; train and eval are disjoint; `reset`
    is deterministic; `step` returns the right types; per-turn rewards sum to the final reward; the teacher
    solves every task.
    """
    problems: list[str] = []
    env: Env = env_factory()
    for split in ("train", "eval"):
        a, b = env.tasks(split, n, seed), env.tasks(split, n, seed)  # type: ignore[arg-type]
        if a != b:
            problems.append(f"tasks({split!r}, seed={seed}) differ between two calls")
        if len({t.id for t in a}) != len(a):
            problems.append(f"task ids in {split!r} are not unique")
        if any(t.split != split for t in a):
            problems.append(f"tasks({split!r}) returned tasks of another split")
    train, evals = env.tasks("train", n * 4, seed), env.tasks("eval", n * 4, seed + 1)
    overlap = {(t.prompt, t.answer) for t in train} & {(t.prompt, t.answer) for t in evals}
    if overlap or {t.id for t in train} & {t.id for t in evals}:
        problems.append(f"train and eval overlap: {sorted(overlap)[:3]}")
    for task in env.tasks("eval", n, seed):
        e1, e2 = env_factory(), env_factory()
        m1, m2 = e1.reset(task), e2.reset(task)
        if m1 != m2:
            problems.append(f"reset({task.id}) is not deterministic")
        messages, total, result = list(m1), 0.0, None
        for _ in range(env.max_turns):
            action = env.teacher_turn(task, messages)
            result = e1.step(action)
            if not isinstance(result, StepResult) or not isinstance(result.reward, float):
                problems.append(f"step() must return StepResult with a float reward, got {result!r}")
                break
            total += result.reward
            messages += [{"role": "assistant", "content": action}, *result.observation]
            if result.terminated or result.truncated:
                break
        if result is None or not result.terminated:
            problems.append(f"teacher did not finish task {task.id} within {env.max_turns} turns")
        elif result.episode is None:
            problems.append(f"the last step of {task.id} reports no EpisodeRecord")
        elif not result.episode.success:
            problems.append(f"teacher failed task {task.id}: {task.prompt!r}")
        elif abs(total - result.episode.episode_reward) > 1e-9:
            problems.append(f"per-turn rewards of {task.id} do not sum to the episode reward")
        e1.close(), e2.close()
    return problems
