"""The math of GRPO, as small pure functions on tensors: group advantages, per-turn credit, the clipped loss, KL.

Kept apart from the training loop (`grpo.py`) so each formula is tested on hand-computed values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

ScaleRewards = Literal["group", "batch", "none"]
LossAgg = Literal["seq_mean", "token_mean", "constant"]


def advantages(groups: Sequence[torch.Tensor], scale: ScaleRewards = "group", eps: float = 1e-4) -> list[torch.Tensor]:
    """Each group's rewards centred on the group's mean and divided by a scale; groups may differ in size (the
    trainer leaves infrastructure failures out of theirs).

    scale = "group": std within each group (GRPO); "batch": one std over every reward given; "none": no division
    (Dr. GRPO, which argues the std term biases towards too-easy and too-hard groups). std is the unbiased sample
    std, as in TRL. A group whose rewards are all equal gets advantage 0 — never NaN — and so no gradient.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    groups = [g.float() for g in groups]
    every = torch.cat(groups) if groups else torch.zeros(0)
    batch_std = every.std() if every.numel() > 1 else torch.tensor(1.0)
    out = []
    for r in groups:
        centred = r - r.mean()
        if scale == "group":
            out.append(centred / ((r.std() if r.numel() > 1 else torch.tensor(0.0)) + eps))
        elif scale == "batch":
            out.append(centred / (batch_std + eps))
        else:
            out.append(centred)
    return out


def turn_advantages(turn_rewards: Sequence[Sequence[float]], group_size: int, gamma: float = 1.0,
                    eps: float = 1e-4, scale: ScaleRewards = "group") -> list[list[float]]:
    """Per-turn advantages for credit assignment across turns (the seed's E[Σ γ^t r_t]).

    Following DeepSeekMath's process supervision: within each group, every per-turn reward is centred on the mean
    of all per-turn rewards of that group and divided by a scale, r̃ = (r − mean) / s; a turn's advantage is then
    the discounted return-to-go of the normalised rewards, A_t = Σ_{k ≥ t} γ^(k−t) r̃_k. A wasted call in turn 2
    lowers the advantage of turn 2 and of the turns before it, not of the turns after it.

    `scale` is `scale_rewards`' meaning for turns: s = the group's per-turn std + eps (DeepSeekMath), the std of
    every per-turn reward given (the batch) + eps, or 1 (none). A group whose per-turn rewards are all equal gets 0.
    """
    if len(turn_rewards) % group_size:
        raise ValueError(f"{len(turn_rewards)} trajectories do not split into groups of {group_size}")
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    every = torch.tensor([r for traj in turn_rewards for r in traj], dtype=torch.float64)
    batch_std = float(every.std()) if every.numel() > 1 else 0.0
    out: list[list[float]] = []
    for g in range(0, len(turn_rewards), group_size):
        group = turn_rewards[g:g + group_size]
        flat = torch.tensor([r for traj in group for r in traj], dtype=torch.float64)
        mean = float(flat.mean()) if flat.numel() else 0.0
        std = float(flat.std()) if flat.numel() > 1 else 0.0
        s = {"group": std + eps, "batch": batch_std + eps, "none": 1.0}[scale]
        for traj in group:
            norm = [(r - mean) / s for r in traj]
            adv, running = [0.0] * len(norm), 0.0
            for t in range(len(norm) - 1, -1, -1):
                running = norm[t] + gamma * running
                adv[t] = running
            out.append(adv)
    return out


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO/GRPO objective to minimise: −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = exp(logp − old_logp).

    Returns (loss per token, whether the token is clipped). Asymmetric ε (ε_high > ε_low) is DAPO's clip-higher.
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(π ‖ π_ref) per token: exp(ref − logp) − (ref − logp) − 1 ≥ 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def kl_k3_ratio(logp: torch.Tensor, ref_logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """k3 weighted by the importance ratio π/π_old: the tokens were sampled from π_old, not π, so this is the
    unbiased estimate of KL(π ‖ π_ref) and of its gradient (DeepSeek-V3.2; TRL's `use_bias_correction_kl`)."""
    return kl_k3(logp, ref_logp) * torch.exp(logp - old_logp)


def batch_loss(per_token: torch.Tensor, mask: torch.Tensor, how: LossAgg, n_seqs: int, n_tokens: int,
               max_new_tokens: int) -> torch.Tensor:
    """A micro-batch's share of the batch's loss: reduce its (B, T) per-token loss over the policy's tokens (mask = 1)
    with the batch's normaliser, so that the shares of all micro-batches sum to the loss of the whole batch.

    seq_mean:   mean over each sequence's tokens, then mean over the batch's `n_seqs` sequences (the GRPO paper);
    token_mean: sum over tokens / the batch's `n_tokens` policy tokens (DAPO: long sequences are not down-weighted);
    constant:   sum over tokens / (n_seqs · max_new_tokens) (Dr. GRPO: no length bias at all).
    """
    mask = mask.to(per_token.dtype)
    if how == "seq_mean":
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        return per_seq.sum() / max(n_seqs, 1)
    if how == "token_mean":
        return (per_token * mask).sum() / max(n_tokens, 1)
    if how == "constant":
        return (per_token * mask).sum() / max(n_seqs * max_new_tokens, 1)
    raise ValueError(f"loss_agg must be seq_mean, token_mean or constant, got {how!r}")
