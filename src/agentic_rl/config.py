"""Configs: one pydantic model per command, a docstring under each field, YAML files and `key=value` overrides.

Unknown keys are errors that list the valid ones, and so is a key that would be ignored or overwritten (each config
says which in `unused_keys`): every field given does something. The field docstrings are the commands' `--help`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """A config file or override is wrong; the message says what and what is valid."""


class Config(BaseModel):
    """A strict config: unknown keys are errors, field docstrings are the help text."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, allow_unicode=True)

    def unused_keys(self) -> list[str]:
        """One line per key the user set that this config would ignore or overwrite, saying why (none: []).
        Nested configs are checked too, their keys dotted."""
        out = []
        for name in self.model_fields_set:
            value = getattr(self, name)
            if isinstance(value, Config):
                out += [f"{name}.{line}" for line in value.unused_keys()]
        return out

    def ignored_unless(self, *rules: tuple[str, str, bool]) -> list[str]:
        """Error lines for the keys the user set whose condition does not hold; a rule is (key, its condition in
        words, whether it holds)."""
        return [f"{key}: it is used only with {needs}, so {key}= would be ignored"
                for key, needs, holds in rules if not holds and key in self.model_fields_set]

    def given(self, *names: str) -> list[str]:
        """Which of `names` the user set (in a file, an option or key=value), as opposed to left at their default."""
        return [n for n in names if n in self.model_fields_set]


class EnvConfig(Config):
    """What every command that runs episodes starts from: an environment, its arguments and a seed."""

    env: str = "tool_use"
    """Environment name: tool_use, codefix, math, sql, game, or package.module:Class."""
    env_args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment (tool_use: fault_rate, max_turns, kinds; codefix: max_turns,
    fault_rate, episode_seconds; math: mode, tool (calculator or python), levels, data, format_weight,
    length_penalty; sql: max_turns; game: digits, guesses)."""
    seed: int = 0
    """Seed for tasks and sampling: the same seed and config give the same numbers on the CPU."""

    @model_validator(mode="after")
    def _env_can_be_built(self) -> EnvConfig:
        """Build the env once now, so a wrong name or env_args is one clear line before any work starts."""
        from .envs import check_env_args, make_env  # envs import the runtime, which this module must not

        check_env_args(self.env, self.env_args)
        try:
            make_env(self.env, **self.env_args).close()
        except Exception as e:  # whatever the constructor says of a bad value, as one line
            why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
            raise ValueError(f"env {self.env} with env_args {self.env_args}: {why}") from None
        return self

    def env_factory(self) -> Any:
        """A function that builds this config's env; keyword overrides (fault_rate, …) go over env_args."""
        from .envs import make_env

        return lambda **kw: make_env(self.env, **{**self.env_args, **kw})


C = TypeVar("C", bound=Config)


def overlay(cfg: C, **values: Any) -> C:
    """A copy of `cfg` with `values` set by the program, not the user: `given` and `unused_keys` still see only
    what the user set."""
    copy = cfg.model_copy(update=values)
    copy.__pydantic_fields_set__ = set(cfg.model_fields_set)
    return copy


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
    given = deep_merge(data, {k: v for k, v in explicit.items() if v is not None})
    given = deep_merge(given, parse_overrides(overrides or []))
    cfg = validate(cls, deep_merge(base or {}, given))
    _mark_given(cfg, given)  # `base` is the program's defaults: only what the user wrote counts as set
    unused = cfg.unused_keys()
    if unused:
        raise ConfigError(f"invalid {cls.__name__}:\n  " + "\n  ".join(unused))
    return cfg


def _mark_given(cfg: BaseModel, given: dict[str, Any]) -> None:
    """Make `cfg.model_fields_set` (and its nested configs') the keys present in `given`."""
    cfg.__pydantic_fields_set__ = {k for k in given if k in type(cfg).model_fields}
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            _mark_given(value, given.get(name) if isinstance(given.get(name), dict) else {})


def validate(cls: type[C], data: dict[str, Any]) -> C:
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(f"unknown key {key!r}; valid keys: {', '.join(_valid_keys(cls, err['loc'][:-1]))}")
            elif not key:  # a check of the whole config: its message says what is wrong
                lines.append(str(err.get("ctx", {}).get("error", err["msg"])))
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


def fields_help(cls: type[BaseModel], prefix: str = "", skip: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(key, default, docstring) of every field, nested configs' fields dotted: what `--help` lists."""
    rows = []
    for name, field in cls.model_fields.items():
        if name in skip:
            continue
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += fields_help(ann, f"{prefix}{name}.")
            continue
        default = yaml.safe_dump(field.get_default(call_default_factory=True), default_flow_style=True)
        rows.append((f"{prefix}{name}", default.strip().removesuffix("...").strip(),
                     " ".join((field.description or "").split())))
    return rows
