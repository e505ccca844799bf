import json
from pathlib import Path

from typer.testing import CliRunner

from agentic_rl.cli import app


def test_run_goes_through_every_stage_and_writes_the_comparison(short_run):
    out, args, r = short_run
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["wall_seconds"] > 0 and set(s["stages"]) == {"prompted", "teacher", "sft", "grpo"}
    for stage in s["stages"].values():
        assert {"success_rate", "mean_reward", "tool_calls_per_episode", "recovery_rate",
                "correct_stop_rate"} <= set(stage["eval"])
    assert "held-out evaluation" in r.output and "correct_stop_rate" in r.output
    kinds = set().union(*(stage["eval"]["success_by_kind"] for stage in s["stages"].values()))
    assert kinds and all(f"success · {kind}" in r.output for kind in kinds)  # where a stage falls short
    # the models again at temperature 0 (the noisy teacher has no temperature)
    assert "greedy" not in s["stages"]["teacher"] and "success_rate (greedy)" in r.output
    assert "greedy" not in s["stages"]["prompted"]  # the starting model, sampled as the others are
    for stage in ("sft", "grpo"):
        greedy = s["stages"][stage]["greedy"]
        assert greedy["episodes"] == 8 and 0.0 <= greedy["success_rate"] <= 1.0
    for stage in ("prompted", "teacher", "sft", "grpo"):  # the six-family evaluation and its trajectories
        result = json.loads((out / "eval" / f"{stage}.json").read_text())
        assert result["tasks"] == 8 and result["robustness_tasks"] == 4 and "robustness" in result["overall"]
        assert len((out / "eval" / f"{stage}.jsonl").read_text().splitlines()) == 8
    assert (out / "report.html").exists() and s["report"] == str(out / "report.html")
    assert (out / "sft" / "model" / "config.json").exists() and (out / "grpo" / "model" / "config.json").exists()
    # a second invocation with --resume keeps the finished stages
    before = (out / "sft" / "summary.json").read_text()
    r = CliRunner().invoke(app, args + ["--resume"])
    assert r.exit_code == 0, r.output
    assert (out / "sft" / "summary.json").read_text() == before


def test_an_envs_run_defaults_sit_beneath_the_users_settings(tmp_path):
    from agentic_rl.config import load_config
    from agentic_rl.envs.codefix import CodeFixEnv
    from agentic_rl.pipeline import RunConfig, env_run_defaults

    assert env_run_defaults(None, [], None) == {}  # tool_use: the class defaults
    base = env_run_defaults(None, ["sft.demos=7"], "codefix")
    assert base == CodeFixEnv.run_defaults
    cfg = load_config(RunConfig, None, ["sft.demos=7"], base=base, env="codefix")
    assert cfg.sft.demos == 7 and cfg.sft.epochs == CodeFixEnv.run_defaults["sft"]["epochs"]
    assert cfg.grpo.steps == CodeFixEnv.run_defaults["grpo"]["steps"] and cfg.env == "codefix"
    f = tmp_path / "c.yaml"
    f.write_text("env: codefix\ngrpo:\n  steps: 3\n")
    cfg = load_config(RunConfig, f, [], base=env_run_defaults(f, [], None))
    assert cfg.grpo.steps == 3 and cfg.eval_tasks == CodeFixEnv.run_defaults["eval_tasks"]


def test_a_key_the_run_would_overwrite_or_ignore_is_an_error_that_names_what_to_give():
    import pytest

    from agentic_rl.config import ConfigError, load_config
    from agentic_rl.pipeline import RunConfig

    cfg = load_config(RunConfig, None, ["policy=smollm2-135m", "seed=3"])
    sft, grpo = cfg.stages(Path("runs/x"))
    assert (sft.policy, sft.seed, grpo.seed, grpo.policy) == ("smollm2-135m", 3, 3, str(Path("runs/x/sft/model")))
    for key, says in [("sft.seed=3", "give seed="), ("grpo.env=codefix", "give env="), ("sft.policy=x", "give policy="),
                      ("sft.device=cpu", "give device="), ("grpo.policy=x", "SFT stage's model"),
                      ("sft.env_args.fault_rate=0", "give env_args=")]:
        with pytest.raises(ConfigError, match=says):
            load_config(RunConfig, None, [key])
    with pytest.raises(ConfigError, match=r"sft.tiny.hidden: .*policy=smollm2-135m"):  # the run's policy decides
        load_config(RunConfig, None, ["policy=smollm2-135m", "sft.tiny.hidden=64"])
    assert load_config(RunConfig, None, ["sft.tiny.hidden=64"]).sft.tiny.hidden == 64


def test_a_pretrained_model_gets_a_pretrained_budget_beneath_the_users_settings():
    from agentic_rl.config import load_config
    from agentic_rl.pipeline import PRETRAINED_RUN_DEFAULTS, RunConfig, env_run_defaults

    assert env_run_defaults(None, [], None) == {}  # the tiny ladder keeps its own defaults
    args = ["policy=smollm2-135m", "sft.lr=1e-4"]
    cfg = load_config(RunConfig, None, args, base=env_run_defaults(None, args, None))
    assert cfg.sft.optimizer == "adamw" and cfg.sft.max_steps == PRETRAINED_RUN_DEFAULTS["sft"]["max_steps"]
    assert cfg.sft.lr == 1e-4 and cfg.grpo.steps == PRETRAINED_RUN_DEFAULTS["grpo"]["steps"]  # the user's value wins
    assert not cfg.greedy_eval


def test_an_env_can_fit_the_pretrained_budget_to_itself():
    """math's pretrained budget (a shorter final comparison) goes over PRETRAINED_RUN_DEFAULTS, beneath the user."""
    from agentic_rl.config import load_config
    from agentic_rl.pipeline import PRETRAINED_RUN_DEFAULTS, RunConfig, env_run_defaults

    args = ["policy=smollm2-135m", "robustness_tasks=7"]
    cfg = load_config(RunConfig, None, args, base=env_run_defaults(None, args, "math"))
    assert cfg.eval_tasks == 100 and cfg.sft.eval_tasks == 10 and cfg.robustness_tasks == 7
    assert cfg.sft.max_steps == PRETRAINED_RUN_DEFAULTS["sft"]["max_steps"]
    assert load_config(RunConfig, None, [], base=env_run_defaults(None, [], "math")).eval_tasks == 200  # tiny: none
