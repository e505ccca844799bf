"""GRPO's learner: the loss of a batch of scored trajectories, its gradients added to the model's.

`learner_plan` splits the rows into parts whose common prompt runs once (a task's G samples share its prompt token
for token): in the policy's forward and backward and, grouped, in the reference's forward too. `loss_backward` runs
one pass of the clipped surrogate (plus β·KL to the reference) over them, micro-batch by micro-batch, with the loss
scaled so the micro-batches sum to the batch loss.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import torch

from ..device import autocast
from ..runtime.trajectory import Trajectory
from .grpo_math import batch_loss, clipped_surrogate, kl_k3, kl_k3_ratio
from .logprobs import SharedPrefix, micro_batches, sequence_logprobs
from .lora import Trainee

if TYPE_CHECKING:
    from .grpo import GRPOConfig

# Grouped, a micro-batch is cut before padding passes this share of its positions (logprobs.micro_batches): the
# rows of one task differ in length by hundreds of tokens (docs/design-notes.md, "The grouped learner").
GROUP_MAX_PAD = 0.25


def learner_plan(trajs: list[Trajectory], rows: list[int], cfg: GRPOConfig) -> list[list[list[int]]]:
    """The rows (`rows[i]` is `trajs[i]`'s index in the batch) as parts, each a list of micro-batches whose common
    prompt prefix runs once (a SharedPrefix): with `shared_prompt=group` one part per task — its G samples share the
    task's prompt token for token, its micro-batches cut to pad little — else one part for the whole batch, sharing
    only what every row shares."""
    grouped = cfg.shared_prompt == "group"
    if grouped:
        by_task: dict[str, list[int]] = {}
        for i, t in enumerate(trajs):
            by_task.setdefault(t.task_id, []).append(i)
        parts = list(by_task.values())
    else:
        parts = [list(range(len(trajs)))] if trajs else []
    return [[[rows[part[j]] for j in mb]
             for mb in micro_batches([trajs[i].ids for i in part], cfg.micro_batch_size, cfg.micro_batch_tokens,
                                     GROUP_MAX_PAD if grouped else None)] for part in parts]


def loss_backward(model: Any, ref: Any, used: list[Trajectory], adv_tok: list[torch.Tensor],
                  plan: list[list[list[int]]], cfg: GRPOConfig, n_tokens: int, stats: dict[str, float]) -> None:
    """One pass of the loss over the rows of `plan` (learner_plan), its gradients added to the model's: each part's
    common prompt runs once (forward and backward; grouped, the reference's forward too), then its micro-batches."""
    device = next(model.parameters()).device
    for part in plan:
        seqs = [used[i].ids for rows in part for i in rows]
        with autocast(cfg.precision, device):
            shared = SharedPrefix(model, seqs)
        ref_shared = None
        if ref is not None and cfg.shared_prompt == "group":
            with torch.no_grad(), _reference(ref), autocast(cfg.precision, device):
                ref_shared = SharedPrefix(_ref_model(model, ref), seqs)
        for rows in part:
            micro_step(model, ref, [used[i] for i in rows], [adv_tok[i] for i in rows], cfg, len(used), n_tokens,
                       stats, shared, ref_shared)
        shared.backward()


def _reference(ref: Any) -> Any:
    """The context under which the reference runs: a LoRA trainee's adapter off; nothing for a separate model."""
    return ref.reference() if isinstance(ref, Trainee) else nullcontext()


def _ref_model(model: Any, ref: Any) -> Any:
    return model if isinstance(ref, Trainee) else ref


def micro_step(model: Any, ref: Any, micro: list[Trajectory], adv: list[torch.Tensor], cfg: GRPOConfig,
               n_seqs: int, n_tokens: int, stats: dict[str, float], shared: SharedPrefix | None = None,
               ref_shared: SharedPrefix | None = None) -> None:
    """Forward, loss and backward for one micro-batch; the loss is scaled so micro-batches sum to the batch loss.

    With `shared` (`ref_shared`), the part's common prefix is not run again here by the policy (the reference); the
    caller calls `shared.backward()`."""
    ids, masks = [t.ids for t in micro], [t.mask for t in micro]
    device = next(model.parameters()).device
    with autocast(cfg.precision, device):
        logp, entropy = sequence_logprobs(model, ids, cfg.temperature, with_entropy=True, masks=masks,
                                          prefix=shared)  # (B, T)
    B, T = logp.shape
    mask = torch.zeros(B, T)
    old = torch.zeros(B, T)
    A = torch.zeros(B, T)
    for b, t in enumerate(micro):
        mask[b, : len(t.mask)] = torch.tensor(t.mask, dtype=torch.float32)
        old[b, : len(t.logprobs)] = torch.tensor(t.logprobs)
        A[b, : len(t.mask)] = adv[b]
    mask, old, A = mask.to(device), old.to(device), A.to(device)
    per_tok, clipped = clipped_surrogate(logp, old, A, cfg.epsilon_low, cfg.epsilon_high)  # (B, T)
    if ref is not None:
        with torch.no_grad(), _reference(ref), autocast(cfg.precision, device):
            ref_logp, _ = sequence_logprobs(_ref_model(model, ref), ids, cfg.temperature, masks=masks,
                                            prefix=ref_shared)
        kl = kl_k3(logp, ref_logp) if cfg.kl_estimator == "k3" else kl_k3_ratio(logp, ref_logp, old)
        per_tok = per_tok + cfg.beta * kl
        stats["kl_ref"] += float((kl.detach() * mask).sum())
    loss = batch_loss(per_tok, mask, cfg.loss_agg, n_seqs, n_tokens, cfg.max_new_tokens)
    loss.backward()
    with torch.no_grad():
        stats["loss"] += loss.item()
        stats["clip_frac"] += float((clipped.float() * mask).sum())
        stats["kl_old"] += float((kl_k3(logp, old) * mask).sum())
        stats["entropy"] += float((entropy * mask).sum())
