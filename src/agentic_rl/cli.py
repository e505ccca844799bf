"""The `agentic-rl` command line: run (the whole ladder), sft, grpo, rollout, eval, doctor, probe-hacks, models,
report."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

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
    from .policies import TokenContinuityError
    from .train.grpo import LogprobMismatchError

    return (LogprobMismatchError, TokenContinuityError)


def _train(train: Any, cls: Any, ctx: typer.Context, config: Path | None, out: Path, resume: bool,
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
        env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
        out: Path = typer.Option(Path("runs/run"), help="Run directory."),
        config: Path | None = typer.Option(None, help="YAML config file; key=value arguments override it "
                                                         "(sft.lr=1e-3, grpo.steps=20)."),
        resume: bool = typer.Option(False, help="Continue the run in --out: finished stages are kept.")) -> None:
    """The whole ladder: demonstrations → SFT → GRPO → held-out comparison of the starting model (prompted), the
    noisy teacher, SFT and GRPO. The tiny policy by default; policy=smollm2-135m (or any model) for a real one."""
    from .pipeline import RunConfig, env_run_defaults, run_pipeline

    try:
        base = env_run_defaults(config, ctx.args, env)
    except (ConfigError, ValueError) as e:
        _fail(str(e))
    _train(run_pipeline, RunConfig, ctx, config, out, resume, base=base, env=env)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def sft(ctx: typer.Context,
        env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
        out: Path = typer.Option(Path("runs/sft"), help="Run directory."),
        config: Path | None = typer.Option(None, help="YAML config file; key=value arguments override it."),
        resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint.")) -> None:
    """Supervised fine-tuning on noisy-teacher demonstrations. Extra arguments: key=value config overrides."""
    from .train.sft import SFTConfig, train_sft

    _train(train_sft, SFTConfig, ctx, config, out, resume, env=env)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": False})
def grpo(ctx: typer.Context,
         env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
         policy: str | None = typer.Option(None, help="Starting policy directory (default: runs/sft/model)."),
         out: Path = typer.Option(Path("runs/grpo"), help="Run directory."),
         config: Path | None = typer.Option(None, help="YAML config file; key=value arguments override it."),
         resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint.")) -> None:
    """Agentic GRPO from a starting policy. Extra arguments: key=value config overrides."""
    from .train.grpo import GRPOConfig, train_grpo

    _train(train_grpo, GRPOConfig, ctx, config, out, resume, env=env, policy=policy)


@app.command()
def rollout(env: str = typer.Option("tool_use", help="Environment name."),
            policy: str = typer.Option(..., help="Model directory, tiny, teacher, noisy-teacher, random or "
                                                 "script:FILE."),
            n: int = typer.Option(3, help="Number of tasks."),
            group: int = typer.Option(1, help="Samples per task."),
            split: str = typer.Option("eval", help="Task split: train or eval."),
            task_id: str | None = typer.Option(None, help="Run only this task (by its stable id)."),
            seed: int = typer.Option(0, help="Seed for tasks and sampling."),
            temperature: float = typer.Option(1.0, help="Sampling temperature for model policies (0: greedy)."),
            device: str = typer.Option("auto", help="Where a model policy runs: auto (a CUDA GPU if torch sees one), "
                                                     "cpu or cuda."),
            json_out: Path | None = typer.Option(None, "--json", help="Write the trajectories here (JSON list)."),
            quiet: bool = typer.Option(False, help="Print only the summary.")) -> None:
    """Run a policy in an environment and print its trajectories: turns, tool calls, observations, rewards."""
    from .envs import make_env
    from .evaluation.summary import summarize
    from .policies import SamplingConfig, load_policy
    from .runtime.rollout import run_episodes

    try:
        e = make_env(env)
        if split not in ("train", "eval"):
            raise ValueError(f"split must be train or eval, got {split!r}")
        if task_id is not None:
            tasks = [e.task_by_id(task_id, seed)]
        else:
            tasks = e.tasks(split, n, seed)  # type: ignore[arg-type]
        pol = load_policy(policy, e, SamplingConfig(temperature=temperature), device=device)
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


@app.command("eval")
def eval_(env: str = typer.Option("tool_use", help="Environment name."),
          policy: str | None = typer.Option(None, help="Model directory, teacher, noisy-teacher, random or "
                                                          "script:FILE."),
          n: int = typer.Option(100, help="Held-out tasks."),
          k: int = typer.Option(3, help="Attempts per task (pass@k, pass^k)."),
          seed: int = typer.Option(0, help="Seed for tasks and sampling."),
          temperature: float = typer.Option(1.0, help="Sampling temperature for model policies (0: greedy)."),
          tokenizer: Path | None = typer.Option(None, help="Count tokens of a non-model policy with this "
                                                              "model directory's tokenizer and chat template."),
          robustness: bool = typer.Option(True, help="Also run the fault and prompt-perturbation conditions."),
          device: str = typer.Option("auto", help="Where a model policy runs: auto (a CUDA GPU if torch sees one), "
                                                   "cpu or cuda."),
          baseline: Path | None = typer.Option(None, help="Compare with this earlier eval JSON; exit 1 if worse."),
          compare: tuple[Path, Path] | None = typer.Option(None, help="Only compare two eval JSON files "
                                                                         "(A = baseline, B = candidate)."),
          json_out: Path | None = typer.Option(None, "--json", help="Write the result here (JSON).")) -> None:
    """Evaluate a policy on the held-out split in six families: final answer, tool calling, trajectory,
    robustness, cost, regression. With --compare A B: list B's regressions against A, exit 1 if any."""
    from .evaluation import families as ev

    try:
        if compare:
            worse = ev.compare(ev.load_result(compare[0]), ev.load_result(compare[1]))
            _print_regressions(worse, compare[0], compare[1])
            raise typer.Exit(1 if worse else 0)
        if policy is None:
            raise ValueError("give --policy (model directory, teacher, noisy-teacher, random, script:FILE) "
                             "or --compare A.json B.json")
        result = _run_eval(env, policy, n, k, seed, temperature, tokenizer, robustness, device)
        if baseline:
            result["regression"] = {"baseline": str(baseline),
                                    "worse": ev.compare(ev.load_result(baseline), result)}
    except ValueError as err:
        _fail(str(err))
        return
    console.print(ev.summary_table(result))
    if json_out:
        from .atomic import atomic_write_json

        json_out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(json_out, result)
    if result["regression"]["worse"]:
        _print_regressions(result["regression"]["worse"], baseline, "this run")
        raise typer.Exit(1)


def _run_eval(env: str, policy: str, n: int, k: int, seed: int, temperature: float, tokenizer: Path | None,
              robustness: bool, device: str = "auto") -> dict[str, Any]:
    from .envs import make_env
    from .evaluation import families as ev
    from .policies import HFPolicy, SamplingConfig, load_policy
    from .runtime.render import Renderer

    e = make_env(env)
    pol = load_policy(policy, e, SamplingConfig(temperature=temperature), device=device)
    renderer = None
    if tokenizer is not None:
        from transformers import AutoTokenizer

        if not tokenizer.is_dir():
            raise ValueError(f"--tokenizer must be a model directory with a tokenizer, got {tokenizer}")
        renderer = Renderer(AutoTokenizer.from_pretrained(str(tokenizer)))
    elif isinstance(pol, HFPolicy):
        renderer = pol.renderer
    tasks = e.tasks("eval", n, seed)
    with console.status("evaluating") as status:
        result, _ = ev.evaluate(lambda **kw: make_env(env, **kw), pol, tasks, k=k, seed=seed, renderer=renderer,
                                robustness=robustness, progress=lambda msg: status.update(f"evaluating: {msg}"))
    result["policy"] = policy
    return result


def _print_regressions(worse: list[dict[str, Any]], a: Any, b: Any) -> None:
    if not worse:
        console.print(f"[green]no regressions[/]: {b} is not worse than {a} beyond its 95% intervals")
        return
    console.print(f"[red]{len(worse)} regression(s)[/] of {b} against {a}:")
    for w in worse:
        lo, hi = w["baseline_ci95"]
        console.print(f"  {w['family']}.{w['metric']}: {w['candidate']:.3f} vs {w['baseline']:.3f} "
                      f"[{lo:.3f}, {hi:.3f}] ({w['better']} is better)")


@app.command()
def doctor(env: str = typer.Option("tool_use", help="Environment name."),
           policy: str | None = typer.Option(None, help="Also check this policy (model dir, tiny, noisy-teacher, "
                                                           "random, script:FILE): parse rate and GRPO signal."),
           n: int = typer.Option(20, help="Held-out tasks per check."),
           group: int = typer.Option(4, help="G for the GRPO-signal check."),
           temperature: float = typer.Option(1.0, help="Sampling temperature for the policy checks."),
           device: str = typer.Option("auto", help="Where a model policy runs: auto (a CUDA GPU if torch sees one), "
                                                    "cpu or cuda."),
           json_out: Path | None = typer.Option(None, "--json", help="Write the checks here (JSON list).")) -> None:
    """Is this env (and policy) ready for agentic RL? The seed's checklist, each check PASS / WARN / FAIL."""
    from rich.table import Table

    from .envs import make_env
    from .evaluation.doctor import as_json, run_doctor
    from .policies import SamplingConfig, load_policy

    try:
        e = make_env(env)
        pol = load_policy(policy, e, SamplingConfig(temperature=temperature), device=device) if policy else None
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
                json_out: Path | None = typer.Option(None, "--json", help="Write the rows here (JSON list).")
                ) -> None:
    """Try every known reward hack with a scripted agent: naive reward (the agent's own test run) vs guarded reward."""
    from rich.table import Table

    from .envs import ENVS, Env, make_env

    try:
        e = make_env(env)
    except ValueError as err:
        _fail(str(err))
        return
    rows = e.probe_hacks(e.tasks("eval", n, seed))
    if rows is None:
        with_probes = [name for name, cls in ENVS.items() if cls.probe_hacks is not Env.probe_hacks]
        _fail(f"no exploit probes for env {env!r}; envs with probes: {', '.join(with_probes)}")
        return
    table = Table(title=f"reward hacks on {n} held-out {env} tasks")
    for col in ("exploit", "finding", "naive reward", "guarded reward", "no-op reward", "env errors", "guard holds"):
        table.add_column(col)
    for r in rows:
        holds = r["guarded_reward"] <= r["noop_reward"] + 1e-9
        table.add_row(str(r["exploit"]), str(r.get("finding") or ""), f"{r['naive_reward']:.2f}",
                      f"{r['guarded_reward']:.2f}", f"{r['noop_reward']:.2f}", str(r.get("env_errors", 0)),
                      "[green]yes[/]" if holds else "[red]NO[/]")
    console.print(table)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(rows, indent=2))


models_app = typer.Typer(help="Model presets: list them and what is cached, or fetch one ahead of a run.",
                         invoke_without_command=True)
app.add_typer(models_app, name="models")


@models_app.callback()
def models_list(ctx: typer.Context) -> None:
    """List the model presets (weights that ship in a package on the index) and whether each is cached."""
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from .models import PRESETS, cache_root, is_cached

    table = Table(title=f"model presets (cache: {cache_root()}; set AGENTIC_RL_CACHE to move it)")
    for col in ("name", "model", "from", "license", "cached"):
        table.add_column(col)
    for p in PRESETS.values():
        table.add_row(p.name, p.description, f"{p.distribution}=={p.version}", p.license,
                      "[green]yes[/]" if is_cached(p.name) else "no")
    console.print(table)


@models_app.command("fetch")
def models_fetch(name: str = typer.Argument(..., help="A preset name (agentic-rl models lists them).")) -> None:
    """Download a preset's package, check its sha256 and convert it once into a plain HF directory in the cache."""
    from .models import fetch_preset

    try:
        path = fetch_preset(name)
    except ValueError as err:
        _fail(str(err))
        return
    console.print(f"{name} → {path}")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="A run directory (from agentic-rl run, sft or grpo)."),
           out: Path | None = typer.Option(None, help="Where to write the HTML (default: RUN_DIR/report.html).")
           ) -> None:
    """Write one self-contained HTML report of a run: config, learning curves, the six-family evaluation,
    exploit probes and a trajectory viewer. `agentic-rl run` writes it at the end of every run."""
    from .atomic import atomic_write_text
    from .evaluation.report import build_report

    try:
        page = build_report(run_dir)
    except ValueError as err:
        _fail(str(err))
        return
    path = out or run_dir / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, page)
    console.print(f"report → {path}")


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
