"""bf16 autocast (`precision=bf16`): the decoder's products run in bf16, and the vocabulary projection — what logprobs
and the loss are read off — still runs in fp32."""

from __future__ import annotations

import json
import math

import torch
from transformers import AutoModelForCausalLM

from agentic_rl.config import load_config
from agentic_rl.device import autocast
from agentic_rl.train.logprobs import sequence_logprobs
from agentic_rl.train.sft import SFTConfig, train_sft

from .conftest import SMALL_SFT

CPU = torch.device("cpu")


def test_autocast_context_is_bf16_or_nothing():
    with autocast("bf16", CPU):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast("fp32", CPU):
        assert not torch.is_autocast_enabled("cpu")


def test_bf16_logprobs_read_fp32_logits_and_stay_close_to_fp32(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    model.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
    torch.manual_seed(0)
    prefix = torch.randint(5, 1000, (40,)).tolist()
    seqs = [prefix + torch.randint(5, 1000, (n,)).tolist() for n in (7, 12, 3)]
    masks = [[0] * 30 + [1] * (len(s) - 30) for s in seqs]
    ref, _ = sequence_logprobs(model, seqs, masks=masks)
    with autocast("bf16", CPU):
        low, _ = sequence_logprobs(model, seqs, masks=masks)
        x = torch.randn(4, model.config.hidden_size)
        assert model.model.layers[0].mlp.up_proj(x).dtype == torch.bfloat16  # the decoder's products are bf16
    hidden, logits = seen[-1]
    assert hidden.dtype == logits.dtype == low.dtype == torch.float32
    weight = model.get_output_embeddings().weight
    assert torch.equal(logits, torch.nn.functional.linear(hidden, weight))  # the projection itself in fp32
    assert (low != ref).any()  # the decoder did run in bf16 ...
    assert torch.allclose(low, ref, rtol=0.02, atol=0.01)  # ... to bf16's rounding (~1 % of a logprob)


def test_sft_trains_in_bf16_through_the_shared_prefix(tmp_path):
    cfg = load_config(SFTConfig, overrides=SMALL_SFT + ["precision=bf16", "demos=32", "max_steps=4", "batch_size=16",
                                                        "lr=3e-3", "eval_every=0", "eval_tasks=2",
                                                        "final_eval_samples=1", "teacher_samples=1"])
    train_sft(cfg, tmp_path / "run")
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in lines]
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    weights = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "model").model.layers[0].mlp.up_proj.weight
    assert weights.dtype == torch.float32  # the weights stay fp32; only the products ran in bf16


def test_device_and_precision_resolve_and_reject_what_is_not_there():
    from agentic_rl.device import resolve_device, resolve_precision, sampling_dtype

    gpu = torch.cuda.is_available()
    assert resolve_device("auto").type == ("cuda" if gpu else "cpu")
    assert resolve_device("cpu") == CPU
    assert resolve_precision("auto", CPU) == "fp32" and resolve_precision("bf16", CPU) == "bf16"
    assert sampling_dtype(CPU) == torch.float32  # bf16 weights only on a GPU
    for bad, why in (("tpu", "not one of auto, cpu, cuda"),) + ((("cuda", "torch sees no CUDA GPU"),) if not gpu else ()):
        try:
            resolve_device(bad)
        except ValueError as e:
            assert why in str(e)
        else:
            raise AssertionError(f"device={bad} was accepted")


def test_a_device_that_is_not_there_is_a_clear_cli_error(tmp_path, tiny_dir):
    import pytest
    from typer.testing import CliRunner

    from agentic_rl.cli import app

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    runner = CliRunner()
    r = runner.invoke(app, ["sft", "--out", str(tmp_path / "s"), *SMALL_SFT, "device=cuda", "demos=4", "max_steps=1"])
    assert r.exit_code == 2 and "torch sees no CUDA GPU" in r.output and "device=cpu" in r.output, r.output
    r = runner.invoke(app, ["sft", "--out", str(tmp_path / "s2"), "device=tpu"])
    assert r.exit_code == 2 and "device" in r.output and "'cuda'" in r.output, r.output
    r = runner.invoke(app, ["rollout", "--policy", str(tiny_dir), "--device", "cuda", "--n", "1"])
    assert r.exit_code == 2 and "torch sees no CUDA GPU" in r.output, r.output
