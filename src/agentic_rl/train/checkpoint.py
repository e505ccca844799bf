"""Checkpoints and model directories: each written whole into a temporary directory, then renamed into place.

A checkpoint is a `step-N` directory under `checkpoints/` (the model or LoRA adapter, the tokenizer, `trainer_state.pt`
and the run's `config.yaml`); the pointer file `LATEST` names the newest complete one and moves only after it is in
place, and older ones are removed after that, so a run killed at any moment resumes from a whole checkpoint. A model
directory (a stage's `model/`, GRPO's `best/`) is a plain Hugging Face directory that replaces the previous one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..atomic import atomic_write_text, umask_modes


def save_model_dir(model: Any, tokenizer: Any, dest: str | Path, extra: dict[str, Any] | None = None) -> Path:
    """Save an HF model directory (plus `extra` files: name → torch object or str) and move it into place."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.tmp"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        for name, obj in (extra or {}).items():
            if isinstance(obj, str):
                (tmp / name).write_text(obj, encoding="utf-8")
            else:
                torch.save(obj, tmp / name)
        umask_modes(tmp)  # mkdtemp's 0700 and safetensors' 0600 would make the published directory private
        # A rename cannot replace a non-empty directory: the old one moves aside first (between the two renames,
        # only `.NAME.old` holds a model), then is removed.
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def save_checkpoint(run_dir: str | Path, step: int, model: Any, tokenizer: Any, state: dict[str, Any],
                    config_yaml: str, keep: int = 1) -> Path:
    """Write checkpoint `step-N` under `checkpoints/` atomically, point `LATEST` at it, then prune all but the
    newest `keep`."""
    ckpts = Path(run_dir) / "checkpoints"
    dest = save_model_dir(model, tokenizer, ckpts / f"step-{step:07d}",
                          extra={"trainer_state.pt": state, "config.yaml": config_yaml})
    atomic_write_text(ckpts / "LATEST", dest.name + "\n")
    for old in sorted(p for p in ckpts.glob("step-*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return dest


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    pointer = Path(run_dir) / "checkpoints" / "LATEST"
    if not pointer.exists():
        return None
    path = pointer.parent / pointer.read_text().strip()
    return path if (path / "trainer_state.pt").exists() else None


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(ckpt / "trainer_state.pt", weights_only=False)
