"""The math of GRPO, as small pure functions on tensors: group advantages, per-turn credit, the clipped loss, KL.

Kept apart from the training loop (`grpo.py`) so each formula is tested on hand-computed values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

ScaleRewards = Literal["group", "batch", "none"]
LossAgg = Literal["seq_mean", "token_mean", "constant"]


def group_advantages(rewards: torch.Tensor, group_size: int, scale: ScaleRewards = "group",
                     eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i − mean_group(r)) / (std + eps), rewards laid out as consecutive groups of `group_size`.

    scale = "group": std within each group (GRPO); "batch": one std over the whole batch; "none": no division
    (Dr. GRPO, which argues the std term biases towards too-easy and too-hard groups). std is the unbiased sample
    std, as in TRL. A group whose rewards are all equal gets advantage 0 — never NaN — and so no gradient.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    r = rewards.view(-1, group_size).float()  # (n_groups, G)
    centred = r - r.mean(dim=1, keepdim=True)
    if scale == "group":
        std = r.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(r[:, :1])
        out = centred / (std + eps)
    elif scale == "batch":
        out = centred / (r.std() + eps if r.numel() > 1 else eps + 1.0)
    elif scale == "none":
        out = centred
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale!r}")
    return out.view(-1)


def turn_advantages(turn_rewards: Sequence[Sequence[float]], group_size: int, gamma: float = 1.0,
                    eps: float = 1e-4) -> list[list[float]]:
    """Per-turn advantages for credit assignment across turns (the seed's E[Σ γ^t r_t]).

    Following DeepSeekMath's process supervision: within each group, every per-turn reward is normalised by the
    mean and std of all per-turn rewards of that group, r̃ = (r − mean) / (std + eps); a turn's advantage is then
    the discounted return-to-go of the normalised rewards, A_t = Σ_{k ≥ t} γ^(k−t) r̃_k. A wasted call in turn 2
    lowers the advantage of turn 2 and of the turns before it, not of the turns after it.
    """
    if len(turn_rewards) % group_size:
        raise ValueError(f"{len(turn_rewards)} trajectories do not split into groups of {group_size}")
    out: list[list[float]] = []
    for g in range(0, len(turn_rewards), group_size):
        group = turn_rewards[g:g + group_size]
        flat = torch.tensor([r for traj in group for r in traj], dtype=torch.float64)
        mean = flat.mean() if flat.numel() else torch.tensor(0.0)
        std = flat.std() if flat.numel() > 1 else torch.tensor(0.0)
        for traj in group:
            norm = [(r - float(mean)) / (float(std) + eps) for r in traj]
            adv, running = [0.0] * len(norm), 0.0
            for t in range(len(norm) - 1, -1, -1):
                running = norm[t] + gamma * running
                adv[t] = running
            out.append(adv)
    return out


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, eps_low: float,
                      eps_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO/GRPO objective to minimise: −min(ρ·A, clip(ρ, 1−ε_low, 1+ε_high)·A), ρ = exp(logp − old_logp).

    Returns (loss per token, whether the token was clipped). Asymmetric ε (ε_high > ε_low) is DAPO's clip-higher.
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


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: LossAgg, constant: float | None = None) -> torch.Tensor:
    """Reduce a (B, T) per-token loss over the policy's tokens (mask = 1).

    seq_mean:   mean over each sequence's tokens, then mean over sequences (the GRPO paper);
    token_mean: sum over all tokens / number of tokens in the batch (DAPO: long sequences are not down-weighted);
    constant:   sum over all tokens / a constant (Dr. GRPO: no length bias at all), `constant` = B · max tokens.
    """
    mask = mask.to(per_token.dtype)
    if how == "seq_mean":
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)
        return per_seq.mean()
    if how == "token_mean":
        return (per_token * mask).sum() / mask.sum().clamp(min=1)
    if how == "constant":
        if not constant:
            raise ValueError("loss aggregation 'constant' needs a positive normaliser")
        return (per_token * mask).sum() / constant
    raise ValueError(f"loss_agg must be seq_mean, token_mean or constant, got {how!r}")
