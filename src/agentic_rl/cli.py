"""The `agentic-rl` command line: run (the whole ladder), sft, grpo, rollout, probe-hacks."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape

from .config import ConfigError, load_config
from .ui import console

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train LLM agents to use tools well: SFT, then agentic GRPO with verifiable rewards.")


def _fail(msg: str, code: int = 2) -> None:
    console.print(f"[red]error:[/] {escape(msg)}")
    raise typer.Exit(code)


def _training_errors() -> tuple[type[Exception], ...]:
    """Errors a training run stops with on purpose: reported as a message, not a traceback (exit code 1)."""
    from .grpo import LogprobMismatchError
    from .policies import TokenContinuityError

    return (LogprobMismatchError, TokenContinuityError)


def _train(train: Any, cls: Any, ctx: typer.Context, config: Optional[Path], out: Path, resume: bool,
           **explicit: Any) -> None:
    """Resolve the config (file ← options ← key=value) and run a training entry point; errors become messages."""
    try:
        train(load_config(cls, config, ctx.args, **explicit), out, resume=resume)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    except _training_errors() as e:
        _fail(f"{type(e).__name__}: {e}", code=1)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def run(ctx: typer.Context,
        env: Optional[str] = typer.Option(None, help="Environment name (default: tool_use)."),
        out: Path = typer.Option(Path("runs/run"), help="Run directory."),
        config: Optional[Path] = typer.Option(None, help="YAML config file; key=value arguments override it "
                                                         "(sft.lr=1e-3, grpo.steps=20)."),
        resume: bool = typer.Option(False, help="Continue the run in --out: finished stages are kept.")) -> None:
    """The whole ladder on the built-in tiny policy: demonstrations → SFT → GRPO → held-out comparison."""
    from .pipeline import RunConfig, env_run_defaults, run_pipeline

    try:
        base = env_run_defaults(config, ctx.args, env)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    _train(run_pipeline, RunConfig, ctx, config, out, resume, base=base, env=env)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def sft(ctx: typer.Context,
        env: Optional[str] = typer.Option(None, help="Environment name (default: tool_use)."),
        out: Path = typer.Option(Path("runs/sft"), help="Run directory."),
        config: Optional[Path] = typer.Option(None, help="YAML config file; key=value arguments override it."),
        resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint.")) -> None:
    """Supervised fine-tuning on noisy-teacher demonstrations. Extra arguments: key=value config overrides."""
    from .sft import SFTConfig, train_sft

    _train(train_sft, SFTConfig, ctx, config, out, resume, env=env)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def grpo(ctx: typer.Context,
         env: Optional[str] = typer.Option(None, help="Environment name (default: tool_use)."),
         policy: Optional[str] = typer.Option(None, help="Starting policy directory (default: runs/sft/model)."),
         out: Path = typer.Option(Path("runs/grpo"), help="Run directory."),
         config: Optional[Path] = typer.Option(None, help="YAML config file; key=value arguments override it."),
         resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint.")) -> None:
    """Agentic GRPO from a starting policy. Extra arguments: key=value config overrides."""
    from .grpo import GRPOConfig, train_grpo

    _train(train_grpo, GRPOConfig, ctx, config, out, resume, env=env, policy=policy)


@app.command()
def rollout(env: str = typer.Option("tool_use", help="Environment name."),
            policy: str = typer.Option(..., help="Model directory, tiny, teacher, noisy-teacher, random or "
                                                 "script:FILE."),
            n: int = typer.Option(3, help="Number of tasks."),
            group: int = typer.Option(1, help="Samples per task."),
            split: str = typer.Option("eval", help="Task split: train or eval."),
            task_id: Optional[str] = typer.Option(None, help="Run only this task (by its stable id)."),
            seed: int = typer.Option(0, help="Seed for tasks and sampling."),
            temperature: float = typer.Option(1.0, help="Sampling temperature for model policies (0: greedy)."),
            json_out: Optional[Path] = typer.Option(None, "--json", help="Write the trajectories here (JSON list)."),
            quiet: bool = typer.Option(False, help="Print only the summary.")) -> None:
    """Run a policy in an environment and print its trajectories: turns, tool calls, observations, rewards."""
    from .envs import make_env
    from .metrics import summarize
    from .policies import SamplingConfig, load_policy
    from .rollout import run_episodes

    try:
        e = make_env(env)
        if split not in ("train", "eval"):
            raise ValueError(f"split must be train or eval, got {split!r}")
        if task_id is not None:
            tasks = [t for sp in ("eval", "train") for t in e.tasks(sp, 2000, seed) if t.id == task_id][:1]  # type: ignore[arg-type]
            if not tasks:
                raise ValueError(f"no task with id {task_id!r} among the first 2000 of each split for seed {seed}")
        else:
            tasks = e.tasks(split, n, seed)  # type: ignore[arg-type]
        pol = load_policy(policy, e, SamplingConfig(temperature=temperature))
        trajs = run_episodes(lambda: make_env(env), tasks, pol, group_size=group, seed=seed)
    except ValueError as err:
        _fail(str(err))
        return
    if not quiet:
        for t in trajs:
            print_trajectory(t)
    console.print_json(json.dumps({k: v for k, v in summarize(trajs).items()}))
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps([t.to_dict() for t in trajs], ensure_ascii=False, indent=1))


@app.command()
def doctor(env: str = typer.Option("tool_use", help="Environment name."),
           policy: Optional[str] = typer.Option(None, help="Also check this policy (model dir, tiny, noisy-teacher, "
                                                           "random, script:FILE): parse rate and GRPO signal."),
           n: int = typer.Option(20, help="Held-out tasks per check."),
           group: int = typer.Option(4, help="G for the GRPO-signal check."),
           temperature: float = typer.Option(1.0, help="Sampling temperature for the policy checks."),
           json_out: Optional[Path] = typer.Option(None, "--json", help="Write the checks here (JSON list).")) -> None:
    """Is this env (and policy) ready for agentic RL? The seed's checklist, each check PASS / WARN / FAIL."""
    from rich.table import Table

    from .doctor import as_json, run_doctor
    from .envs import make_env
    from .policies import SamplingConfig, load_policy

    try:
        e = make_env(env)
        pol = load_policy(policy, e, SamplingConfig(temperature=temperature)) if policy else None
    except ValueError as err:
        _fail(str(err))
        return
    checks = run_doctor(lambda: make_env(env), pol, n=n, group=group, temperature=temperature)
    table = Table(title=f"doctor: {env}" + (f" with {policy}" if policy else ""))
    for col in ("check", "verdict", "measured", "next step"):
        table.add_column(col)
    colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.verdict]}]{c.verdict}[/]", escape(c.measured), escape(c.next_step))
    console.print(table)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(as_json(checks), indent=2))
    if any(c.verdict == "FAIL" for c in checks):
        raise typer.Exit(1)


@app.command("probe-hacks")
def probe_hacks(env: str = typer.Option("codefix", help="Environment with exploit probes (codefix)."),
                n: int = typer.Option(3, help="Held-out tasks to try every exploit on."),
                seed: int = typer.Option(0, help="Seed for the tasks."),
                json_out: Optional[Path] = typer.Option(None, "--json", help="Write the rows here (JSON list).")
                ) -> None:
    """Try every known reward hack with a scripted agent: naive reward (the agent's own test run) vs guarded reward."""
    from rich.table import Table

    from .envs import make_env

    if env != "codefix":
        _fail(f"no exploit probes for env {env!r}; envs with probes: codefix")
    from .envs.codefix.exploits import probe_hacks as run_probes

    e = make_env(env)
    rows = run_probes(e, e.tasks("eval", n, seed))
    table = Table(title=f"reward hacks on {n} held-out {env} tasks")
    for col in ("exploit", "naive reward", "guarded reward", "no-op reward", "guard holds"):
        table.add_column(col)
    for r in rows:
        holds = r["guarded_reward"] <= r["noop_reward"] + 1e-9
        table.add_row(str(r["exploit"]), f"{r['naive_reward']:.2f}", f"{r['guarded_reward']:.2f}",
                      f"{r['noop_reward']:.2f}", "[green]yes[/]" if holds else "[red]NO[/]")
    console.print(table)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(rows, indent=2))


def print_trajectory(t: Any) -> None:
    """A readable view of one episode."""
    mark = "[green]✓[/]" if t.success else "[red]✗[/]"
    console.rule(f"{mark} {t.task_id} #{t.sample} · {t.task_kind} · reward {t.reward:+.2f} · {t.outcome}")
    turn = 0
    for m in t.messages:
        role = m["role"]
        if role == "system":
            continue
        if role == "user":
            console.print(f"[bold]user[/]      {escape(m['content'])}")
        elif role == "assistant":
            r = t.turn_rewards[turn] if turn < len(t.turn_rewards) else 0.0
            turn += 1
            calls = m.get("tool_calls") or []
            body = ("call " + ", ".join(f"{c['function']['name']}({json.dumps(c['function']['arguments'], ensure_ascii=False)})"
                                        for c in calls)) if calls else repr(m.get("content", ""))
            console.print(f"[cyan]assistant[/] {escape(body)}   [dim]r={r:+.2f}[/]")
        else:
            console.print(f"[yellow]{role:<9}[/] {escape(m['content'])}")


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.WARNING)
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
