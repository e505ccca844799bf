"""Mixed precision for a trainer's forward passes: `bf16` runs the matrix products under bf16 autocast.

Under `torch.autocast(dtype=bfloat16)` linear layers and attention run in bf16 while the weights, their gradients,
the optimizer state, norms and the residual stream stay fp32 (what TRL's and HF Trainer's `bf16=True` do). The
vocabulary projection stays fp32 in `logprobs.sequence_logprobs`: the loss and logprobs are read off its logits.

Why fp32 is the default on CPU. On this machine's AMD EPYC (avx512_bf16), bf16 is faster on a few batches
(benchmarks/sft_step.py: 0.97 → 0.83 s per SFT step, 1.17×), but the gain fades in a real SFT run. The first 200
steps of the default run, side by side on one thread each: steps 1–10 bf16 12 % faster, steps 100–200 1.5 %
slower (207.5 vs 204.4 s), 397.6 vs 405.9 s in all, while bf16's resident memory grew from 1.3 to 2.9 GB (fp32:
1.0 GB, flat). oneDNN builds and caches kernels per shape, and the micro-batches take ~335 shapes in a run: a bf16
linear layer on 200 new shapes took +637 MB and was 30 % slower per call than on one repeated shape. A whole
default SFT run in bf16 took 708 s (~33 s of it an eight-episode final evaluation) where fp32 runs took 583–616 s
at similar moments of this shared machine.
On a GPU with bf16 the trade is the usual one, and `precision=auto` (the default) picks bf16 there.

Device. `device=auto` is the CUDA GPU when torch sees one, else the CPU. On a GPU with bf16, trainers keep fp32
master weights, gradients and optimizer state and run the forwards under bf16 autocast (HF Trainer's `bf16=True`);
a policy that only samples (evaluation, `rollout`, the prompted baseline) loads its weights in bf16.
"""

from __future__ import annotations

import contextlib
from typing import Literal

import torch

Precision = Literal["auto", "fp32", "bf16"]
Device = Literal["auto", "cpu", "cuda"]


def resolve_device(device: str) -> torch.device:
    """`auto` → the CUDA GPU when torch sees one, else the CPU; `cuda` without a visible GPU is a ValueError."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda, but torch sees no CUDA GPU (torch.cuda.is_available() is False); "
                         "use device=cpu or device=auto")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device={device!r} is not one of auto, cpu, cuda")
    return torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> Literal["fp32", "bf16"]:
    """`auto` → bf16 on a GPU that has it, fp32 elsewhere; an explicit choice is kept."""
    if precision == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision={precision!r} is not one of auto, fp32, bf16")
    return precision  # type: ignore[return-value]


def sampling_dtype(device: torch.device) -> torch.dtype:
    """The weights of a policy that only samples: bf16 on a GPU that has it (half the memory, its fast kernels),
    fp32 on the CPU, where bf16 is no faster (above)."""
    return torch.bfloat16 if resolve_precision("auto", device) == "bf16" else torch.float32


def autocast(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The context a forward pass runs in: bf16 autocast, or nothing for fp32. Backward needs no context."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
