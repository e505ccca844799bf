"""The commands that run a policy without training it — rollout, eval, doctor, probe-hacks: their configs and what
each does with one. `cli.py` parses and prints; the trainers' configs live with them (train/sft.py, train/grpo.py,
pipeline.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from .config import ConfigError, EnvConfig, used_only_with
from .device import Device
from .envs import Env
from .envs.base import Task
from .policies import Policy, SamplingConfig, load_policy

SCRIPTED = ("teacher", "noisy-teacher", "random")


def is_model(spec: str) -> bool:
    """Whether a policy spec names a model (which samples tokens) rather than a scripted policy."""
    return spec not in SCRIPTED and not spec.startswith("script:")


class PolicyConfig(EnvConfig):
    """A policy run in an environment, and how a model policy samples."""

    policy: str | None = None
    """The policy: a model (a preset such as smollm2-135m, a model directory, a .gguf file or a Hub id), tiny,
    teacher, noisy-teacher, random or script:FILE."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature of a model policy (0: greedy)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Most tokens in one assistant turn of a model policy; None: the env's own (`Env.max_new_tokens`)."""
    device: Device = "auto"
    """Where a model policy runs: `auto` (the CUDA GPU when torch sees one, else the CPU), `cpu` or `cuda`."""

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.policy is not None and not is_model(self.policy):
            out |= {k: f"policy={self.policy} samples no tokens, so {{key}}= would be ignored"
                    for k in ("temperature", "max_new_tokens", "device")}
        return out

    def load(self, env: Env) -> Policy:
        """The policy, sampling with this config's settings and the env's turn budget."""
        return load_policy(self.policy_spec(), env, self.sampling(env), device=self.device)

    def policy_spec(self) -> str:
        """The policy spec; ConfigError when none is given."""
        if self.policy is None:
            raise ConfigError("give a policy: policy=SPEC or --policy SPEC (a model, tiny, teacher, noisy-teacher, "
                              "random or script:FILE)")
        return self.policy

    def sampling(self, env: Env) -> SamplingConfig:
        return SamplingConfig(self.temperature, self.max_new_tokens or env.max_new_tokens)


class RolloutConfig(PolicyConfig):
    """`agentic-rl rollout`: run a policy on a few tasks and show its trajectories."""

    n: int = Field(3, ge=1)
    """Number of tasks."""
    group: int = Field(1, ge=1)
    """Episodes per task."""
    split: Literal["train", "eval"] = "eval"
    """Which split the tasks come from."""
    task_id: str | None = None
    """Run only this task (by its stable id); n and split are then not used."""

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.task_id is not None:
            out |= {k: f"task_id={self.task_id} names the task, so {{key}}= would be ignored" for k in ("n", "split")}
        return out

    def tasks(self, env: Env) -> list[Task]:
        return [env.task_by_id(self.task_id, self.seed)] if self.task_id else env.tasks(self.split, self.n,
                                                                                          self.seed)


class EvalConfig(PolicyConfig):
    """`agentic-rl eval`: the six-family evaluation of a policy on held-out tasks."""

    n: int = Field(100, ge=1)
    """Held-out tasks."""
    k: int = Field(3, ge=1)
    """Attempts per task (pass@k, pass^k)."""
    robustness: bool = True
    """Also run the fault and prompt-perturbation conditions."""
    robustness_tasks: int | None = Field(None, ge=1)
    """Held-out tasks for each robustness condition (None: all n)."""
    tokenizer: str | None = None
    """Count a scripted policy's tokens with this model directory's tokenizer and chat template."""
    bench: Literal["bfcl"] | None = None
    """A public benchmark instead of the env's held-out tasks: `bfcl`, the Berkeley Function Calling Leaderboard
    (its data and AST checker; extra `bfcl`). Then n is the questions per category (a seeded sample), sampling is
    greedy unless temperature= is given, and max_new_tokens defaults to 256."""
    categories: list[str] | None = None
    """BFCL categories (with bench=bfcl; None: the eight of evaluation/bfcl.py's DEFAULT_CATEGORIES): simple_python,
    multiple, parallel, parallel_multiple, irrelevance, live_simple, live_multiple, live_parallel,
    live_parallel_multiple, live_irrelevance, live_relevance."""

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.bench is not None:
            return out | {k: f"--bench {self.bench} brings its own questions and tools, so {{key}}= would be ignored"
                          for k in ("env", "env_args", "k", "robustness", "robustness_tasks", "tokenizer")}
        out["categories"] = "it is used only with bench=bfcl, so {key}= would be ignored"
        if self.policy is not None and is_model(self.policy):
            out["tokenizer"] = f"policy={self.policy} is a model and counts its own tokens, so {{key}}= would be ignored"
        if not self.robustness:
            out["robustness_tasks"] = "robustness is off, so {key}= would be ignored"
        return out


class DoctorConfig(PolicyConfig):
    """`agentic-rl doctor`: the seed's "when not to do RL" checklist, for an env and optionally a policy."""

    n: int = Field(20, ge=1)
    """Held-out tasks per check."""
    group: int = Field(4, ge=2)
    """G for the GRPO-signal check (at least 2: the check looks for reward differences within a group)."""

    def inapplicable(self) -> dict[str, str]:
        return super().inapplicable() | used_only_with(
            *((key, "a policy (policy=SPEC)", self.policy is not None)
              for key in ("group", "temperature", "max_new_tokens", "device")))


class ProbeConfig(EnvConfig):
    """`agentic-rl probe-hacks`: every known reward hack of an env, attempted by a scripted agent."""

    env: str = "codefix"
    """Environment with exploit probes (codefix)."""
    n: int = Field(3, ge=1)
    """Held-out tasks to try every exploit on."""


def run_eval(cfg: EvalConfig, progress: Any = None) -> dict[str, Any]:
    """The six-family evaluation result (evaluation/families.py's schema) of `cfg.policy`; with bench=bfcl, its
    BFCL accuracy per category in the regression family (evaluation/bfcl.py)."""
    if cfg.bench == "bfcl":
        return run_bfcl(cfg, progress)
    from .evaluation.families import evaluate
    from .policies import HFPolicy
    from .runtime.render import Renderer

    factory = cfg.env_factory()
    env = factory()
    policy = cfg.load(env)
    renderer = policy.renderer if isinstance(policy, HFPolicy) else None
    if cfg.tokenizer is not None:
        from transformers import AutoTokenizer

        if not Path(cfg.tokenizer).is_dir():
            raise ConfigError(f"tokenizer must be a model directory with a tokenizer, got {cfg.tokenizer}")
        renderer = Renderer(AutoTokenizer.from_pretrained(cfg.tokenizer))
    result, _ = evaluate(factory, policy, env.tasks("eval", cfg.n, cfg.seed), k=cfg.k, seed=cfg.seed,
                         renderer=renderer, robustness=cfg.robustness, robustness_tasks=cfg.robustness_tasks,
                         progress=progress)
    result["policy"] = cfg.policy
    return result


def run_bfcl(cfg: EvalConfig, progress: Any = None) -> dict[str, Any]:
    """`eval --bench bfcl`: the policy on BFCL's questions, greedy by default; a model policy meets BFCL's tools
    through toolcall's prompt (the env it would be trained on)."""
    from .envs import make_env
    from .evaluation.bfcl import DEFAULT_CATEGORIES, MAX_NEW_TOKENS, check_categories, evaluate_bfcl

    categories = check_categories(cfg.categories or DEFAULT_CATEGORIES)
    env = make_env("toolcall")
    spec = cfg.policy_spec()
    sampling = SamplingConfig(cfg.temperature if cfg.given("temperature") else 0.0,
                              cfg.max_new_tokens or MAX_NEW_TOKENS)
    policy = load_policy(spec, env, sampling, device=cfg.device)
    result, _ = evaluate_bfcl(policy, categories, cfg.n, cfg.seed, progress=progress)
    result["policy"] = cfg.policy
    return result
