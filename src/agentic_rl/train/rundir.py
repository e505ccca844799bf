"""Run directories: one config per directory, metrics as JSONL, refusal to resume under another config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text, check_output_dir
from ..config import Config, ConfigError, diff_configs, read_saved_config, same_paths
from ..ui import console
from .checkpoint import latest_checkpoint, load_trainer_state


def prepare_run_dir(title: str, cfg: Config, out: str | Path, resume: bool) -> Path | None:
    """Check `out` against `cfg`, save and print the config, and return the checkpoint to resume from (None: a
    fresh start).

    A run directory holds one config. Every refusal comes before the first write: `out` must be a writable
    directory, one with a checkpoint is never overwritten without --resume, --resume needs a run to resume, and
    resuming under a different config is refused with the differing keys named."""
    out = Path(out)
    check_output_dir(out, "--out")
    ckpt = latest_checkpoint(out)
    saved = out / "config.yaml"
    if ckpt is not None and not resume:
        raise ConfigError(f"{out} already holds a run (checkpoint {ckpt.name}); pass --resume to continue it "
                          "or choose a new --out")
    if resume and not saved.exists():
        raise ConfigError(f"nothing to resume: {out} holds no run (no config.yaml); drop --resume to start one")
    if resume:
        before = read_saved_config(type(cfg), saved)
        diffs = diff_configs(same_paths(before.saved()), same_paths(cfg.saved()))
        if diffs:
            raise ConfigError("cannot resume under a different config; differing keys (saved → now):\n  "
                              + "\n  ".join(diffs))
    out.mkdir(parents=True, exist_ok=True)
    if ckpt is None:  # a fresh start (or a run killed before its first checkpoint): drop stale metrics
        (out / "metrics.jsonl").unlink(missing_ok=True)
    else:  # keep the metrics up to the checkpoint; the steps after it will be redone
        _truncate_metrics(out, load_trainer_state(ckpt)["step"])
    atomic_write_text(saved, cfg.to_yaml())
    console.print(f"[bold]{title}[/] → {out}\n{cfg.to_yaml()}")
    return ckpt


def append_metrics(out: Path, record: dict[str, Any]) -> None:
    with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _truncate_metrics(out: Path, step: int) -> None:
    path = out / "metrics.jsonl"
    if path.exists():
        keep = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= step]
        atomic_write_text(path, "".join(k + "\n" for k in keep))
