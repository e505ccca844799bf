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


def test_an_episode_samples_the_same_tokens_in_any_batch(trained_dir):
    """Each episode draws from its own stream (run seed, task id, sample), so at T = 1 it samples the same tokens
    alone, in a batch of other tasks, or split across workers — what lets rollouts move between processes; another
    seed or another sample index gives other draws."""
    from agentic_rl.envs import make_env
    from agentic_rl.policies import HFPolicy, SamplingConfig
    from agentic_rl.runtime.rollout import run_episodes

    env = make_env("tool_use")
    tasks = env.tasks("eval", 6, seed=2)
    policy = HFPolicy(trained_dir, SamplingConfig(temperature=1.0, max_new_tokens=32))
    together = run_episodes(lambda: make_env("tool_use"), tasks, policy, group_size=2, seed=11)
    parts = [t for part in (tasks[:1], tasks[1:4], tasks[4:])
             for t in run_episodes(lambda: make_env("tool_use"), part, policy, group_size=2, seed=11)]
    assert [(t.task_id, t.sample) for t in together] == [(t.task_id, t.sample) for t in parts]
    for a, b in zip(together, parts):
        assert a.ids == b.ids and a.messages == b.messages
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) <= 1e-5
    other = run_episodes(lambda: make_env("tool_use"), tasks, policy, group_size=2, seed=12)
    assert [t.ids for t in other] != [t.ids for t in together]
    assert any(a.ids != b.ids for a, b in zip(together[::2], together[1::2]))  # the two samples of a task differ
