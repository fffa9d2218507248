"""Loading a pretrained causal LM from a local Hugging Face directory, for the papers whose full scale runs on
one (orion: request-patching on the paper's models; sharpening: best-of-N on GSM-style prompts).

Nothing is downloaded (``local_files_only=True``): the user points the paper's config key at a directory that
holds ``config.json``, the weights and the tokenizer, as ``save_pretrained`` writes them. Errors name that key.
"""
from __future__ import annotations

from pathlib import Path

import torch


def model_dir(path, key: str) -> Path:
    """`path` as a Path, checked to be a Hugging Face model directory (a ``config.json`` in it); the error names the
    config key `key` that gave the path."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face model directory (no config.json); set {key} to a "
                                "local directory written by save_pretrained")
    return path


def load_causal_lm(path, *, dtype: str = "float32", key: str, device: str | None = None):
    """The model (eval mode, on `device` when given) and tokenizer of the local directory `path`, with the
    weights in `dtype` (float32 | float16 | bfloat16). `key` is the config key that gave the path (for errors)."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:  # the `lm` extra of pyproject.toml
        raise ImportError(f"{key} needs the transformers package (pip install -e '.[lm]')") from e
    path = model_dir(path, key)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    if device is not None:
        model = model.to(device)
    return model.eval(), tokenizer
