"""Configs: one pydantic model per command, a docstring under each field, YAML files and `key=value` overrides.

Unknown keys are errors that list the valid ones, and so is a key that would be ignored or overwritten (each config
says which in `unused_keys`): every field given does something. The field docstrings are the commands' `--help`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator


class ConfigError(ValueError):
    """A config file or override is wrong; the message says what and what is valid."""


class Config(BaseModel):
    """A strict config: unknown keys are errors, field docstrings are the help text."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    def inapplicable(self) -> dict[str, str]:
        """The keys that do nothing under this config's other values (a dotted key, or a section's name for all of
        its keys) → why, with `{key}` standing for the key. They are left out of the saved config, and setting one
        is an error (`unused_keys`). Nested configs' keys come dotted."""
        out: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, Config):
                out.update({f"{name}.{key}": why for key, why in value.inapplicable().items()})
        return out

    def saved(self) -> dict[str, Any]:
        """The config as it is written to a run directory: every key that applies (what `inapplicable` names is
        left out, so the file passed back with --config is accepted and does the same)."""
        data = self.model_dump(mode="json")
        for key in self.inapplicable():
            *parents, leaf = key.split(".")
            node = data
            for p in parents:
                node = node.get(p, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node.pop(leaf, None)
        return data

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.saved(), sort_keys=False, allow_unicode=True)

    def given_keys(self) -> list[str]:
        """Every key the user set, dotted into nested configs (a section set as a whole, e.g. `lora: {}`, by its
        name)."""
        out = []
        for name in sorted(self.model_fields_set):
            value = getattr(self, name)
            inner = value.given_keys() if isinstance(value, Config) else []
            out += [f"{name}.{k}" for k in inner] or [name]
        return out

    def unused_keys(self) -> list[str]:
        """One line per key the user set that this config would ignore or overwrite, saying why (none: [])."""
        rules = self.inapplicable()
        return [f"{key}: " + why.replace("{key}", key) for key in self.given_keys()
                for rule, why in rules.items() if key == rule or key.startswith(rule + ".")]

    def given(self, *names: str) -> list[str]:
        """Which of `names` the user set (in a file, an option or key=value), as opposed to left at their default."""
        return [n for n in names if n in self.model_fields_set]


def used_only_with(*rules: tuple[str, str, bool]) -> dict[str, str]:
    """`inapplicable` entries for rules (key, its condition in words, whether it holds) that do not hold."""
    return {key: f"it is used only with {needs}, so {{key}}= would be ignored" for key, needs, holds in rules
            if not holds}


class EnvConfig(Config):
    """What every command that runs episodes starts from: an environment, its arguments and a seed."""

    env: str = "tool_use"
    """Environment name: tool_use, codefix, math, sql, game, or package.module:Class."""
    env_args: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment (tool_use: fault_rate, max_turns, kinds; codefix: max_turns,
    fault_rate, episode_seconds; math: mode, tool (calculator or python), levels, data, format_weight,
    length_penalty; sql: max_turns; game: digits, guesses)."""
    seed: int = Field(0, ge=0)
    """Seed for tasks and sampling: the same seed and config give the same numbers on the CPU."""

    @field_validator("env")
    @classmethod
    def _env_exists(cls, value: str) -> str:
        from .envs import env_class

        env_class(value)
        return value

    @field_validator("env_args")
    @classmethod
    def _env_args_fit_the_env(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Each argument's name and type checked against the env's constructor (and converted, as pydantic does)."""
        from .envs import check_env_args  # envs import the runtime, which this module must not

        return check_env_args(info.data["env"], value) if "env" in info.data else value

    @model_validator(mode="after")
    def _env_can_be_built(self) -> EnvConfig:
        """Build the env once now, so a wrong name or env_args is one clear line before any work starts."""
        from .envs import make_env

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
    """Defaults ← `base` (the program's: an env's own defaults, or the saved config of a run being resumed) ← YAML
    file ← explicit CLI options ← key=value overrides. An option and a key=value that set the same key are an
    error: which one was meant is not clear."""
    data = read_yaml(path) if path is not None else {}
    options = {k: v for k, v in explicit.items() if v is not None}
    keys = parse_overrides(overrides or [])
    twice = sorted(set(options) & set(keys))
    if twice:
        k = twice[0]
        raise ConfigError(f"{k} is given twice, as --{k.replace('_', '-')} {options[k]} and {k}={keys[k]}; "
                          "give one of them")
    given = deep_merge(deep_merge(data, options), keys)
    cfg = validate(cls, deep_merge(base or {}, given))
    _mark_given(cfg, given)  # `base` is the program's defaults: only what the user wrote counts as set
    unused = cfg.unused_keys()
    if unused:
        raise ConfigError("\n".join(unused))
    return cfg


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML config file as a mapping; a missing file, bad YAML or a non-mapping is a ConfigError."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {path} is a directory; give a YAML file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path} is not valid YAML: {' '.join(str(e).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    return data


def _mark_given(cfg: BaseModel, given: dict[str, Any]) -> None:
    """Make `cfg.model_fields_set` (and its nested configs') the keys present in `given`."""
    cfg.__pydantic_fields_set__ = {k for k in given if k in type(cfg).model_fields}
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            _mark_given(value, given.get(name) if isinstance(given.get(name), dict) else {})


def validate(cls: type[C], data: dict[str, Any]) -> C:
    """`data` as a `cls`, or a ConfigError with one line per wrong key: the key, what is wrong, what was given."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                lines.append(f"unknown key {key!r}; valid keys: {', '.join(_valid_keys(cls, err['loc'][:-1]))}")
                continue
            if err["type"] in ("value_error", "assertion_error"):  # our own checks say what is wrong in words
                why = str(err.get("ctx", {}).get("error", err["msg"]))
                lines.append(why if not key or why.startswith(key.split(".")[0]) else f"{key}: {why}")
                continue
            msg = err["msg"][0].lower() + err["msg"][1:]
            lines.append(f"{key}: {msg} (got {err.get('input')!r})")
        raise ConfigError("\n".join(lines)) from None


def _valid_keys(cls: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    model: Any = cls
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return []
        model = field.annotation
    return list(model.model_fields)


def read_saved_config(cls: type[C], path: Path) -> C:
    """The config a run directory saved (`path`), as a `cls`: what a resumed run is compared with."""
    try:
        return validate(cls, read_yaml(path))
    except ConfigError as e:
        raise ConfigError(f"the saved config {path} no longer loads: {' '.join(str(e).split())}") from None


def same_paths(saved: dict[str, Any]) -> dict[str, Any]:
    """`saved` with its `policy` spelled as the absolute path when it names a directory here, so a run resumed
    with its --out spelled another way (relative, absolute) compares equal."""
    policy = saved.get("policy")
    if isinstance(policy, str) and Path(policy).is_dir():
        return {**saved, "policy": str(Path(policy).resolve())}
    return saved


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
