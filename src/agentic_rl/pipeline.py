"""`agentic-rl run`: the seed's whole ladder in one command — tiny model → demonstrations → SFT → GRPO → evaluation.

Each stage writes its own run directory under DIR (sft/, grpo/) and is resumable; the comparison of the noisy
teacher, the SFT policy and the GRPO policy on the same held-out tasks goes to the terminal and DIR/summary.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from .atomic import atomic_write_json, atomic_write_text, check_output_dir
from .config import ConfigError, EnvConfig, diff_configs, overlay, read_saved_config, same_paths
from .device import Device
from .evaluation.families import evaluate
from .evaluation.report import write_report
from .evaluation.summary import summarize
from .policies import HFPolicy, SamplingConfig, TeacherPolicy
from .runtime.rollout import run_episodes
from .runtime.trajectory import save_jsonl
from .train.checkpoint import latest_checkpoint
from .train.distributed import launched_by_torchrun
from .train.grpo import GRPOConfig, train_grpo
from .train.sft import SFTConfig, train_sft
from .ui import console, eval_table, status


class RunConfig(EnvConfig):
    """`agentic-rl run`: the whole ladder, one env, model, seed and device for every stage."""

    policy: str = "tiny"
    """The model the ladder starts from: tiny (built here), a preset such as smollm2-135m, a model directory, a
    .gguf file or a Hub id."""
    device: Device = "auto"
    """Where every stage trains and evaluates: `auto` (the CUDA GPU when torch sees one, else the CPU), cpu, cuda."""
    eval_tasks: int = Field(200, ge=1)
    """Held-out tasks for the final comparison of the prompted model, the noisy teacher, SFT and GRPO."""
    eval_temperature: float = Field(1.0, ge=0)
    """Sampling temperature of the final comparison."""
    greedy_eval: bool = True
    """Also run the SFT and GRPO policies greedily (temperature 0) on the same tasks: `stages.<s>.greedy`. Sampled,
    a small policy fails on the tail of its distribution; greedy shows whether its most likely action is right (verl
    validates greedily by default)."""
    robustness_tasks: int = Field(50, ge=1)
    """Held-out tasks for each robustness condition (3 fault rates, 4 prompt perturbations) of the comparison."""
    bfcl_questions: int = Field(0, ge=0)
    """BFCL questions per category (evaluation/bfcl.py's eight default categories) to score the prompted, SFT and
    GRPO models on, greedily: the transfer check, on tools never trained on (0: skip; needs the bfcl extra)."""
    probe_tasks: int = Field(3, ge=0)
    """Held-out tasks to try every exploit probe on, where the env has probes (0: skip)."""
    sft: SFTConfig = Field(default_factory=SFTConfig)
    """The SFT stage (its env, env_args, seed, device and starting policy are the run's)."""
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    """The GRPO stage (its env, env_args, seed and device are the run's; it starts from the SFT stage's model)."""

    def stages(self, out: Path) -> tuple[SFTConfig, GRPOConfig]:
        """The SFT and GRPO stages' configs as the run gives them: its env, env_args, seed and device for both,
        its policy for SFT, the SFT stage's model for GRPO. What the user set in each stays marked as set."""
        shared = {"env": self.env, "env_args": self.env_args, "seed": self.seed, "device": self.device}
        return (overlay(self.sft, **shared, policy=self.policy),
                overlay(self.grpo, **shared, policy=str(out / "sft" / "model")))

    def stages_as_run(self, out: Path) -> tuple[SFTConfig, GRPOConfig]:
        """The stages' configs as they run (`stages`, with the env's turn budget filled in): what each stage saves."""
        env = self.env_factory()()
        try:
            sft, grpo = self.stages(out)
            return sft.as_run(env), grpo.as_run(env)
        finally:
            env.close()

    def record(self, out: Path) -> dict[str, Any]:
        """What DIR/config.yaml holds: the run's own keys, and each stage's config as that stage runs it, so the
        file says which policy, seed and turn budget each stage used; passed back with --config it gives the same
        run."""
        sft, grpo = self.stages_as_run(out)
        return {**self.model_dump(mode="json", exclude={"sft", "grpo"}), "sft": sft.saved(), "grpo": grpo.saved()}

    def inapplicable(self) -> dict[str, str]:
        return {}  # the stages' keys are checked as the run gives them to the stages: `unused_keys`

    def unused_keys(self) -> list[str]:
        out = []
        for name, stage in zip(("sft", "grpo"), self.stages(Path("."))):
            out += [f"{name}.{line}" for line in stage.unused_keys()]
            mine = getattr(self, name)
            for key in mine.given(*SHARED):
                if _same_as_the_runs(name, key, getattr(mine, key), getattr(stage, key)):
                    continue  # a saved run's config.yaml names what the run gave the stage: fine to pass back
                out.append(f"{name}.policy: GRPO starts from the SFT stage's model (DIR/sft/model), so grpo.policy= "
                           "would be overwritten" if (name, key) == ("grpo", "policy") else
                           f"{name}.{key}: the run sets every stage's {key} (here {getattr(stage, key)!r}), so "
                           f"{name}.{key}={getattr(mine, key)!r} would be overwritten; give {key}= alone (a saved "
                           f"config.yaml holds each stage's {key} as it ran: remove it there)")
        return out


def _same_as_the_runs(stage: str, key: str, given: Any, runs: Any) -> bool:
    """Whether a stage key the user gave is what the run sets it to anyway (GRPO's policy: a run's own
    DIR/sft/model, whatever DIR is)."""
    if (stage, key) == ("grpo", "policy"):
        return Path(str(given)).parts[-2:] == ("sft", "model")
    return given == runs


# The keys every stage takes from the run.
SHARED = ("env", "env_args", "seed", "device", "policy")


# The budget of a ladder that starts from a pretrained model instead of the tiny one (which the field defaults are
# for: Muon at 2e-3 over 3,000 demonstrations × 5 epochs would wreck a pretrained model and take hours on a CPU).
# The SmolLM2 ladder in README's results ran with these; their timings are there.
# A turn of the teacher's is at most 32 SmolLM2 tokens on tool_use, so 48 new tokens cut no demonstrated turn, and
# halve the time a rambling sample holds up its batch.
PRETRAINED_RUN_DEFAULTS: dict[str, Any] = {
    "greedy_eval": False, "robustness_tasks": 10,
    "sft": {"demos": 512, "max_steps": 32, "batch_size": 16, "micro_batch_size": 16, "optimizer": "adamw",
            "lr": 2e-4, "eval_every": 0, "eval_tasks": 20, "final_eval_samples": 1, "teacher_samples": 1,
            "max_new_tokens": 48},
    "grpo": {"steps": 8, "tasks_per_step": 8, "group_size": 4, "lr": 2e-5, "eval_every": 0, "eval_tasks": 20,
             "max_new_tokens": 48},
}


def env_run_defaults(path: str | Path | None, overrides: list[str], env: str | None,
                     policy: str | None = None) -> dict[str, Any]:
    """The defaults that go beneath the user's file, options and overrides: the chosen env's own `run_defaults` (its
    budget) and, when the ladder starts from a pretrained model, PRETRAINED_RUN_DEFAULTS and the env's
    `pretrained_run_defaults` over them."""
    from .config import deep_merge, load_config
    from .envs import env_class

    cfg = load_config(RunConfig, path, overrides, env=env, policy=policy)
    cls = env_class(cfg.env)
    base = dict(cls.run_defaults)
    if cfg.policy == "tiny":
        return base
    return deep_merge(deep_merge(base, PRETRAINED_RUN_DEFAULTS), cls.pretrained_run_defaults)


def run_pipeline(cfg: RunConfig, out: str | Path, resume: bool = False) -> dict[str, Any]:
    t0 = time.time()
    out = Path(out)
    if launched_by_torchrun():
        raise ConfigError("agentic-rl run is one process; to train with several, run its stages under the launcher: "
                          "torchrun --nproc_per_node N -m agentic_rl.cli sft …, then the same with grpo "
                          "(docs/scaling.md)")
    check_run_dir(cfg, out, resume)  # every refusal comes before the first write
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.record(out), sort_keys=False, allow_unicode=True))
    sft_cfg, grpo_cfg = cfg.stages(out)

    sft_summary = _stage(out / "sft", lambda r: train_sft(sft_cfg, out / "sft", resume=r), resume)
    grpo_summary = _stage(out / "grpo", lambda r: train_grpo(grpo_cfg, out / "grpo", resume=r), resume)

    stages = evaluate_stages(cfg, out, sft_cfg.noise)
    summary = {"env": cfg.env, "wall_seconds": round(time.time() - t0, 1), "eval_tasks": cfg.eval_tasks,
               "stages": stages, "sft_wall_seconds": sft_summary.get("wall_seconds"),
               "grpo_wall_seconds": grpo_summary.get("wall_seconds"),
               "grpo_stopped_early": grpo_summary.get("stopped_early"), "report": str(out / "report.html")}
    atomic_write_json(out / "summary.json", summary)
    console.print(eval_table({n: st["eval"] for n, st in stages.items()},
                             {n: st["greedy"] for n, st in stages.items() if "greedy" in st}))
    write_report(out)
    console.print(f"done in {summary['wall_seconds']} s → {out / 'summary.json'}, {out / 'report.html'}")
    return summary


def check_run_dir(cfg: RunConfig, out: Path, resume: bool) -> None:
    """Refuse, before anything is written, what would falsify or lose the run in `out`: a path that is not a
    writable directory; a run there without --resume; --resume with no run there; a resumed config that differs
    from the saved one, or from the config of a stage already started (its differing keys named)."""
    check_output_dir(out, "--out")
    stage_dirs = {"sft": out / "sft", "grpo": out / "grpo"}
    if not resume:
        held = [d.name for d in stage_dirs.values() if (d / "summary.json").exists() or latest_checkpoint(d)]
        if held:
            raise ConfigError(f"{out} already holds a run ({', '.join(held)} started); pass --resume to continue it "
                              "or choose a new --out")
        return
    saved = out / "config.yaml"
    if not saved.exists():
        raise ConfigError(f"nothing to resume: {out} holds no run (no config.yaml); drop --resume to start one")
    diffs = diff_configs(read_saved_config(RunConfig, saved).record(out), cfg.record(out))
    for (name, stage_dir), stage in zip(stage_dirs.items(), cfg.stages_as_run(out)):
        if (stage_dir / "config.yaml").exists():
            before = read_saved_config(type(stage), stage_dir / "config.yaml")
            diffs += [f"{name}.{d}" for d in diff_configs(same_paths(before.saved()), same_paths(stage.saved()))]
    if diffs:
        raise ConfigError("cannot resume under a different config; differing keys (saved → now):\n  "
                          + "\n  ".join(dict.fromkeys(diffs)))


def evaluate_stages(cfg: RunConfig, out: Path, noise: dict[str, float] | None) -> dict[str, Any]:
    """The starting model as it is (prompted: the same system prompt, zero-shot), the noisy teacher, the SFT policy
    and the GRPO policy on the same held-out tasks, in the six families.

    Writes DIR/eval/<stage>.json (the `agentic-rl eval` schema) and DIR/eval/<stage>.jsonl (the main run's
    trajectories, for the report's viewer), and DIR/eval/probes.json where the env has exploit probes.
    """
    env_factory = cfg.env_factory()
    env = env_factory()
    tasks = env.tasks("eval", cfg.eval_tasks, cfg.seed)
    turn_tokens = cfg.grpo.max_new_tokens or env.max_new_tokens
    sampling = SamplingConfig(cfg.eval_temperature, turn_tokens)
    start = out / "sft" / "init" if cfg.policy == "tiny" else cfg.policy  # the model SFT started from
    dev = cfg.device
    policies = {"prompted": HFPolicy(start, sampling, device=dev),
                "teacher": TeacherPolicy(noise if noise is not None else dict(env.default_noise)),
                "sft": HFPolicy(out / "sft" / "model", sampling, device=dev),
                "grpo": HFPolicy(out / "grpo" / "model", sampling, device=dev)}
    renderer = policies["sft"].renderer  # the tiny tokenizer counts the teacher's tokens too
    (out / "eval").mkdir(exist_ok=True)
    stages = {}
    for name, policy in policies.items():
        with status(f"evaluating {name}") as spinner:
            result, trajs = evaluate(env_factory, policy, tasks, k=1, seed=cfg.seed, renderer=renderer,
                                     robustness_tasks=cfg.robustness_tasks,
                                     progress=lambda msg, name=name: spinner.update(f"evaluating {name}: {msg}"))
        result["policy"] = name
        atomic_write_json(out / "eval" / f"{name}.json", result)
        save_jsonl(trajs, out / "eval" / f"{name}.jsonl")
        stages[name] = {"eval": summarize(trajs)}
        if cfg.greedy_eval and isinstance(policy, HFPolicy) and name != "prompted":
            greedy = HFPolicy(policy.path, SamplingConfig(0.0, turn_tokens), model=policy.model,
                              tokenizer=policy.tokenizer)
            with status(f"evaluating {name} greedily"):
                stages[name]["greedy"] = summarize(run_episodes(env_factory, tasks, greedy, seed=cfg.seed))
    if cfg.bfcl_questions:
        for name in ("prompted", "sft", "grpo"):
            stages[name]["bfcl"] = _bfcl(policies[name], cfg.bfcl_questions, cfg.seed, out / "eval" / f"bfcl_{name}")
    if cfg.probe_tasks:
        with status("probing reward hacks"):
            rows = env.probe_hacks(tasks[: cfg.probe_tasks])
        if rows is not None:
            atomic_write_json(out / "eval" / "probes.json", rows)
    return stages


def _bfcl(policy: HFPolicy, n: int, seed: int, path: Path) -> dict[str, float]:
    """A model's BFCL accuracy per category (greedy); writes PATH.json (the eval schema), PATH.jsonl (the
    trajectories) and PATH.questions.jsonl (each reply and its verdicts)."""
    from .evaluation.bfcl import MAX_NEW_TOKENS, evaluate_bfcl

    greedy = HFPolicy(policy.path, SamplingConfig(0.0, MAX_NEW_TOKENS), model=policy.model, tokenizer=policy.tokenizer)
    with status(f"BFCL: {path.name}") as spinner:
        result, trajs = evaluate_bfcl(greedy, n=n, seed=seed, progress=lambda msg: spinner.update(f"{path.name}: {msg}"))
    result["policy"] = path.name.removeprefix("bfcl_")
    questions = result.pop("questions")
    atomic_write_json(path.with_suffix(".json"), result)
    save_jsonl(trajs, path.with_suffix(".jsonl"))
    atomic_write_text(path.with_suffix(".questions.jsonl"), "".join(json.dumps(q, ensure_ascii=False) + "\n"
                                                                    for q in questions))
    return {name.removeprefix("bfcl."): m["value"] for name, m in result["overall"]["regression"].items()
            if name.startswith("bfcl.")}


def _stage(stage_dir: Path, train: Any, resume: bool) -> dict[str, Any]:
    """Run a stage, or skip it when its summary says it finished; a stage with a checkpoint is resumed."""
    done = stage_dir / "summary.json"
    if done.exists() and resume:
        return json.loads(done.read_text())
    return train(resume and (stage_dir / "checkpoints").exists())

