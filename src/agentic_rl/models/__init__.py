"""Where models come from: presets shipped in packages, GGUF files, local directories and Hub ids (`sources.py`)."""

from .sources import PRESETS, Preset, cache_root, fetch_preset, is_cached, resolve_model

__all__ = ["PRESETS", "Preset", "cache_root", "fetch_preset", "is_cached", "resolve_model"]
