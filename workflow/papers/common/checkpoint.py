"""Checkpoints of the papers' small models: the model's config dataclass (``model.cfg``), its weights and
whatever the caller adds (optimizer state, step, seed), in one ``torch.save`` file.

A model module binds these to its own classes, e.g. ``load(path, lambda cfg: GPT(GPTConfig(**cfg)))``.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from papers.common.io import ensure_parent


def save(model: nn.Module, path: str | Path, **extra: Any) -> None:
    """Write ``{"config": asdict(model.cfg), "model": state_dict, **extra}`` to `path`."""
    torch.save({"config": dataclasses.asdict(model.cfg), "model": model.state_dict(), **extra}, ensure_parent(path))


def load(path: str | Path, build: Callable[[dict], nn.Module]) -> tuple[nn.Module, dict]:
    """The model `build(config)` with the weights of the checkpoint at `path` (on the CPU), and the whole
    checkpoint (weights_only=False: the extras may hold numpy values and RNG states)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False)
    model = build(ckpt["config"])
    model.load_state_dict(ckpt["model"])
    return model, ckpt
