"""LoRA through PEFT: checkpoints hold the adapter, the published model is the merge (plain transformers loads it),
a resumed run ends where an uninterrupted one does, and GRPO's KL reference is the adapter disabled."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from agentic_rl.config import load_config
from agentic_rl.policies import HFPolicy
from agentic_rl.train import sft as sft_module
from agentic_rl.train.grpo import GRPOConfig, train_grpo
from agentic_rl.train.sft import SFTConfig, train_sft

from ..conftest import SMALL_SFT

LORA = ["finetune=lora", "lora.r=4", "lora.alpha=8"]
SFT_ARGS = SMALL_SFT + LORA + ["demos=48", "max_steps=4", "batch_size=16", "checkpoint_every=2", "eval_every=0",
                               "eval_tasks=4", "final_eval_samples=1", "teacher_samples=1", "lr=3e-3"]


def _logits(path, x):
    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(path)(input_ids=x).logits


def test_lora_sft_checkpoints_the_adapter_publishes_the_merge_and_resumes_exactly(tmp_path, monkeypatch):
    cfg = load_config(SFTConfig, overrides=SFT_ARGS)
    full = tmp_path / "full"
    train_sft(cfg, full)
    ckpt = next((full / "checkpoints").glob("step-*"))
    assert (ckpt / "adapter_config.json").exists() and (ckpt / "adapter_model.safetensors").exists()
    assert not (ckpt / "model.safetensors").exists()  # the adapter alone, not a copy of the model
    x = torch.randint(5, 1000, (2, 40), generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(_logits(full / "init", x), _logits(full / "model", x))  # it trained
    # An interrupted run, stopped right after its step-2 checkpoint, then resumed: the same model and losses.
    real = sft_module.save_checkpoint

    def stop_after_step_2(out, step, *args, **kwargs):
        real(out, step, *args, **kwargs)
        if step == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(sft_module, "save_checkpoint", stop_after_step_2)
    with pytest.raises(KeyboardInterrupt):
        train_sft(cfg, tmp_path / "half")
    monkeypatch.undo()
    train_sft(cfg, tmp_path / "half", resume=True)
    a = AutoModelForCausalLM.from_pretrained(full / "model")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "half" / "model")
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name
    la, lb = ([json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()]
              for d in (full, tmp_path / "half"))
    assert la == lb and len(la) == 4


def test_lora_grpo_uses_the_disabled_adapter_as_its_kl_reference(trained_dir, tmp_path, monkeypatch):
    loads = []
    real_init = HFPolicy.__init__

    def counting(self, path, *args, **kwargs):
        loads.append(kwargs.get("model") is None)
        real_init(self, path, *args, **kwargs)

    monkeypatch.setattr(HFPolicy, "__init__", counting)
    cfg = load_config(GRPOConfig, overrides=LORA + [f"policy={trained_dir}", "steps=2", "tasks_per_step=4",
                                                    "group_size=4", "max_new_tokens=40", "eval_tasks=4",
                                                    "micro_batch_size=8", "beta=0.05", "lr=1e-3", "eval_every=0"])
    train_grpo(cfg, tmp_path / "g")
    assert sum(loads) == 1  # one model loaded from disk: no frozen copy beside it
    lines = [json.loads(x) for x in (tmp_path / "g" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # B = 0 at the start: the adapter changes nothing
    assert lines[1]["kl_ref"] > 0  # after one update the policy has moved away from its reference
    x = torch.randint(5, 1000, (2, 40), generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(_logits(trained_dir, x), _logits(tmp_path / "g" / "model", x))


def test_a_fresh_adapter_is_drawn_from_the_run_seed(tiny_dir):
    """The same run starts from the same adapter (A is random; B = 0), and drawing it leaves torch's global stream
    as it was."""
    from agentic_rl.train.lora import LoRASettings, add_adapter

    def adapter(seed):
        model = AutoModelForCausalLM.from_pretrained(tiny_dir)
        add_adapter(model, LoRASettings(r=4), seed)
        return {k: v for k, v in model.state_dict().items() if "lora_A" in k}

    before = torch.random.get_rng_state()
    a, b, c = adapter(0), adapter(0), adapter(1)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert a and all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
