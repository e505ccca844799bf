"""The grouped learner (each group's prompt once) gives the per-row path's loss and gradients, on the tiny model and a
random small Llama, with the reference model's KL in the loss."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from agentic_rl.runtime.trajectory import Trajectory
from agentic_rl.train.grpo import GRPOConfig
from agentic_rl.train.learner import learner_plan, loss_backward


def _batch(vocab: int, tasks: int = 4, group: int = 3, seed: int = 0) -> tuple[list[Trajectory], list[torch.Tensor]]:
    """Trajectories as GRPO's learner gets them: a system prefix every row shares, a prompt per task that its G
    samples share token for token, then each sample's own turns (policy tokens masked in, a tool reply masked out)."""
    rng = random.Random(seed)
    system = [rng.randrange(5, vocab) for _ in range(20)]
    trajs, adv = [], []
    for k in range(tasks):
        prompt = system + [rng.randrange(5, vocab) for _ in range(rng.randint(30, 60))]
        for g in range(group):
            turn = [rng.randrange(5, vocab) for _ in range(rng.randint(4, 25))]
            tool = [rng.randrange(5, vocab) for _ in range(rng.randint(0, 8))]
            answer = [rng.randrange(5, vocab) for _ in range(rng.randint(2, 6))] if tool else []
            ids = prompt + turn + tool + answer
            mask = [0] * len(prompt) + [1] * len(turn) + [0] * len(tool) + [1] * len(answer)
            logprobs = [-rng.uniform(0.5, 4.0) if m else 0.0 for m in mask]
            trajs.append(Trajectory("t", f"task{k}", "k", g, [], [0.0], 0.0, "ok", False, ids=ids, mask=mask,
                                    logprobs=logprobs))
            adv.append(torch.full((len(ids),), rng.uniform(-1.5, 1.5), dtype=torch.float64))
    return trajs, adv


def _grads(model, ref, trajs, adv, cfg):
    model.zero_grad(set_to_none=True)
    stats = {"loss": 0.0, "clip_frac": 0.0, "kl_old": 0.0, "entropy": 0.0, "kl_ref": 0.0}
    plan = learner_plan(trajs, list(range(len(trajs))), cfg)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # the loss's own tensors (mask, old logprobs) too
    try:
        loss_backward(model, ref, trajs, adv, plan, cfg, sum(sum(t.mask) for t in trajs), stats)
    finally:
        torch.set_default_dtype(default)
    return plan, stats, [p.grad.clone() for p in model.parameters()]


def _llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512))


@pytest.mark.parametrize("which", ["tiny", "llama"])
def test_grouped_prompts_give_the_per_row_loss_and_gradients(which, tiny_dir):
    # float64, as the shared-prefix test: the comparison then shows a logic difference, not rounding (the vocabulary
    # projection stays fp32 by design, so the bounds are fp32's, ~1e-8 relative differences measured)
    model = (AutoModelForCausalLM.from_pretrained(tiny_dir) if which == "tiny" else _llama()).double()
    ref = (AutoModelForCausalLM.from_pretrained(tiny_dir) if which == "tiny" else _llama()).double()
    with torch.no_grad():  # a reference that differs from the policy, so the KL term has a gradient
        for p in ref.parameters():
            p.add_(0.01 * torch.randn_like(p))
    trajs, adv = _batch(model.config.vocab_size)
    base = dict(beta=0.05, micro_batch_size=4, micro_batch_tokens=None, env="tool_use")
    plan_g, stats_g, grads_g = _grads(model, ref, trajs, adv, GRPOConfig(shared_prompt="group", **base))
    plan_b, stats_b, grads_b = _grads(model, ref, trajs, adv, GRPOConfig(shared_prompt="batch", **base))
    assert len(plan_g) == 4 and all(len({trajs[i].task_id for mb in part for i in mb}) == 1 for part in plan_g)
    assert any(len(part) > 1 for part in plan_g)  # a part cut to pad little: its prompt still runs once for all
    assert len(plan_b) == 1 and any(len({trajs[i].task_id for i in mb}) > 1 for mb in plan_b[0])  # rows mixed
    for key in stats_g:
        assert stats_g[key] == pytest.approx(stats_b[key], rel=1e-7, abs=1e-12), key
    assert stats_g["kl_ref"] > 0 and stats_g["loss"] != 0
    for g, b in zip(grads_g, grads_b):  # each parameter's gradient, as a whole, to fp32 rounding
        assert float((g - b).norm()) <= 1e-6 * float(b.norm()) + 1e-12
    assert max(float(g.abs().max()) for g in grads_g) > 1e-4  # a real gradient, not zeros compared with zeros
