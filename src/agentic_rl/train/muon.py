"""Muon whose Newton–Schulz orthogonalisation runs in float32 on a CPU and in bfloat16 on a GPU.

`torch.optim.Muon` always orthogonalises in bfloat16. On a CPU without native bfloat16 matrix units (AVX2-only
x86, most laptops and cloud VMs) every bfloat16 matmul is emulated, many times slower than float32
(benchmarks/muon_step.py measures the step both ways). Float32 is also the more exact of the two, so on a CPU it
costs nothing to prefer it; on CUDA bfloat16 stays, as in the reference implementation. Same update rule, same
state (`momentum_buffer`), so a checkpoint written by either optimizer loads into the other.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


def ns_dtype_for(device: torch.device) -> torch.dtype:
    """The dtype Newton–Schulz runs in on `device`: bfloat16 where tensor cores make it fast, float32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def orthogonalise(update: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """Keller Jordan's quintic Newton–Schulz iteration: an approximately orthogonal matrix with `update`'s singular
    vectors (its singular values pushed towards 1), computed in `dtype`."""
    a, b, c = coefficients
    x = update.to(dtype)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)  # spectral norm ≤ Frobenius norm ≤ 1
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


class Muon(torch.optim.Muon):
    """`torch.optim.Muon` (same arguments, same state) with the orthogonalisation dtype chosen per device, or
    pinned by `ns_dtype`."""

    def __init__(self, params: Any, *args: Any, ns_dtype: torch.dtype | None = None, **kwargs: Any):
        super().__init__(params, *args, **kwargs)
        self.ns_dtype = ns_dtype

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """One Muon step: Nesterov momentum, orthogonalise, decoupled weight decay, RMS-adjusted update."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, momentum, decay = float(group["lr"]), group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - momentum)
                update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
                ortho = orthogonalise(update, group["ns_coefficients"], group["ns_steps"], group["eps"],
                                      self.ns_dtype or ns_dtype_for(p.device))
                p.mul_(1 - lr * decay)
                p.add_(ortho.to(p.dtype), alpha=-lr * _lr_ratio(group["adjust_lr_fn"], p.shape))
        return loss


def _lr_ratio(adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """How `torch.optim.Muon` scales the learning rate for a matrix of `shape` (Keller's or Moonshot's rule)."""
    rows, cols = shape[:2]
    if adjust_lr_fn is None or adjust_lr_fn == "original":
        return math.sqrt(max(1, rows / cols))
    if adjust_lr_fn == "match_rms_adamw":
        return 0.2 * math.sqrt(max(rows, cols))
    return 1.0
