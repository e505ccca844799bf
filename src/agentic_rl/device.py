"""Where a model runs and in what precision: the CPU or a CUDA GPU, and `bf16` autocast for the matrix products.

Under `torch.autocast(dtype=bfloat16)` linear layers and attention run in bf16 while the weights, their gradients,
the optimizer state, norms and the residual stream stay fp32 (what TRL's and HF Trainer's `bf16=True` do). The
vocabulary projection stays fp32 in `train/logprobs.py`: the loss and logprobs are read off its logits.

Why fp32 is the default on the CPU. bf16 autocast speeds up the first few batches, but not a whole SFT run: oneDNN
builds and caches kernels per shape, a run's micro-batches take hundreds of shapes, and bf16's memory grows with
them (docs/design-notes.md#precision-bf16-on-cpu). On a GPU with bf16 the trade is the usual one, and
`precision=auto` (the default) picks bf16 there.

Device. `device=auto` is the CUDA GPU when torch sees one, else the CPU. On a GPU with bf16, trainers keep fp32
master weights, gradients and optimizer state and run the forwards under bf16 autocast (HF Trainer's `bf16=True`);
a policy that only samples (evaluation, `rollout`, the prompted baseline) loads its weights in bf16.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # torch is imported where it is used: commands that run no model start without it
    import torch

Precision = Literal["auto", "fp32", "bf16"]
Device = Literal["auto", "cpu", "cuda"]


def resolve_device(device: str) -> torch.device:
    """`auto` → the CUDA GPU when torch sees one, else the CPU; `cuda` without a visible GPU is a ValueError."""
    import torch

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
    import torch

    if precision == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if precision not in ("fp32", "bf16"):
        raise ValueError(f"precision={precision!r} is not one of auto, fp32, bf16")
    return precision  # type: ignore[return-value]


def sampling_dtype(device: torch.device) -> torch.dtype:
    """The weights of a policy that only samples: bf16 on a GPU that has it (half the memory, its fast kernels),
    fp32 on the CPU, where bf16 gives no speed-up (above)."""
    import torch

    return torch.bfloat16 if resolve_precision("auto", device) == "bf16" else torch.float32


def autocast(precision: Precision, device: torch.device) -> contextlib.AbstractContextManager[None]:
    """The context a forward pass runs in: bf16 autocast, or nothing for fp32. Backward needs no context."""
    import torch

    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
