"""Every bad input of docs/bad-input.md gets one clear line naming the problem and what is valid, exit 2, before any
work and without a traceback; outputs are written whole, with the modes the umask gives."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app

runner = CliRunner()

# (command line, what its one line must say). {tmp} is a fresh directory, {file} a file in it, {list} a JSON file
# holding a list, {dict} one holding an object that is not an eval result.
BAD = [
    # values: the key, the value and what is valid
    ("sft max_steps=0", "max_steps: input should be greater than or equal to 1 (got 0)"),
    ("grpo steps=0", "steps: input should be greater than or equal to 1 (got 0)"),
    ("sft epochs=0", "epochs: input should be greater than 0 (got 0)"),
    ("sft demos=0", "demos: input should be greater than or equal to 1 (got 0)"),
    ("sft batch_size=0", "batch_size: input should be greater than or equal to 1 (got 0)"),
    ("grpo micro_batch_size=0", "micro_batch_size: input should be greater than or equal to 1 (got 0)"),
    ("grpo tasks_per_step=0", "tasks_per_step: input should be greater than or equal to 1 (got 0)"),
    ("sft checkpoint_every=0", "checkpoint_every: input should be greater than or equal to 1 (got 0)"),
    ("grpo eval_every=-1", "eval_every: input should be greater than or equal to 0 (got -1)"),
    ("sft eval_tasks=0", "eval_tasks: input should be greater than or equal to 1 (got 0)"),
    ("run eval_tasks=0", "eval_tasks: input should be greater than or equal to 1 (got 0)"),
    ("rollout --policy teacher --n 0", "n: input should be greater than or equal to 1 (got 0)"),
    ("eval --policy teacher --n 0", "n: input should be greater than or equal to 1 (got 0)"),
    ("eval --policy teacher --k 0", "k: input should be greater than or equal to 1 (got 0)"),
    ("doctor --n 0", "n: input should be greater than or equal to 1 (got 0)"),
    ("probe-hacks --n 0", "n: input should be greater than or equal to 1 (got 0)"),
    ("sft lr=-1", "lr: input should be greater than 0 (got -1)"),
    ("grpo lr=0", "lr: input should be greater than 0 (got 0)"),
    ("run sft.lr=-1", "sft.lr: input should be greater than 0 (got -1)"),
    ("grpo group_size=1", "group_size: GRPO compares the trajectories of one task with each other, so a group "
                          "needs at least 2 (got 1)"),
    ("grpo temperature=0", "temperature: input should be greater than 0 (got 0)"),
    ("sft seed=-1", "seed: input should be greater than or equal to 0 (got -1)"),
    ("sft warmup_ratio=2", "warmup_ratio: input should be less than or equal to 1 (got 2)"),
    ("sft optimizer=sgd", "optimizer: input should be 'adamw' or 'muon' (got 'sgd')"),
    ("sft tiny.hidden=66", "tiny.hidden (66) must be a multiple of tiny.heads (4)"),
    ("sft env_args.fault_rate=abc", "env_args.fault_rate: input should be a valid number, unable to parse string as "
                                    "a number (got 'abc'); env tool_use takes fault_rate: float"),
    ("rollout --policy teacher env_args.max_turns=x", "env_args.max_turns: input should be a valid integer"),
    ("rollout --env math --policy teacher env_args.mode=3", "env_args.mode: input should be a valid string (got 3)"),
    # keys and options: what to type instead
    ("sft --lr 1e-3", "no option --lr: lr is a config key, given as key=value: lr=1e-3"),
    ("run --grpo.steps=3", "no option --grpo.steps: grpo.steps is a config key, given as key=value: grpo.steps=3"),
    ("run sft.nosuch=1", "unknown key 'sft.nosuch'; valid keys: env, env_args, seed, finetune"),
    ("sft --env math env=sql", "env is given twice, as --env math and env=sql; give one of them"),
    ("sft --policy tiny policy=smollm2-135m", "policy is given twice"),
    ("run --seed 1 seed=2", "seed is given twice, as --seed 1 and seed=2"),
    ("grpo report_to=[nosuch]", "report_to.0: input should be 'tensorboard' or 'wandb' (got 'nosuch')"),
    # output paths: before the work whose result they would hold
    ("rollout --policy teacher --json {tmp}", "--json {tmp} is a directory; give the path of a file to write"),
    ("eval --policy teacher --json {tmp}", "--json {tmp} is a directory"),
    ("doctor --json {tmp}", "--json {tmp} is a directory"),
    ("probe-hacks --env math --json {tmp}", "--json {tmp} is a directory"),
    ("eval --policy teacher --json {file}/x.json", "--json {file}/x.json: {file} is a file, so nothing can be "
                                                   "written under it"),
    ("report {tmp} --out {tmp}", "--out {tmp} is a directory; give the path of a file to write"),
    ("sft --out {file}", "--out {file} is a file; give a directory"),
    # eval --compare: valid JSON that is not an eval result
    ("eval --compare {list} {list}", "{list} is not an agentic-rl eval result (a JSON file from agentic-rl eval "
                                     "--json): it holds a JSON list, not an object"),
    ("eval --compare {dict} {dict}", "{dict} is not an agentic-rl eval result (a JSON file from agentic-rl eval "
                                     "--json): its schema is None"),
    ("eval --compare {tmp} {tmp}", "{tmp} is a directory, not an eval result"),
    # custom envs: where it looked
    ("doctor --env nowhere_here:MyEnv", "cannot load env 'nowhere_here:MyEnv': no module named 'nowhere_here' in the "
                                        "current directory"),
]


def _paths(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "dict.json").write_text('{"env": "tool_use"}')
    return {"tmp": str(tmp_path), "file": str(tmp_path / "a-file"), "list": str(tmp_path / "list.json"),
            "dict": str(tmp_path / "dict.json")}


@pytest.mark.parametrize("command, says", BAD, ids=[c for c, _ in BAD])
def test_bad_input_is_one_clear_line_before_any_work(command, says, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # default output paths (runs/…) land here, where "nothing written" is checked
    paths = _paths(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = runner.invoke(app, command.format(**paths).split(), terminal_width=400)
    out = r.output.strip()
    assert r.exit_code == 2, out
    assert out.startswith("error: ") and "\n" not in out, out  # one line
    assert says.format(**paths) in out, out
    assert "Traceback" not in out and "Config:" not in out and "Config" not in out.split(":")[1], out
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_a_read_only_file_system_is_refused_before_work(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only file system needs root")
    ro = tmp_path / "ro"
    ro.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        for command, what in ((["sft", "--out", str(ro / "run")], "--out"),
                              (["eval", "--policy", "teacher", "--json", str(ro / "e.json")], "--json"),
                              (["rollout", "--policy", "teacher", "--json", str(ro / "t.json")], "--json")):
            r = runner.invoke(app, command, terminal_width=400)
            assert r.exit_code == 2 and f"{what} {ro}/" in r.output, r.output
            assert f"{ro} is not writable (no permission, or a read-only file system)" in r.output
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_what_a_user_would_type_is_accepted():
    from agentic_rl.config import load_config
    from agentic_rl.train.grpo import GRPOConfig

    assert load_config(GRPOConfig, None, ["report_to=tensorboard"]).report_to == ["tensorboard"]  # one sink
    assert load_config(GRPOConfig, None, ["env_args.fault_rate=0.3"]).env_args == {"fault_rate": 0.3}
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.startswith("agentic-rl 0.")


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    from agentic_rl.atomic import atomic_write_json, atomic_write_text

    path = tmp_path / "summary.json"
    atomic_write_text(path, "old\n")
    with pytest.raises(TypeError):
        atomic_write_json(path, {"not json": object()})
    with pytest.raises(UnicodeEncodeError):
        atomic_write_text(path, "\udc80")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["summary.json"]


def test_outputs_are_as_readable_as_the_umask_says(tmp_path, tiny_dir):
    """Files 0644 and directories 0755 under umask 022, 0640/0750 under 027: not mkstemp's 0600 or safetensors'."""
    from agentic_rl.atomic import atomic_write_text
    from agentic_rl.policies import HFPolicy
    from agentic_rl.runtime.trajectory import save_jsonl
    from agentic_rl.train.checkpoint import save_checkpoint

    policy = HFPolicy(tiny_dir)
    for mask, file_mode, dir_mode in ((0o022, 0o644, 0o755), (0o027, 0o640, 0o750)):
        old = os.umask(mask)
        try:
            out = tmp_path / f"m{mask:o}"
            atomic_write_text(out / "config.yaml", "a: 1\n")
            save_jsonl([], out / "demos.jsonl")
            save_checkpoint(out, 1, policy.model, policy.tokenizer, {"step": 1}, "a: 1\n")
        finally:
            os.umask(old)
        files = [p for p in out.rglob("*") if p.is_file()]
        assert {"config.yaml", "demos.jsonl", "model.safetensors", "trainer_state.pt"} <= {p.name for p in files}
        for p in out.rglob("*"):
            want = file_mode if p.is_file() else dir_mode
            assert stat.S_IMODE(p.stat().st_mode) == want, (oct(mask), p, oct(p.stat().st_mode))


def test_eval_compare_accepts_real_results(tmp_path):
    out = tmp_path / "e.json"
    r = runner.invoke(app, ["eval", "--policy", "teacher", "--n", "3", "--k", "1", "--no-robustness", "--json",
                            str(out)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", "--compare", str(out), str(out)])
    assert r.exit_code == 0 and "no regressions" in r.output
    json.loads(out.read_text())
