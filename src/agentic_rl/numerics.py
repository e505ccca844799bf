"""Bit-reproducible CPU numerics across processes: resolve oneMKL's VML dispatch before any parallel call.

Why. PyTorch computes contiguous float unary ops (cos, sin, exp, log, sqrt, tanh, …) with oneMKL VML, each
intra-op thread on its own chunk. oneMKL picks each VML function's kernel lazily, on its first call; when that first
call runs on several threads at once, one thread can run a low-accuracy kernel for its whole chunk of that one call
(pytorch/pytorch#188792, oneMKL 2024.2 — the version torch 2.13's CPU wheel bundles). Here the first such call is the
RoPE table of the first training forward: left alone, fresh processes of the same run can differ from step 1 on,
and a resumed run cannot match an uninterrupted one bit for bit (docs/design-notes.md#reproducible-cpu-numerics).
A one-element call per function runs on the calling thread alone and resolves the dispatch before any concurrent
use (the fix proposed upstream in pytorch/pytorch#188791).
"""

from __future__ import annotations

import torch

# The unary ops ATen routes to oneMKL VML for float32 / float64 (aten/src/ATen/cpu/vml.h).
VML_OPS = ("acos", "asin", "atan", "cos", "erf", "erfc", "exp", "expm1", "log", "log10", "log1p", "log2", "sin",
           "sqrt", "tan", "tanh", "trunc")


def warm_up_vml() -> None:
    """Call every VML-backed op once on one element, in float32 and float64 (cheap; `policies/hf/sampler.py` calls
    it once, at import, before any model runs)."""
    for dtype in (torch.float32, torch.float64):
        x = torch.full((1,), 0.5, dtype=dtype)
        for op in VML_OPS:
            getattr(torch, op)(x)
