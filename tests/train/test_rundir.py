"""Run directories are never falsified: every refusal writes nothing, --resume runs under the saved config and
compares it with every stage already started, and a saved config passed back with --config gives the same run."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agentic_rl.cli import app
from agentic_rl.config import load_config
from agentic_rl.train.grpo import GRPOConfig
from agentic_rl.train.rundir import prepare_run_dir
from agentic_rl.train.sft import SFTConfig

from ..conftest import SHORT_RUN

runner = CliRunner()


def _said(r) -> str:
    return " ".join(r.output.split())


def snapshot(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under `root`: its sha256 and mtime (ns), to show that a refused command wrote nothing."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A short `agentic-rl run` with one non-default key (sft.lr), finished; tests copy it before changing it."""
    out = tmp_path_factory.mktemp("rundir") / "D"
    r = runner.invoke(app, ["run", "--out", str(out), *SHORT_RUN, "sft.lr=1e-3"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    """A copy of the finished run, with the stage paths the copy would have written (DIR/sft/model)."""
    out = tmp_path / "D"
    shutil.copytree(finished_run, out)
    for f in (out / "config.yaml", out / "grpo" / "config.yaml"):
        f.write_text(f.read_text().replace(str(finished_run), str(out)))
    return out


def test_a_resume_under_a_changed_key_is_refused_and_writes_nothing(finished_run):
    before = snapshot(finished_run)
    r = runner.invoke(app, ["run", "--out", str(finished_run), "--resume", "sft.lr=0.5"])
    assert r.exit_code == 2 and "cannot resume under a different config" in r.output
    assert "sft.lr: 0.001 → 0.5" in r.output and "Traceback" not in r.output
    assert snapshot(finished_run) == before  # config.yaml's checksum, and every other file, unchanged
    r = runner.invoke(app, ["run", "--out", str(finished_run), "--resume", "grpo.steps=3", "eval_tasks=9"])
    assert r.exit_code == 2 and "grpo.steps: 2 → 3" in r.output and "eval_tasks: 8 → 9" in r.output
    assert snapshot(finished_run) == before


def test_a_new_run_into_a_finished_one_is_refused_and_writes_nothing(finished_run):
    before = snapshot(finished_run)
    r = runner.invoke(app, ["run", "--out", str(finished_run), *SHORT_RUN])
    assert r.exit_code == 2 and "already holds a run" in r.output and "--resume" in r.output
    r = runner.invoke(app, ["sft", "--out", str(finished_run / "sft")])
    assert r.exit_code == 2 and "already holds a run" in r.output
    assert snapshot(finished_run) == before


def test_the_top_level_config_records_what_each_stage_used(finished_run):
    saved = yaml.safe_load((finished_run / "config.yaml").read_text())
    assert saved["grpo"]["policy"] == str(finished_run / "sft" / "model")  # the run's own SFT model
    assert saved["sft"]["policy"] == saved["policy"] == "tiny" and saved["sft"]["lr"] == 1e-3
    assert saved["sft"]["max_new_tokens"] == 96 and saved["grpo"]["max_new_tokens"] == 32  # the env's, and the given
    for stage in ("sft", "grpo"):  # the top level says what the stage's own config.yaml says
        assert saved[stage] == yaml.safe_load((finished_run / stage / "config.yaml").read_text())
    assert "epochs" not in saved["sft"] and "lora" not in saved["sft"]  # keys that do nothing are not written
    assert not {"kl_estimator", "gamma", "max_resample", "lora"} & set(saved["grpo"])


def test_a_resume_without_overrides_runs_under_the_saved_config(run_copy):
    config = (run_copy / "config.yaml").read_bytes()
    sft_summary = (run_copy / "sft" / "summary.json").read_bytes()
    r = runner.invoke(app, ["run", "--out", str(run_copy), "--resume"])  # sft.lr=1e-3 is not given again
    assert r.exit_code == 0, r.output
    assert (run_copy / "config.yaml").read_bytes() == config
    assert (run_copy / "sft" / "summary.json").read_bytes() == sft_summary  # the finished stage is kept


def test_a_resume_is_compared_with_every_stage_already_started(run_copy):
    """The SFT stage finished under lr 0.002 (its config.yaml says so): resuming the run under 0.001 is refused,
    though the stage would not run again."""
    stage = run_copy / "sft" / "config.yaml"
    stage.write_text(stage.read_text().replace("lr: 0.001", "lr: 0.002"))
    before = snapshot(run_copy)
    r = runner.invoke(app, ["run", "--out", str(run_copy), "--resume"])
    assert r.exit_code == 2 and "sft.lr: 0.002 → 0.001" in r.output
    assert snapshot(run_copy) == before


def test_saved_configs_passed_back_with_config_reproduce_the_run(finished_run, tmp_path):
    r = runner.invoke(app, ["sft", "--config", str(finished_run / "sft" / "config.yaml"), "--out", str(tmp_path / "D2")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "D2" / "metrics.jsonl").read_text() == (finished_run / "sft" / "metrics.jsonl").read_text()
    r = runner.invoke(app, ["run", "--config", str(finished_run / "config.yaml"), "--out", str(tmp_path / "D3")])
    assert r.exit_code == 0, r.output
    for stage in ("sft", "grpo"):
        mine = [_no_timings(line) for line in (tmp_path / "D3" / stage / "metrics.jsonl").read_text().splitlines()]
        theirs = [_no_timings(line) for line in (finished_run / stage / "metrics.jsonl").read_text().splitlines()]
        assert mine == theirs, stage


def _no_timings(line: str) -> dict:
    import json

    return {k: v for k, v in json.loads(line).items() if k not in ("seconds", "sample_seconds")}


@pytest.mark.parametrize("cls, args", [
    (SFTConfig, ["max_steps=3"]), (SFTConfig, ["finetune=lora", "lora.r=4", "optimizer=adamw"]),
    (SFTConfig, ["policy=runs/x/model"]), (GRPOConfig, ["beta=0.1", "kl_estimator=k3_ratio"]),
    (GRPOConfig, ["advantage=turn", "gamma=0.9", "dynamic_sampling=true", "max_resample=2"]), (GRPOConfig, []),
])
def test_a_saved_config_is_accepted_back_as_a_config_file(cls, args, tmp_path):
    cfg = load_config(cls, None, args)
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    again = load_config(cls, path)  # refused before: lora.*, epochs, kl_estimator, gamma, … at their defaults
    assert again.saved() == cfg.saved() and again == cfg


def test_a_saved_config_of_an_older_version_with_unused_keys_still_resumes(tmp_path):
    """Older run directories saved every key, `lora.*` and `epochs` included; resuming compares what applies."""
    cfg = load_config(SFTConfig, None, ["max_steps=3"])
    old = {**cfg.model_dump(mode="json")}  # every key, as older versions wrote them
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert prepare_run_dir("SFT", cfg, tmp_path, resume=True) is None  # no checkpoint yet: starts under it


@pytest.mark.parametrize("command", [["run"], ["sft"], ["grpo"]])
def test_resume_of_a_directory_without_a_run_says_so_and_makes_nothing(command, tmp_path):
    for out in (tmp_path / "new", tmp_path):  # missing, and existing but empty
        r = runner.invoke(app, [*command, "--out", str(out), "--resume"])
        assert r.exit_code == 2 and f"nothing to resume: {out} holds no run" in _said(r), r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["run"], ["sft"], ["grpo", "--policy", "tiny"]])
def test_an_out_that_is_a_file_is_refused_before_work(command, tmp_path):
    f = tmp_path / "a-file"
    f.write_text("mine")
    r = runner.invoke(app, [*command, "--out", str(f)])
    assert r.exit_code == 2 and f"--out {f} is a file" in _said(r), r.output
    r = runner.invoke(app, [*command, "--out", str(f / "under")])
    assert r.exit_code == 2 and f"{f} is a file, so nothing can be written under it" in _said(r), r.output
    assert f.read_text() == "mine" and [p.name for p in tmp_path.iterdir()] == ["a-file"]
