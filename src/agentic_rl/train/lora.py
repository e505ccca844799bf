"""LoRA through PEFT: the adapter the trainers update, its checkpoints, and the merged model a stage leaves behind.

With `finetune: lora` the trainers wrap the model with `peft.get_peft_model`, which injects the adapter into the
model's own linear layers: the model object the sampler and the loss already use computes with it, and only the
adapter's matrices train. Checkpoints hold the adapter alone (`adapter_config.json`, `adapter_model.safetensors`);
the stage's `model/` is merged — W + (α/r)·B·A for every adapted layer — into a plain HF directory that loads in
plain transformers. The merge is computed beside the weights, never in place, so training goes on bit for bit.
GRPO's KL reference is the same model with the adapter disabled: no second copy in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from pydantic import Field

from ..config import Config


class LoRASettings(Config):
    r: int = Field(16, ge=1)
    """Rank of each adapter's B·A."""
    alpha: float = Field(32.0, gt=0)
    """Scale: the update is (alpha / r)·B·A."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on the adapter's input."""
    target_modules: list[str] | str = "all-linear"
    """Modules to adapt: "all-linear" (every linear projection of the decoder, not the output layer) or names."""



def add_adapter(model: torch.nn.Module, cfg: LoRASettings, seed: int = 0) -> PeftModel:
    """Wrap `model` with a fresh LoRA adapter (B = 0: the model computes as before); only the adapter trains.

    A's random init is drawn from `seed` (the run's), not from torch's global stream: the same run trains the same
    adapter, wherever and however often it is started."""
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):  # manual_seed seeds the GPUs' too
        torch.manual_seed(seed)
        return get_peft_model(model, LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout,
                                                target_modules=cfg.target_modules, task_type="CAUSAL_LM"))


def load_adapter(model: torch.nn.Module, adapter_dir: str | Path) -> PeftModel:
    """Wrap `model` with the adapter saved in a checkpoint, trainable, to resume a run."""
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=True)


def merged_state_dict(peft_model: PeftModel) -> dict[str, torch.Tensor]:
    """The base model's state dict with every adapter merged in, under the base model's own names."""
    base = peft_model.get_base_model()
    out: dict[str, torch.Tensor] = {}
    layers = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        module, _, leaf = key.rpartition(".base_layer.")
        if module in layers and leaf == "weight":
            value = value + layers[module].get_delta_weight("default").to(value.dtype)
        out[key.replace(".base_layer.", ".")] = value.detach().clone()
    return out


class Merged:
    """Something with `save_pretrained` that writes the merged model: what `checkpoint.save_model_dir` needs."""

    def __init__(self, peft_model: PeftModel):
        self.peft_model = peft_model

    def save_pretrained(self, path: str | Path, **kwargs: Any) -> None:
        base = self.peft_model.get_base_model()
        base.save_pretrained(path, state_dict=merged_state_dict(self.peft_model), **kwargs)


class Trainee:
    """The model a trainer updates: the model itself (full fine-tuning) or the model with a LoRA adapter in it.

    `model` is what runs forward either way; `to_checkpoint` is what a checkpoint saves (the whole model, or the
    adapter alone); `to_publish` what the stage's `model/` saves (the model, or the merge); `reference()` runs the
    starting policy (for LoRA: the adapter disabled)."""

    def __init__(self, model: torch.nn.Module, adapter: PeftModel | None = None):
        self.model, self.adapter = model, adapter

    @classmethod
    def prepare(cls, model: torch.nn.Module, finetune: str, settings: LoRASettings,
                resume_from: Path | None = None, seed: int = 0) -> Trainee:
        """Full fine-tuning: `model` as it is (a resumed run loaded it from the checkpoint). LoRA: a fresh
        adapter drawn from `seed`, or the checkpoint's adapter when resuming (the model is then the base model)."""
        if finetune == "full":
            return cls(model)
        adapter = load_adapter(model, resume_from) if resume_from is not None else add_adapter(model, settings, seed)
        return cls(model, adapter)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def to_checkpoint(self) -> Any:
        return self.adapter if self.adapter is not None else self.model

    @property
    def to_publish(self) -> Any:
        return Merged(self.adapter) if self.adapter is not None else self.model

    def reference(self) -> Any:
        """A context in which `model` computes as the starting policy (LoRA only)."""
        assert self.adapter is not None, "full fine-tuning keeps a separate frozen reference model"
        return self.adapter.disable_adapter()
