"""Policies by spec: a model (directory, .gguf, Hub id, preset), `tiny`, `teacher`, `noisy-teacher`, `random`,
`script:FILE`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..envs.base import Env
from .base import Policy, SamplingConfig, Session, TokenRecord, Turn
from .scripted import RandomPolicy, ScriptPolicy, TeacherPolicy

_MODEL_POLICY = ("HFPolicy", "TokenContinuityError")  # torch and transformers: imported on first use

POLICY_SPECS = ("a model (a local Hugging Face directory, a .gguf file, a Hub id org/name, or a preset: "
                "smollm2-135m), tiny, teacher, noisy-teacher, random, or script:FILE")


def load_policy(spec: str, env: Env, sampling: SamplingConfig | None = None,
                noise: dict[str, float] | None = None, workdir: str | Path | None = None,
                device: str = "cpu") -> Policy:
    """Resolve a policy spec. `tiny` builds a fresh, untrained tiny model for `env` under `workdir`; a model goes
    to `device` (auto, cpu, cuda)."""
    if spec == "teacher":
        return TeacherPolicy()
    if spec == "noisy-teacher":
        return TeacherPolicy(noise if noise is not None else dict(env.default_noise))
    if spec == "random":
        return RandomPolicy()
    if spec.startswith("script:"):
        return ScriptPolicy(spec[len("script:"):])
    from ..models import resolve_model
    from .hf import HFPolicy

    if spec == "tiny":
        from ..models.tiny.build import build_tiny_for_env

        return HFPolicy(build_tiny_for_env(env, Path(workdir or "runs/tiny-init")), sampling, device=device)
    try:
        path = resolve_model(spec)
    except ValueError as e:
        why = f" ({e})" if Path(spec).exists() or "/" in spec else ""  # a path or Hub id: say what went wrong
        raise ValueError(f"unknown policy {spec!r}{why}; valid: {POLICY_SPECS}") from None
    return HFPolicy(path, sampling, device=device)


def __getattr__(name: str) -> Any:
    """HFPolicy and TokenContinuityError, imported when first asked for: a command that runs no model (a scripted
    policy's rollout, eval, probe-hacks) starts without torch."""
    if name in _MODEL_POLICY:
        from . import hf

        return getattr(hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "POLICY_SPECS",
    "HFPolicy",
    "Policy",
    "RandomPolicy",
    "SamplingConfig",
    "ScriptPolicy",
    "Session",
    "TeacherPolicy",
    "TokenContinuityError",
    "TokenRecord",
    "Turn",
    "load_policy",
]
