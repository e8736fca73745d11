"""Presets: how big a run is. ``quick`` (CPU and CI smoke runs), ``standard`` (one free Colab GPU),
``paper`` (the studies' full grids). ``auto`` picks quick on a CPU and standard where CUDA is available.

Notebooks read ``CNNLAB_PRESET`` through :func:`resolve`, and build their configuration with
:func:`configure`, so a papermill parameter overrides a preset's default and a bad one fails at once.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

PRESETS = ("quick", "standard", "paper")


def resolve(preset: str | None = None) -> str:
    """The preset to use: ``preset`` if given, else ``$CNNLAB_PRESET``, else ``auto``; ``auto`` is resolved."""
    name = (preset or os.environ.get("CNNLAB_PRESET") or "auto").lower()
    if name == "auto":
        return "standard" if torch.cuda.is_available() else "quick"
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: auto, {', '.join(PRESETS)}")
    return name


def configure(preset: str, defaults: dict[str, dict], **overrides) -> SimpleNamespace:
    """A notebook's configuration: ``defaults[preset]`` with every non-None ``overrides`` value on top.

    ``defaults`` maps each preset name to a dict of parameters. An override naming a parameter the
    study does not have raises ValueError listing the valid ones.
    """
    preset = resolve(preset)
    if preset not in defaults:
        raise ValueError(f"this study has no {preset!r} preset; valid presets: {', '.join(defaults)}")
    config = dict(defaults[preset])
    unknown = set(overrides) - set(config)
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)}; valid parameters: {', '.join(sorted(config))}")
    config.update({k: v for k, v in overrides.items() if v is not None})
    config["preset"] = preset
    return SimpleNamespace(**config)


def choose_device(device: str | None = None) -> torch.device:
    """``device`` if given ("cpu", "cuda", "cuda:1"), else CUDA when available, else the CPU."""
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; valid devices: auto, cpu, cuda, cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available on this machine")
    return dev
