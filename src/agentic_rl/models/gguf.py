"""Convert a GGUF file into a plain Hugging Face model directory (fp32 safetensors, tokenizer, chat template).

transformers loads a GGUF checkpoint (with the `gguf` package) by dequantizing it, but the model it returns keeps
a GGUF quantization config and refuses `save_pretrained`. The weights are moved into a model built from the same
config without it, and that one is saved: a directory that loads in plain transformers, with no GGUF anywhere.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import torch

from ..atomic import umask_modes


def convert_gguf(gguf_file: Path, out_dir: Path) -> Path:
    """Write `gguf_file` as a plain HF model directory at `out_dir` (atomically: all of it, or nothing)."""
    if importlib.util.find_spec("gguf") is None:
        raise ValueError("reading a .gguf file needs the `gguf` package: pip install 'gguf>=0.10' "
                         "(or pip install -e '.[gguf]')")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file = Path(gguf_file).resolve()
    tmp = out_dir.with_name(f".{out_dir.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name,
                                                         dtype=torch.float32)
    except Exception as e:  # transformers raises many kinds here; one message that names the file
        raise ValueError(f"cannot read {gguf_file.name} as a GGUF checkpoint transformers supports: "
                         f"{type(e).__name__}: {str(e)[:200]}") from e
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise ValueError(f"converting {gguf_file.name}: weights that do not fit the architecture "
                         f"(missing {missing[:5]}, unexpected {unexpected[:5]})")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    umask_modes(tmp)  # safetensors writes its weights 0600: the cache would be readable by its owner only
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return out_dir
