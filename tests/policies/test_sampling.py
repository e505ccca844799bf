"""The sampler's token draw (inverse CDF) samples each row's distribution: frequencies match the probabilities, a
zero-probability token is never drawn, and a seed gives the same draws."""

from __future__ import annotations

import torch

from agentic_rl.policies.hf.sampler import inverse_cdf_sample


def test_inverse_cdf_draws_follow_each_rows_distribution():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, float("-inf")], [3.0, float("-inf"), 0.0, 0.0, 1.0]])
    logp = torch.log_softmax(logits, dim=-1)
    n = 100_000
    draws = inverse_cdf_sample(logp.repeat_interleave(n, dim=0), torch.Generator().manual_seed(0)).view(2, n)
    for row in range(2):
        freq = torch.bincount(draws[row], minlength=5).double() / n
        p = logp[row].exp().double()
        assert freq[p == 0].sum() == 0  # never a token the row gives no mass
        # 5 standard errors of a binomial frequency: fails on a biased sampler, not on chance.
        assert torch.all((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12), (freq, p)


def test_inverse_cdf_is_seeded_and_handles_a_one_hot_row():
    logp = torch.log_softmax(torch.randn(8, 49_152, generator=torch.Generator().manual_seed(1)) * 3, dim=-1)
    a = inverse_cdf_sample(logp, torch.Generator().manual_seed(7))
    b = inverse_cdf_sample(logp, torch.Generator().manual_seed(7))
    assert torch.equal(a, b) and a.dtype == torch.long and a.shape == (8,)
    one_hot = torch.full((3, 10), float("-inf"))
    one_hot[:, 9] = 0.0  # all mass on the last entry: the clamp and `right=True` must still land on it
    assert inverse_cdf_sample(one_hot, torch.Generator().manual_seed(0)).tolist() == [9, 9, 9]
