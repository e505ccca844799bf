import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentic_rl.config import ConfigError, load_config
from agentic_rl.device import autocast
from agentic_rl.envs import make_env
from agentic_rl.policies import TeacherPolicy
from agentic_rl.runtime.render import Rendered, Renderer
from agentic_rl.runtime.rollout import run_episodes
from agentic_rl.train.logprobs import sequence_logprobs
from agentic_rl.train.lora import Trainee
from agentic_rl.train.sft import SFTConfig, build_optimizers, check_turn_budget, train_sft

from ..conftest import SMALL_SFT


@pytest.mark.parametrize(("optimizer", "precision"), [("adamw", "fp32"), ("muon", "fp32"), ("muon", "bf16")])
def test_sft_loss_falls_on_a_small_fixed_batch(tiny_dir, env, optimizer, precision):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    r = Renderer(AutoTokenizer.from_pretrained(tiny_dir))
    demos = run_episodes(lambda: make_env("tool_use"), env.tasks("train", 8), TeacherPolicy())
    data = [r.render(d.messages) for d in demos]
    opts = build_optimizers(Trainee(model), SFTConfig(optimizer=optimizer, lr=3e-3, weight_decay=0.0))

    def loss_fn():
        with autocast(precision, torch.device("cpu")):
            logp, _ = sequence_logprobs(model, [d.ids for d in data], masks=[d.mask for d in data])
        return -logp.sum() / sum(sum(d.mask) for d in data)

    first = loss_fn().item()
    for _ in range(30):
        loss = loss_fn()
        loss.backward()
        for opt in opts:
            opt.step()
            opt.zero_grad()
    assert loss_fn().item() < 0.5 * first


def test_muon_takes_the_decoder_matrices_and_adamw_everything_else(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    adamw, muon = build_optimizers(Trainee(model), SFTConfig(optimizer="muon"))
    assert isinstance(adamw, torch.optim.AdamW) and isinstance(muon, torch.optim.Muon)
    names = {id(p): n for n, p in model.named_parameters()}
    in_muon = {names[id(p)] for g in muon.param_groups for p in g["params"]}
    in_adamw = {names[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert in_muon.isdisjoint(in_adamw) and in_muon | in_adamw == set(names.values())
    assert "model.layers.0.self_attn.q_proj.weight" in in_muon and "model.layers.1.mlp.down_proj.weight" in in_muon
    # the embedding (tied to the output layer), norms and biases are not hidden-state matrices: AdamW
    assert {"model.embed_tokens.weight", "model.norm.weight", "model.layers.0.self_attn.q_proj.bias"} <= in_adamw
    assert all(n.startswith("model.layers.") and n.endswith("proj.weight") for n in in_muon)


def test_sft_end_to_end_writes_summary_and_a_plain_hf_checkpoint(tmp_path):
    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=64", "max_steps=6", "batch_size=16",
                                                        "eval_every=3", "eval_tasks=8", "checkpoint_every=3"])
    s = train_sft(cfg, tmp_path / "run")
    for key in ("env", "policy", "wall_seconds", "eval", "teacher_eval"):
        assert key in s
    for part in ("eval", "teacher_eval"):
        assert {"success_rate", "mean_reward", "tool_calls_per_episode"} <= set(s[part])
    # both are averaged over several sampled episodes per task (the teacher: draws of its mistakes), on the same tasks;
    # the periodic evaluations run once per task
    assert s["eval"]["episodes"] == 8 * cfg.final_eval_samples and s["teacher_eval"]["episodes"] == 8 * cfg.teacher_samples
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == s
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3, 4, 5, 6] and lines[2]["eval"]["episodes"] == 8
    assert (tmp_path / "run" / "config.yaml").read_text() == cfg.open_env()[0].to_yaml()  # as it ran: the env's turn budget in
    # checkpoint round-trip: the saved model gives the same logits as a reload of itself, with plain transformers
    m = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model")
    ck = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoints" / "step-0000006")
    x = torch.arange(5, 25)[None]
    assert torch.equal(m(input_ids=x).logits, ck(input_ids=x).logits)
    with pytest.raises(ConfigError, match="--resume"):  # a run directory is never silently overwritten
        train_sft(cfg, tmp_path / "run")


def test_unknown_config_key_lists_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        load_config(SFTConfig, overrides=["learning_rate=1"])
    assert "unknown key 'learning_rate'" in str(e.value) and "lr" in str(e.value) and "micro_batch_size" in str(e.value)
    with pytest.raises(ConfigError, match=r"unknown key 'tiny.depth'.*hidden"):
        load_config(SFTConfig, overrides=["tiny.depth=3"])
    with pytest.raises(ConfigError, match="epochs"):
        load_config(SFTConfig, overrides=["epochs=many"])


def test_sft_refuses_demonstration_turns_longer_than_max_new_tokens(tmp_path):
    check_turn_budget([Rendered([1] * 9, [0, 0, 1, 1, 1, 0, 1, 1, 0])], 3)  # turns of 3 and 2 tokens fit
    with pytest.raises(ConfigError, match=r"turn of 3 tokens.*max_new_tokens is 2.*max_new_tokens=3"):
        check_turn_budget([Rendered([1] * 9, [0, 0, 1, 1, 1, 0, 1, 1, 0])], 2)
    # End to end: refused after the demonstrations are rendered, before any training step or checkpoint.
    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=16", "max_steps=2", "eval_tasks=4", "max_new_tokens=4"])
    with pytest.raises(ConfigError, match="max_new_tokens is 4"):
        train_sft(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


def test_resume_refuses_a_different_config(tmp_path):
    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=32", "max_steps=2", "eval_tasks=4"])
    train_sft(cfg, tmp_path / "run")
    other = load_config(SFTConfig, overrides=SMALL_SFT + ["demos=32", "max_steps=2", "eval_tasks=4", "lr=1e-4"])
    with pytest.raises(ConfigError, match=r"lr: 0\.002 → 0\.0001"):
        train_sft(other, tmp_path / "run", resume=True)


def _sft_cmd(out):
    return [sys.executable, "-m", "agentic_rl.cli", "sft", "--out", str(out), *SMALL_SFT, "demos=96",
            "max_steps=10", "batch_size=16", "checkpoint_every=2", "eval_every=0", "eval_tasks=6", "seed=3"]


def test_sft_killed_mid_run_resumes_to_the_same_result(tmp_path):
    # Default threads, fresh processes: each process's first parallel cos/exp must not take oneMKL's racy
    # low-accuracy kernel (numerics.py); with one thread per process this test could not see that.
    env = dict(os.environ)
    full = tmp_path / "full"
    subprocess.run(_sft_cmd(full), check=True, capture_output=True, env=env)
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_sft_cmd(killed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:  # kill -9 once a checkpoint past step 4 exists, mid-way through the run
        latest = killed / "checkpoints" / "LATEST"
        if latest.exists() and int(latest.read_text().strip().split("-")[1]) >= 4:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "summary.json").exists(), "the run finished before it could be killed"
    subprocess.run(_sft_cmd(killed) + ["--resume"], check=True, capture_output=True, env=env)
    # Exactly equal: every parameter, and the loss curve.
    a = AutoModelForCausalLM.from_pretrained(full / "model")
    b = AutoModelForCausalLM.from_pretrained(killed / "model")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    la = [json.loads(x)["loss"] for x in (full / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (killed / "metrics.jsonl").read_text().splitlines()]
    assert la == lb and len(la) == 10
