"""The `agentic-rl` command line: run (the whole ladder), sft, grpo, rollout, eval, doctor, probe-hacks, models,
report, serve."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.markup import escape
from typer.core import TyperCommand

from .atomic import atomic_write_json, atomic_write_text
from .config import C, Config, fields_help, load_config
from .ui import config_table, console, status

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Train LLM agents to use tools well: SFT, then agentic GRPO with verifiable rewards.")


def _version(value: bool) -> None:
    if value:
        console.print(f"agentic-rl {importlib.metadata.version('agentic-rl')}")
        raise typer.Exit()


@app.callback()
def main_options(verbose: bool = typer.Option(False, "--verbose", "-v", help="Show the libraries' own progress bars "
                                                                           "and info logs (transformers' weight "
                                                                           "loading, …)."),
                 version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                              help="Print the version and exit.")) -> None:
    """Train LLM agents to use tools well: SFT, then agentic GRPO with verifiable rewards."""
    quiet_libraries(not verbose)


def quiet_libraries(quiet: bool) -> None:
    """Hide (or show) transformers' and huggingface_hub's per-load progress bars: one "Loading weights" bar per
    model load is noise in a log, and the commands print their own progress."""
    if quiet:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    else:
        os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        logging.getLogger("agentic_rl").setLevel(logging.INFO)
    if "transformers" in sys.modules:  # already imported: its switch, not the environment, decides
        from transformers.utils import logging as hf_logging

        (hf_logging.disable_progress_bar if quiet else hf_logging.enable_progress_bar)()


def _fail(msg: str, code: int = 2) -> NoReturn:
    console.print(f"[red]error:[/] {escape(msg)}", soft_wrap=True)  # one line in a log, however long
    raise typer.Exit(code)


def _training_errors() -> tuple[type[Exception], ...]:
    """Errors a training run stops with on purpose: reported as a message, not a traceback (exit code 1)."""
    from .policies import TokenContinuityError
    from .train.grpo import LogprobMismatchError

    return (LogprobMismatchError, TokenContinuityError)


def _with_config_help(config: Callable[[], type[Config]], note: str = "", skip: tuple[str, ...] = ()
                      ) -> type[TyperCommand]:
    """A command whose --help also lists every key of its config (imported only when help is asked for)."""

    class ConfigCommand(TyperCommand):
        def format_help(self, ctx: Any, formatter: Any) -> None:
            super().format_help(ctx, formatter)
            console.print(config_table(fields_help(config(), skip=skip), note))

        def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
            _refuse_keys_as_options(args, {o for p in self.params for o in p.opts}, config)
            return super().parse_args(ctx, args)

    return ConfigCommand


def _refuse_keys_as_options(args: list[str], options: set[str], config: Callable[[], type[Config]]) -> None:
    """`--lr 1e-3` where lr is a config key, not an option: say how to give it (lr=1e-3)."""
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if not flag.startswith("--") or flag in options:
            continue
        key = flag[2:].replace("-", "_")
        if key in {row[0] for row in fields_help(config())}:
            if not value:
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "VALUE"
            _fail(f"no option {flag}: {key} is a config key, given as key=value: {key}={value}")


_KEYS = {"allow_extra_args": True, "ignore_unknown_options": False}
CONFIG_OPTION = typer.Option(None, help="YAML config file; key=value arguments and the options above override it.")


def _config(cls: type[C], ctx: typer.Context, config: Path | None, base: dict[str, Any] | None = None,
            **explicit: Any) -> C:
    """The command's config: defaults ← `base` ← the file ← options given ← key=value arguments; errors → exit 2."""
    try:
        return load_config(cls, config, ctx.args, base=base, **explicit)
    except ValueError as e:
        _fail(str(e))


def _check_json_out(path: Path | None) -> None:
    """Refuse an unwritable --json before the work whose result it would hold."""
    from .atomic import check_output_file

    if path is not None:
        try:
            check_output_file(path, "--json")
        except ValueError as e:
            _fail(str(e))


def _train(train: Any, cfg: Config, out: Path, resume: bool) -> None:
    """Run a training entry point; the errors it stops with on purpose become messages, not tracebacks."""
    try:
        train(cfg, out, resume=resume)
    except ValueError as e:
        _fail(str(e))
    except _training_errors() as e:
        _fail(f"{type(e).__name__}: {e}", code=1)


def _lazy(module: str, name: str) -> Callable[[], type[Config]]:
    """The config class `name` of `agentic_rl.<module>`, imported only when --help asks for it."""
    return lambda: getattr(importlib.import_module(f"agentic_rl.{module}"), name)


RUN_NOTE = ("sft.KEY and grpo.KEY: any key of `agentic-rl sft --help` and `agentic-rl grpo --help` but env, env_args, "
            "seed, device and policy, which the run sets for both.")


def _saved_base(out: Path, resume: bool) -> dict[str, Any] | None:
    """With --resume, the config the run in `out` saved: what it resumes under, unless the user changes a key
    (which the trainer then refuses, naming it)."""
    from .config import read_yaml

    saved = out / "config.yaml"
    if not (resume and saved.is_file()):
        return None
    try:
        return read_yaml(saved)
    except ValueError as e:
        _fail(str(e))


AGENT_OPTION = typer.Option(None, help="Train your own agent: module:function or file.py:function, called as "
                                         "function(task, client) -> reward with an openai client on the gateway "
                                         "(needs the serve extra).")


@app.command(context_settings=_KEYS, cls=_with_config_help(_lazy("pipeline", "RunConfig"), RUN_NOTE, skip=("sft", "grpo")))
def run(ctx: typer.Context,
        env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
        policy: str | None = typer.Option(None, help="The model the ladder starts from (default: tiny)."),
        seed: int | None = typer.Option(None, help="Seed for tasks, sampling and every stage (default: 0)."),
        out: Path = typer.Option(Path("runs/run"), help="Run directory."),
        agent: str | None = AGENT_OPTION,
        config: Path | None = CONFIG_OPTION,
        resume: bool = typer.Option(False, help="Continue the run in --out under its saved config: finished "
                                                "stages are kept.")) -> None:
    """The whole ladder: demonstrations → SFT → GRPO → held-out comparison of the starting model (prompted), the
    noisy teacher, SFT and GRPO. The tiny policy by default; policy=smollm2-135m (or any model) for a real one.
    Extra arguments: key=value config overrides (sft.lr=1e-3, grpo.steps=20)."""
    from .pipeline import RunConfig, env_run_defaults, run_pipeline

    if agent is not None:  # GRPO's episodes come from the agent; the stages are still compared in the env's loop
        ctx.args.append(f"grpo.agent={agent}")
    base = _saved_base(out, resume)
    if base is None:
        try:
            base = env_run_defaults(config, ctx.args, env, policy)
        except ValueError as e:
            _fail(str(e))
    _train(run_pipeline, _config(RunConfig, ctx, config, base=base, env=env, policy=policy, seed=seed), out, resume)


@app.command(context_settings=_KEYS, cls=_with_config_help(_lazy("train.sft", "SFTConfig")))
def sft(ctx: typer.Context,
        env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
        policy: str | None = typer.Option(None, help="Starting policy (default: tiny)."),
        seed: int | None = typer.Option(None, help="Seed for tasks, demonstrations and sampling (default: 0)."),
        out: Path = typer.Option(Path("runs/sft"), help="Run directory."),
        config: Path | None = CONFIG_OPTION,
        resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint, under its "
                                                "saved config.")) -> None:
    """Supervised fine-tuning on noisy-teacher demonstrations. Extra arguments: key=value config overrides."""
    from .train.sft import SFTConfig, train_sft

    cfg = _config(SFTConfig, ctx, config, base=_saved_base(out, resume), env=env, policy=policy, seed=seed)
    _train(train_sft, cfg, out, resume)


@app.command(context_settings=_KEYS, cls=_with_config_help(_lazy("train.grpo", "GRPOConfig")))
def grpo(ctx: typer.Context,
         env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
         policy: str | None = typer.Option(None, help="Starting policy (default: runs/sft/model)."),
         seed: int | None = typer.Option(None, help="Seed for tasks and sampling (default: 0)."),
         out: Path = typer.Option(Path("runs/grpo"), help="Run directory."),
         agent: str | None = AGENT_OPTION,
         config: Path | None = CONFIG_OPTION,
         resume: bool = typer.Option(False, help="Continue the run in --out from its latest checkpoint, under its "
                                                 "saved config.")) -> None:
    """Agentic GRPO from a starting policy. Extra arguments: key=value config overrides."""
    from .train.grpo import GRPOConfig, train_grpo

    cfg = _config(GRPOConfig, ctx, config, base=_saved_base(out, resume), env=env, policy=policy, seed=seed,
                  agent=agent)
    _train(train_grpo, cfg, out, resume)


@app.command(context_settings=_KEYS, cls=_with_config_help(_lazy("commands", "RolloutConfig")))
def rollout(ctx: typer.Context,
            env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
            policy: str | None = typer.Option(None, help="Model (preset, directory, .gguf, Hub id), tiny, teacher, "
                                                         "noisy-teacher, random or script:FILE."),
            n: int | None = typer.Option(None, help="Number of tasks (default: 3)."),
            group: int | None = typer.Option(None, help="Episodes per task (default: 1)."),
            split: str | None = typer.Option(None, help="Task split: train or eval (default: eval)."),
            task_id: str | None = typer.Option(None, help="Run only this task (by its stable id)."),
            seed: int | None = typer.Option(None, help="Seed for tasks and sampling (default: 0)."),
            temperature: float | None = typer.Option(None, help="Sampling temperature (default: 1; 0: greedy)."),
            device: str | None = typer.Option(None, help="auto (default), cpu or cuda."),
            config: Path | None = CONFIG_OPTION,
            json_out: Path | None = typer.Option(None, "--json", help="Write the trajectories here (JSON list)."),
            quiet: bool = typer.Option(False, help="Print only the summary.")) -> None:
    """Run a policy in an environment and print its trajectories: turns, tool calls, observations, rewards.
    Extra arguments: key=value config overrides (env_args.fault_rate=0.5, max_new_tokens=64)."""
    from .commands import RolloutConfig
    from .evaluation.summary import summarize
    from .runtime.rollout import run_episodes

    cfg = _config(RolloutConfig, ctx, config, env=env, policy=policy, n=n, group=group, split=split,
                  task_id=task_id, seed=seed, temperature=temperature, device=device)
    _check_json_out(json_out)
    try:
        factory = cfg.env_factory()
        e = factory()
        trajs = run_episodes(factory, cfg.tasks(e), cfg.load(e), group_size=cfg.group, seed=cfg.seed)
    except ValueError as err:
        _fail(str(err))
    if not quiet:
        for t in trajs:
            print_trajectory(t)
    console.print_json(json.dumps(summarize(trajs)))
    if json_out:
        atomic_write_json(json_out, [t.to_dict() for t in trajs])


@app.command("eval", context_settings=_KEYS, cls=_with_config_help(_lazy("commands", "EvalConfig")))
def eval_(ctx: typer.Context,
          env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
          policy: str | None = typer.Option(None, help="Model (preset, directory, .gguf, Hub id), teacher, "
                                                       "noisy-teacher, random or script:FILE."),
          n: int | None = typer.Option(None, help="Held-out tasks (default: 100)."),
          k: int | None = typer.Option(None, help="Attempts per task, for pass@k and pass^k (default: 3)."),
          seed: int | None = typer.Option(None, help="Seed for tasks and sampling (default: 0)."),
          temperature: float | None = typer.Option(None, help="Sampling temperature (default: 1; 0: greedy)."),
          tokenizer: str | None = typer.Option(None, help="Count a scripted policy's tokens with this model "
                                                          "directory's tokenizer and chat template."),
          robustness: bool | None = typer.Option(None, "--robustness/--no-robustness",
                                                 help="Also run the fault and prompt-perturbation conditions "
                                                      "(default: on)."),
          device: str | None = typer.Option(None, help="auto (default), cpu or cuda."),
          bench: str | None = typer.Option(None, help="A public benchmark instead of the env's tasks: bfcl (the "
                                                      "Berkeley Function Calling Leaderboard; extra bfcl)."),
          categories: str | None = typer.Option(None, help="BFCL categories, comma-separated (default: simple_python,"
                                                           "multiple,parallel,parallel_multiple,irrelevance,"
                                                           "live_simple,live_multiple,live_irrelevance)."),
          config: Path | None = CONFIG_OPTION,
          baseline: Path | None = typer.Option(None, help="Compare with this earlier eval JSON; exit 1 if worse."),
          compare: tuple[Path, Path] | None = typer.Option(None, help="Only compare two eval JSON files "
                                                                         "(A = baseline, B = candidate)."),
          json_out: Path | None = typer.Option(None, "--json", help="Write the result here (JSON).")) -> None:
    """Evaluate a policy on the held-out split in six families: final answer, tool calling, trajectory,
    robustness, cost, regression. With --compare A B: list B's regressions against A, exit 1 if any.
    Extra arguments: key=value config overrides (env_args.max_turns=4, max_new_tokens=64)."""
    from .commands import EvalConfig, run_eval
    from .evaluation import families as ev

    _check_json_out(json_out)
    if compare:
        try:
            worse = ev.compare(ev.load_result(compare[0]), ev.load_result(compare[1]))
        except ValueError as err:
            _fail(str(err))
        _print_regressions(worse, compare[0], compare[1])
        raise typer.Exit(1 if worse else 0)
    cfg = _config(EvalConfig, ctx, config, env=env, policy=policy, n=n, k=k, seed=seed, temperature=temperature,
                  tokenizer=tokenizer, robustness=robustness, device=device, bench=bench,
                  categories=categories.split(",") if categories is not None else None)
    try:
        with status("evaluating") as spinner:
            result = run_eval(cfg, progress=lambda msg: spinner.update(f"evaluating: {msg}"))
        if baseline:
            result["regression"] = {"baseline": str(baseline), "worse": ev.compare(ev.load_result(baseline), result)}
    except ValueError as err:
        _fail(str(err))
    if cfg.bench == "bfcl":
        from .evaluation.bfcl import bfcl_table

        console.print(bfcl_table(result))
    else:
        console.print(ev.summary_table(result))
    questions = result.pop("questions", None)  # BFCL: each question's reply and verdicts
    if json_out:
        atomic_write_json(json_out, result)
        if questions is not None:
            atomic_write_text(json_out.with_suffix(".jsonl"),
                              "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in questions))
            console.print(f"each question's reply and verdicts: {json_out.with_suffix('.jsonl')}")
    if result["regression"]["worse"]:
        _print_regressions(result["regression"]["worse"], baseline, "this run")
        raise typer.Exit(1)


def _print_regressions(worse: list[dict[str, Any]], a: Any, b: Any) -> None:
    if not worse:
        console.print(f"[green]no regressions[/]: {b} is not worse than {a} beyond its 95% intervals")
        return
    console.print(f"[red]{len(worse)} regression(s)[/] of {b} against {a}:")
    for w in worse:
        lo, hi = w["baseline_ci95"]
        console.print(f"  {w['family']}.{w['metric']}: {w['candidate']:.3f} vs {w['baseline']:.3f} "
                      f"[{lo:.3f}, {hi:.3f}] ({w['better']} is better)")


@app.command(context_settings=_KEYS, cls=_with_config_help(_lazy("commands", "DoctorConfig")))
def doctor(ctx: typer.Context,
           env: str | None = typer.Option(None, help="Environment name (default: tool_use)."),
           policy: str | None = typer.Option(None, help="Also check this policy (model, tiny, noisy-teacher, "
                                                        "random, script:FILE): parse rate and GRPO signal."),
           n: int | None = typer.Option(None, help="Held-out tasks per check (default: 20)."),
           group: int | None = typer.Option(None, help="G for the GRPO-signal check (default: 4)."),
           temperature: float | None = typer.Option(None, help="Sampling temperature of the policy checks "
                                                               "(default: 1)."),
           device: str | None = typer.Option(None, help="auto (default), cpu or cuda."),
           config: Path | None = CONFIG_OPTION,
           json_out: Path | None = typer.Option(None, "--json", help="Write the checks here (JSON list).")) -> None:
    """Is this env (and policy) ready for agentic RL? The seed's checklist, each check PASS / WARN / FAIL.
    Extra arguments: key=value config overrides."""
    from rich.table import Table

    from .commands import DoctorConfig
    from .evaluation.doctor import as_json, run_doctor

    cfg = _config(DoctorConfig, ctx, config, env=env, policy=policy, n=n, group=group, temperature=temperature,
                  device=device)
    _check_json_out(json_out)
    try:
        factory = cfg.env_factory()
        pol = cfg.load(factory()) if cfg.policy else None
        checks = run_doctor(factory, pol, n=cfg.n, group=cfg.group, temperature=cfg.temperature, seed=cfg.seed)
    except ValueError as err:
        _fail(str(err))
    table = Table(title=f"doctor: {cfg.env}" + (f" with {cfg.policy}" if cfg.policy else ""))
    for col in ("check", "verdict", "observed", "next step"):
        table.add_column(col)
    colour = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
    for c in checks:
        table.add_row(c.name, f"[{colour[c.verdict]}]{c.verdict}[/]", escape(c.observed), escape(c.next_step))
    console.print(table)
    if json_out:
        atomic_write_json(json_out, as_json(checks))
    if any(c.verdict == "FAIL" for c in checks):
        raise typer.Exit(1)


@app.command("probe-hacks", context_settings=_KEYS, cls=_with_config_help(_lazy("commands", "ProbeConfig")))
def probe_hacks(ctx: typer.Context,
                env: str | None = typer.Option(None, help="Environment with exploit probes (default: codefix)."),
                n: int | None = typer.Option(None, help="Held-out tasks to try every exploit on (default: 3)."),
                seed: int | None = typer.Option(None, help="Seed for the tasks (default: 0)."),
                config: Path | None = CONFIG_OPTION,
                json_out: Path | None = typer.Option(None, "--json", help="Write the rows here (JSON list).")
                ) -> None:
    """Try every known reward hack with a scripted agent: naive reward (what an unguarded check pays) vs guarded.
    Extra arguments: key=value config overrides."""
    from rich.table import Table

    from .commands import ProbeConfig
    from .envs import ENVS, Env

    cfg = _config(ProbeConfig, ctx, config, env=env, n=n, seed=seed)
    _check_json_out(json_out)
    try:
        e = cfg.env_factory()()
    except ValueError as err:
        _fail(str(err))
    rows = e.probe_hacks(e.tasks("eval", cfg.n, cfg.seed))
    if rows is None:
        with_probes = [name for name, cls in ENVS.items() if cls.probe_hacks is not Env.probe_hacks]
        _fail(f"no exploit probes for env {cfg.env!r}; envs with probes: {', '.join(with_probes)}")
    table = Table(title=f"reward hacks on {cfg.n} held-out {cfg.env} tasks")
    known = ("exploit", "naive_reward", "guarded_reward", "noop_reward", "holds")
    extra = list(dict.fromkeys(k for r in rows for k in r if k not in known))  # codefix: finding; toolcall: tasks
    for col in ("exploit", "naive reward", "guarded reward", "no-op reward", *extra, "guard holds"):
        table.add_column(col.replace("_", " "), no_wrap=col == "exploit")
    for r in rows:  # a row may judge itself (`holds`: toolcall's per-call credit probes, held to the honest attempt)
        holds = r["holds"] if "holds" in r else (r["guarded_reward"] <= r["noop_reward"] + 1e-9
                                                 and not r.get("env_error") and not r.get("env_errors"))
        naive = "n/a" if r["naive_reward"] is None else f"{r['naive_reward']:.2f}"
        noop = "n/a" if r["noop_reward"] is None else f"{r['noop_reward']:.2f}"
        table.add_row(str(r["exploit"]), naive, f"{r['guarded_reward']:.2f}", noop,
                      *(str(r[k]) if r.get(k) is not None else "" for k in extra),
                      "[green]yes[/]" if holds else "[red]NO[/]")
    console.print(table)
    if json_out:
        atomic_write_json(json_out, rows)


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
    from .atomic import check_output_file
    from .evaluation.report import build_report

    path = out or run_dir / "report.html"
    try:
        check_output_file(path, "--out" if out else "report")
        page = build_report(run_dir)
    except ValueError as err:
        _fail(str(err))
        return
    atomic_write_text(path, page)
    console.print(f"report → {path}")


@app.command()
def serve(policy: str = typer.Option(..., help="A model directory, preset (smollm2-135m) or run's model "
                                              "(RUN/grpo/model)."),
          host: str = typer.Option("127.0.0.1", help="Address to bind; beyond loopback needs --api-key."),
          port: int = typer.Option(8000, help="TCP port."),
          api_key: str | None = typer.Option(None, "--api-key", envvar="AGENTIC_RL_API_KEY",
                                             help="Require Authorization: Bearer KEY on every route."),
          model_name: str | None = typer.Option(None, help="The name clients send as `model` (default: the "
                                                           "policy directory's name)."),
          max_tokens: int | None = typer.Option(None, help="Tokens per reply when a request gives no max_tokens."),
          device: str = typer.Option("auto", help="auto, cpu or cuda."),
          allow_host: list[str] = typer.Option([], "--allow-host",
                                               help="A Host / Origin name to accept besides the loopback ones and "
                                                    "--host (repeatable; '*' any). Others get 403: a web page, "
                                                    "even after a DNS rebind, cannot use the server."),
          max_rollouts: int = typer.Option(1024, min=1, help="Rollouts open at once; one more evicts the one idle "
                                                             "longest (its next turn gets 409)."),
          max_connections: int = typer.Option(256, min=1, help="Connections and requests at once; beyond, 503."),
          header_timeout: float = typer.Option(10.0, min=0.1, help="Seconds a client has to send a request's "
                                                                   "head; a slower one is disconnected.")) -> None:
    """Serve a policy behind an OpenAI-compatible API (/v1/chat/completions, tools, streaming) and record the
    requests made under /rollouts/{id}/v1 token for token, for training an agent written against the OpenAI API."""
    from .config import ConfigError
    from .serve import serve as run_server

    try:
        from .serve.server import ServerLimits

        run_server(policy, host=host, port=port, api_key=api_key, model_name=model_name, max_tokens=max_tokens,
                   device=device, allow_hosts=tuple(allow_host), max_rollouts=max_rollouts,
                   limits=ServerLimits(header_timeout_s=header_timeout, max_connections=max_connections))
    except (ConfigError, ImportError) as err:
        _fail(str(err))


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
