"""Configs: one pydantic model per entry point, a docstring under each field, YAML files and `key=value` overrides.

Unknown keys are errors that list the valid ones; every field does something.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A config file or override is wrong; the message says what and what is valid."""


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)


C = TypeVar("C", bound=Config)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`a.b=1` → {"a": {"b": 1}}; values are read as YAML (numbers, booleans, lists, null)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like key=value")
        key, raw = item.split("=", 1)
        node = out
        *parents, leaf = key.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
        try:
            node[leaf] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            node[leaf] = raw
    return out


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` over `base`, nested dicts merged key by key."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(cls: type[C], path: str | Path | None = None, overrides: list[str] | None = None,
                base: dict[str, Any] | None = None, **explicit: Any) -> C:
    """Defaults ← `base` (e.g. an env's own defaults) ← YAML file ← explicit CLI options ← key=value overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path} is not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    data = deep_merge(base or {}, data)
    data = deep_merge(data, {k: v for k, v in explicit.items() if v is not None})
    data = deep_merge(data, parse_overrides(overrides or []))
    return validate(cls, data)


def validate(cls: type[C], data: dict[str, Any]) -> C:
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(f"unknown key {key!r}; valid keys: {', '.join(_valid_keys(cls, err['loc'][:-1]))}")
            else:
                lines.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError(f"invalid {cls.__name__}:\n  " + "\n  ".join(lines)) from None


def _valid_keys(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    model: Any = cls
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return []
        model = field.annotation
    return list(model.model_fields)


def diff_configs(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Keys whose values differ, dotted; for refusing to resume under another config."""
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += diff_configs(va, vb, f"{prefix}{k}.")
        elif va != vb:
            out.append(f"{prefix}{k}: {va!r} → {vb!r}")
    return out
