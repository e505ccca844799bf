"""What both trainers' configs share: how the model is fine-tuned, where, in what precision, and the turn budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import Field, field_validator

from ..config import EnvConfig, overlay
from ..device import Device, Precision
from ..envs import Env
from .lora import LoRASettings
from .tracking import ReportTo

T = TypeVar("T", bound="TrainerConfig")


class TrainerConfig(EnvConfig):
    """The fields SFT and GRPO have in common; each trainer's own config adds its algorithm's."""

    finetune: Literal["full", "lora"] = "full"
    """Update every weight, or train a LoRA adapter (`lora.*`) and merge it into the published model."""
    lora: LoRASettings = Field(default_factory=LoRASettings)
    """The adapter's settings, with `finetune: lora`."""
    device: Device = "auto"
    """Where the model trains: `auto` (the CUDA GPU when torch sees one, else the CPU), `cpu` or `cuda`."""
    precision: Precision = "auto"
    """`bf16`: the training forwards' matrix products under bf16 autocast (weights, gradients, optimizer state and
    the vocabulary projection stay fp32); `auto`: bf16 on a GPU that has it, fp32 on the CPU, where bf16 gives no
    speed-up over a whole run and uses more memory (docs/design-notes.md#precision-bf16-on-cpu)."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Most tokens per assistant turn when sampling (None: the env's own, `Env.max_new_tokens`); SFT refuses
    demonstrations with a longer turn."""
    report_to: list[ReportTo] = Field(default_factory=list)
    """Also send metrics to these (tensorboard, wandb in offline mode); metrics.jsonl is always written."""

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_sink_is_a_list(cls, value: Any) -> Any:
        """`report_to=tensorboard` means [tensorboard], as `report_to=[tensorboard]` does."""
        return [value] if isinstance(value, str) else value

    def inapplicable(self) -> dict[str, str]:
        out = super().inapplicable()
        if self.finetune != "lora":
            out["lora"] = f"finetune is {self.finetune}, so {{key}}= would be ignored; set finetune=lora"
        return out

    def open_env(self: T) -> tuple[T, Callable[..., Env], Env]:
        """This config as it runs (`as_run`), the env's factory, and an env."""
        factory = self.env_factory()
        env = factory()
        return self.as_run(env), factory, env

    def as_run(self: T, env: Env) -> T:
        """This config with the env's turn budget filled in where none was given: what the trainer saves and
        what a resumed run is compared with."""
        return overlay(self, max_new_tokens=self.max_new_tokens or env.max_new_tokens)
