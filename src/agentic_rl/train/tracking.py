"""Where training metrics go: always `metrics.jsonl` in the run directory; TensorBoard and Weights & Biases (offline)
when `report_to` names them, as TRL users expect. Both are optional extras, imported only when asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from ..config import ConfigError
from .rundir import append_metrics

ReportTo = Literal["tensorboard", "wandb"]


class Reporter:
    """One sink per run: `log(record)` writes the JSONL line and the scalars to each requested backend."""

    def __init__(self, out: Path, report_to: list[str], config: dict[str, Any], name: str, enabled: bool = True):
        """`enabled=False`: a sink that writes nothing (the ranks of a data-parallel run other than rank 0)."""
        self.out, self.backends, self.enabled = out, [], enabled
        for backend in report_to if enabled else []:
            if backend == "tensorboard":
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError:
                    raise ConfigError("report_to tensorboard needs the tensorboard package: "
                                      "pip install 'agentic-rl[tensorboard]'") from None
                self.backends.append(("tensorboard", SummaryWriter(log_dir=str(out / "tensorboard"))))
            elif backend == "wandb":
                try:
                    import wandb
                except ImportError:
                    raise ConfigError("report_to wandb needs the wandb package: pip install 'agentic-rl[wandb]'") from None
                # Offline: nothing leaves the machine; `wandb sync` uploads later if the user wants.
                run = wandb.init(mode="offline", dir=str(out), config=config, name=name, reinit="finish_previous")
                self.backends.append(("wandb", run))
            else:
                raise ConfigError(f"unknown report_to {backend!r}; valid: tensorboard, wandb")

    def log(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_metrics(self.out, record)
        step = int(record["step"])
        scalars = _flatten(record)
        for kind, sink in self.backends:
            if kind == "tensorboard":
                for k, v in scalars.items():
                    sink.add_scalar(k, v, step)
                sink.flush()
            else:
                sink.log(scalars, step=step)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for kind, sink in self.backends:
            sink.close() if kind == "tensorboard" else sink.finish()
        self.backends = []


def _flatten(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in record.items():
        if k == "step":
            continue
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = float(v)
    return out
