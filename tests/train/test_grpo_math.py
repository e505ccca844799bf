import math

import pytest
import torch

from agentic_rl.train.grpo_math import (
    advantages,
    batch_loss,
    clipped_surrogate,
    kl_k3,
    turn_advantages,
)


def test_group_advantages_on_hand_computed_groups():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5])
    groups = list(r.split(4))  # second group: zero variance
    a = torch.cat(advantages(groups))
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 1, 0]
    assert a[:4].tolist() == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 2)
    assert a[4:].tolist() == [0.0, 0.0, 0.0, 0.0] and not torch.isnan(a).any()
    none = torch.cat(advantages(groups, scale="none"))
    assert none.tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5, 0, 0, 0, 0])
    batch = torch.cat(advantages(groups, scale="batch"))
    assert batch.tolist() == pytest.approx((none / (r.std() + 1e-4)).tolist())
    assert advantages([torch.tensor([0.3])])[0].tolist() == [0.0]
    with pytest.raises(ValueError, match="group, batch or none"):
        advantages(groups, scale="rank")


def test_turn_advantages_blame_the_wasted_turn():
    # group of 2: A wastes a call in turn 2 (−0.1) then answers (+1); B answers at once (+1)
    a, b = turn_advantages([[0.0, -0.1, 1.0], [1.0]], group_size=2, gamma=1.0)
    flat = torch.tensor([0.0, -0.1, 1.0, 1.0], dtype=torch.float64)
    m, s = flat.mean().item(), flat.std().item()
    n = [(x - m) / (s + 1e-4) for x in (0.0, -0.1, 1.0)]
    assert a == pytest.approx([n[0] + n[1] + n[2], n[1] + n[2], n[2]])
    assert b == pytest.approx([(1.0 - m) / (s + 1e-4)])
    assert a[1] < a[2]  # the wasted turn gets less credit than the answer after it
    (c,) = turn_advantages([[1.0, 1.0]], 1, gamma=0.5)
    assert c == pytest.approx([0.0, 0.0])  # all-equal rewards normalise to 0
    (d, _) = turn_advantages([[0.0, 1.0], [0.0, 0.0]], 2, gamma=0.5)
    flat = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)
    m, s = flat.mean().item(), flat.std().item()
    assert d[0] == pytest.approx((0 - m) / (s + 1e-4) + 0.5 * (1 - m) / (s + 1e-4))


def test_clipped_loss_gradient_raises_the_logprob_of_a_positive_advantage_token():
    for adv, sign in ((1.0, +1), (-1.0, -1)):
        logp = torch.tensor([-1.2], requires_grad=True)
        loss, _ = clipped_surrogate(logp, torch.tensor([-1.2]), torch.tensor([adv]), 0.2, 0.28)
        loss.sum().backward()
        # gradient descent moves logp against the gradient: up for A > 0, down for A < 0
        assert -logp.grad.item() * sign > 0


def test_clipping_stops_the_gradient_beyond_the_trust_region():
    old = torch.tensor([0.0, 0.0])
    logp = torch.log(torch.tensor([1.5, 0.5])).requires_grad_()  # ratios 1.5 and 0.5
    loss, clipped = clipped_surrogate(logp, old, torch.tensor([1.0, -1.0]), 0.2, 0.28)
    assert clipped.tolist() == [True, True]
    assert loss.tolist() == pytest.approx([-1.28, 0.8])
    loss.sum().backward()
    assert logp.grad.tolist() == [0.0, 0.0]


def test_kl_k3_is_non_negative_and_zero_at_equality():
    torch.manual_seed(0)
    a, b = torch.randn(1000), torch.randn(1000)
    assert (kl_k3(a, b) >= 0).all()
    assert kl_k3(a, a).abs().max() == 0
    # unbiased: E_{x~p}[k3] equals KL(p‖q) for sampled x
    p, q = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    x = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    est = kl_k3(torch.log(p[x]), torch.log(q[x])).mean().item()
    assert est == pytest.approx((p * (p / q).log()).sum().item(), abs=5e-3)


def test_each_loss_aggregation_on_a_hand_computed_batch():
    per_token = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    whole = {how: batch_loss(per_token, mask, how, n_seqs=2, n_tokens=4, max_new_tokens=4).item()
             for how in ("seq_mean", "token_mean", "constant")}
    assert whole == pytest.approx({"seq_mean": (2.0 + 4.0) / 2, "token_mean": 10.0 / 4, "constant": 10.0 / 8})
    # micro-batches of one row each: their shares, with the batch's normalisers, sum to the whole batch's loss
    for how, value in whole.items():
        shares = [batch_loss(per_token[i:i + 1], mask[i:i + 1], how, 2, 4, 4).item() for i in range(2)]
        assert sum(shares) == pytest.approx(value), how
    with pytest.raises(ValueError):
        batch_loss(per_token, mask, "sum", 2, 4, 4)


def test_advantages_of_groups_of_different_sizes():
    # the trainer's groups after an env error was left out of the second: sizes 3 and 2
    groups = [torch.tensor([1.0, 0.0, 0.5]), torch.tensor([1.0, 1.0])]
    group, none, batch = (advantages(groups, scale) for scale in ("group", "none", "batch"))
    assert group[0].tolist() == pytest.approx([0.5 / (0.5 + 1e-4), -0.5 / (0.5 + 1e-4), 0.0])
    assert group[1].tolist() == [0.0, 0.0] and none[0].tolist() == pytest.approx([0.5, -0.5, 0.0])
    every = torch.tensor([1.0, 0.0, 0.5, 1.0, 1.0]).std().item()
    assert batch[0].tolist() == pytest.approx([0.5 / (every + 1e-4), -0.5 / (every + 1e-4), 0.0])
    assert advantages([torch.tensor([0.3])], "group")[0].tolist() == [0.0] and advantages([], "batch") == []


def test_turn_advantages_follow_scale_rewards():
    rewards = [[0.0, -0.1, 1.0], [1.0], [0.0], [0.0, 1.0]]  # two groups of 2
    flat = torch.tensor([0.0, -0.1, 1.0, 1.0], dtype=torch.float64)
    m, s = flat.mean().item(), flat.std().item()
    every = torch.tensor([r for t in rewards for r in t], dtype=torch.float64).std().item()
    group = turn_advantages(rewards, 2, scale="group")
    none = turn_advantages(rewards, 2, scale="none")
    batch = turn_advantages(rewards, 2, scale="batch")
    assert none[1] == pytest.approx([1.0 - m])  # centred only (Dr. GRPO's choice, per turn)
    assert group[1] == pytest.approx([(1.0 - m) / (s + 1e-4)])
    assert batch[1] == pytest.approx([(1.0 - m) / (every + 1e-4)])  # one std over every turn of the batch
    with pytest.raises(ValueError, match="group, batch or none"):
        turn_advantages(rewards, 2, scale="rank")


def test_ratio_corrected_k3_weights_k3_by_the_importance_ratio():
    from agentic_rl.train.grpo_math import kl_k3_ratio

    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    ref, old = torch.tensor([-1.5, -1.0]), torch.tensor([-1.2, -2.0])
    got = kl_k3_ratio(logp, ref, old)
    assert torch.allclose(got, kl_k3(logp, ref) * torch.exp(logp - old))
    assert torch.allclose(kl_k3_ratio(logp, ref, logp.detach()), kl_k3(logp, ref))  # on-policy: the same value ...
    g1 = torch.autograd.grad(kl_k3_ratio(logp, ref, logp.detach()).sum(), logp)[0]
    g0 = torch.autograd.grad(kl_k3(logp, ref).sum(), logp)[0]
    assert torch.allclose(g1, g0 + kl_k3(logp, ref).detach())  # ... but the gradient also moves the sampling weight
