"""Several training processes (torchrun, gloo on the CPU) take the step one process takes on the same global batch;
rank 0 alone writes, and a killed run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.train.distributed import DataParallel

from ..conftest import SMALL_SFT

# A random init (no induction heads): under Adam's first step a weight whose gradient is at float-noise level moves
# by ±lr whatever its sign, so the comparison needs gradients above the noise, which the induction init's saturated
# first-layer attention does not give.
SFT_ARGS = [*SMALL_SFT, "tiny.induction_init=false", "demos=64", "batch_size=16", "micro_batch_size=4",
            "eval_every=0", "eval_tasks=6", "final_eval_samples=1", "teacher_samples=1", "seed=3"]
GRPO_ARGS = ["steps=1", "tasks_per_step=4", "group_size=4", "eval_tasks=4", "max_new_tokens=32", "micro_batch_size=4",
             "eval_every=0", "seed=1"]


def _cmd(processes: int, *args: str) -> list[str]:
    if processes == 1:
        return [sys.executable, "-m", "agentic_rl.cli", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "agentic_rl.cli", *args]


def _run(processes: int, *args: str) -> None:
    p = subprocess.run(_cmd(processes, *args), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(model_dir / "model.safetensors")


def _relative_gap(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> float:
    """|a − b| over |a − start|: how far apart two updates of `start` ended, relative to the update's size."""
    gap = sum(float(((a[k] - b[k]).double() ** 2).sum()) for k in a) ** 0.5
    step = sum(float(((a[k] - start[k]).double() ** 2).sum()) for k in a) ** 0.5
    assert step > 0, "the step changed no weight"
    return gap / step


def _metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_two_processes_take_the_step_one_process_takes(tmp_path, trained_dir):
    # SFT (Muon + AdamW, the default): one step on the same 16 demonstrations, 8 rows on each rank.
    _run(1, "sft", "--out", str(tmp_path / "one"), *SFT_ARGS, "max_steps=1")
    _run(2, "sft", "--out", str(tmp_path / "two"), *SFT_ARGS, "max_steps=1")
    one, two = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert len(two) == 1, "only rank 0 writes metrics"  # a second writer would add its own line
    for key in ("loss", "grad_norm"):  # the loss over the whole batch and the norm of the summed gradient
        assert two[0][key] == pytest.approx(one[0][key], rel=1e-5), key
    start = _weights(tmp_path / "one" / "init")
    assert _relative_gap(_weights(tmp_path / "one" / "model"), _weights(tmp_path / "two" / "model"), start) < 1e-3
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["processes"] == {"world_size": 2, "backend": "gloo", "threads_per_rank": 1,
                                    "omp_wait_policy": "PASSIVE"}
    assert summary["eval"]["episodes"] == 6  # evaluation split across the ranks and gathered whole

    # GRPO (AdamW): each rank samples half of the tasks; every rank gets all 16 trajectories, trains on its 8 rows.
    _run(1, "grpo", "--policy", str(trained_dir), "--out", str(tmp_path / "g1"), *GRPO_ARGS)
    _run(2, "grpo", "--policy", str(trained_dir), "--out", str(tmp_path / "g2"), *GRPO_ARGS)
    g1, g2 = _metrics(tmp_path / "g1")[0], _metrics(tmp_path / "g2")[0]
    assert g1["trajectories_trained"] == g2["trajectories_trained"] == 16
    for key in ("reward_mean", "reward_std", "tokens_per_traj"):  # the same trajectories, sampled in two places
        assert g2[key] == g1[key], key
    for key in ("loss", "entropy"):
        assert g2[key] == pytest.approx(g1[key], rel=1e-5), key
    # The trained model's first-layer attention (induction init) has float-noise gradients, which Adam's first step
    # turns into ±lr moves of either sign: a few weights, far under 1 % of the update.
    assert _relative_gap(_weights(tmp_path / "g1" / "model"), _weights(tmp_path / "g2" / "model"),
                         _weights(trained_dir)) < 5e-3


def test_a_killed_two_process_run_resumes_to_the_same_result(tmp_path):
    args = [*SFT_ARGS, "max_steps=8", "checkpoint_every=2"]
    _run(2, "sft", "--out", str(tmp_path / "full"), *args)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(2, "sft", "--out", str(killed), *args), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    latest = killed / "checkpoints" / "LATEST"
    while time.time() < deadline:  # kill -9 the launcher and both ranks once a checkpoint past step 2 exists
        if latest.exists() and int(latest.read_text().strip().split("-")[1]) >= 2:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), "the run finished before it could be killed"
    _run(2, "sft", "--out", str(killed), *args, "--resume")
    a, b = _weights(tmp_path / "full" / "model"), _weights(killed / "model")
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert [r["loss"] for r in _metrics(tmp_path / "full")] == [r["loss"] for r in _metrics(killed)]


def test_one_process_is_a_world_of_one():
    dp = DataParallel.start("cpu")
    assert (dp.rank, dp.world, dp.main) == (0, 1, True)
    assert dp.shard([1, 2, 3]) == [1, 2, 3] and dp.rows(3) == [0, 1, 2] and dp.gather([1]) == [1]
    assert dp.on_main(lambda x: x + 1, 1) == 2 and dp.sum({"a": 1.0}) == {"a": 1.0}


def test_shares_cover_the_items_once_in_order():
    items = list(range(7))
    for world in (2, 3, 8):
        ranks = [DataParallel(r, world) for r in range(world)]
        assert [x for dp in ranks for x in dp.shard(items)] == items  # gathered in rank order: the same list
        assert sorted(x for dp in ranks for x in dp.rows(7)) == items


def test_the_whole_ladder_refuses_several_processes(tmp_path):
    env = dict(os.environ, WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")
    p = subprocess.run([sys.executable, "-m", "agentic_rl.cli", "run", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2 and "torchrun --nproc_per_node N -m agentic_rl.cli sft" in p.stdout + p.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("key", ["agent=examples.openai_agent:run", "rollout.backend=ray", "rollout.engine=gateway"])
def test_grpo_refuses_what_several_processes_cannot_share_yet(tmp_path, monkeypatch, key):
    from agentic_rl.config import ConfigError, load_config
    from agentic_rl.train.grpo import GRPOConfig, train_grpo

    monkeypatch.setenv("WORLD_SIZE", "2")  # before any process group is joined: nothing waits for other ranks
    with pytest.raises(ConfigError, match="several training processes .* not with " + key.split("=")[0]):
        train_grpo(load_config(GRPOConfig, overrides=[key]), tmp_path / "g")
    assert not (tmp_path / "g").exists()
