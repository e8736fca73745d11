"""Model registry: each family module registers its builders where it defines them, with ``@register_model``
(as timm does), so studies build any model the same way and a new model is one decorated function.

    @register_model(input_shape=(3, 32, 32), num_classes=10)
    def resnet20(num_classes: int = 10) -> ResNetCifar: ...

The registry's name for a model is its builder's function name; its family is the module's name.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

INPUT_KINDS = ("image", "tokens")


@dataclass(frozen=True)
class ModelSpec:
    """What a study needs to know about a model before building it.

    input_shape is one example's shape without the batch dimension: (C, H, W) for images, (seq_len,) for token
    sequences. num_classes is the default number of outputs. input_kind is "image" (float tensor) or "tokens"
    (int64 token ids, 0 = padding).
    """

    name: str
    family: str
    input_shape: tuple[int, ...]
    num_classes: int
    input_kind: str


@dataclass(frozen=True)
class _Entry:
    spec: ModelSpec
    build: Callable[..., nn.Module]


# Name -> entry, in registration order: cnnlab.models imports the family modules in the order names() lists them.
_REGISTRY: dict[str, _Entry] = {}


def register_model(*, input_shape: tuple[int, ...], num_classes: int, input_kind: str = "image"):
    """Decorator that registers a builder under its function name, with the spec of the model it builds by default
    (``input_shape`` without the batch dimension, default ``num_classes``, ``input_kind`` "image" or "tokens").

    Returns the builder unchanged. Raises ValueError if another builder already has that name (re-importing the
    same module, as a reload does, replaces its own entry) or if ``input_kind`` is not valid.
    """
    if input_kind not in INPUT_KINDS:
        raise ValueError(f"input_kind must be one of {list(INPUT_KINDS)}, got {input_kind!r}")

    def decorate(builder: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        name = builder.__name__
        where = f"{builder.__module__}.{builder.__qualname__}"
        if name in _REGISTRY:
            taken = _REGISTRY[name].build
            if f"{taken.__module__}.{taken.__qualname__}" != where:
                raise ValueError(f"model name {name!r} is already registered by {taken.__module__}."
                                 f"{taken.__qualname__}; cannot register {where} under the same name")
        family = builder.__module__.rpartition(".")[2]
        _REGISTRY[name] = _Entry(ModelSpec(name, family, tuple(input_shape), num_classes, input_kind), builder)
        return builder

    return decorate


def names() -> list[str]:
    """Registered model names, in registry order (families grouped, shallow to deep)."""
    return list(_REGISTRY)


def _lookup(name: str) -> _Entry:
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model name {name!r}; valid names: {', '.join(names())}") from None


def options(name: str) -> dict[str, object]:
    """The options ``get(name, ...)`` accepts besides num_classes, with their defaults."""
    parameters = inspect.signature(_lookup(name).build).parameters
    return {key: p.default for key, p in parameters.items() if key != "num_classes"}


def get(name: str, num_classes: int | None = None, **options_: object) -> nn.Module:
    """Build model ``name`` (fresh random weights, train mode, on the current default device).

    num_classes=None uses the spec's default. Returns an nn.Module with attributes ``input_shape`` and
    ``num_classes``. Raises ValueError for an unknown name, an unknown option, or a bad value.
    """
    entry = _lookup(name)
    valid = options(name)
    unknown = sorted(set(options_) - set(valid))
    if unknown:
        listed = ", ".join(f"{key}={value!r}" for key, value in valid.items()) or "none"
        raise ValueError(f"unknown option(s) {unknown} for model {name!r}; valid options (defaults): {listed}")
    if num_classes is not None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a positive int or None, got {num_classes!r}")
        options_["num_classes"] = num_classes
    return entry.build(**options_)


def spec(name: str, **options_: object) -> ModelSpec:
    """The ModelSpec of ``name``; with options (e.g. seq_len=128, variant="imagenet", num_classes=100) the spec of
    the model ``get(name, **options)`` would build, read from a weightless build on the meta device."""
    entry = _lookup(name)
    if not options_:
        return entry.spec
    with torch.device("meta"):
        model = get(name, **options_)
    return dataclasses.replace(entry.spec, input_shape=tuple(model.input_shape), num_classes=model.num_classes)


def example_input(
    model_or_name: nn.Module | str,
    batch_size: int = 1,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> torch.Tensor:
    """A random batch the model accepts: float ``dtype`` of shape (batch_size, *input_shape) for image models,
    int64 token ids in [1, vocab_size) of shape (batch_size, seq_len) for token models (no padding)."""
    if isinstance(model_or_name, str):
        with torch.device("meta"):  # only the shape and vocabulary are needed, not weights
            model = get(model_or_name)
    else:
        model = model_or_name
    generator = torch.Generator().manual_seed(seed)
    shape = (batch_size, *model.input_shape)
    embedding = getattr(model, "embedding", None)
    if isinstance(embedding, nn.Embedding):
        return torch.randint(1, embedding.num_embeddings, shape, generator=generator).to(device)
    return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)
