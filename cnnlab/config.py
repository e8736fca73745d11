"""Configuration: presets, parameter checks, device and dtype names, backend switches. One place for all of it.

- Presets (how big a run is): ``quick`` (CPU and CI smoke runs), ``standard`` (one free Colab GPU), ``paper``
  (the studies' full grids); ``auto`` picks quick on a CPU and standard where CUDA is available. Notebooks read
  ``CNNLAB_PRESET`` through :func:`resolve`; a study's ``configure`` builds on :func:`configure`, so a papermill
  parameter overrides a preset's default and a bad one fails at once.
- Names of settings ("fp16", "channels_last", "cuda:0") turned into torch objects, so that a typo fails with a
  ValueError naming the parameter and its valid values, not halfway through a sweep, and every table spells a
  setting the same way: :func:`dtype_name`, :func:`autocast_name`, :func:`memory_format_name`,
  :func:`resolve_device` (the one device resolver), :func:`device_name`.
- Parameter checks that name the parameter, the bad value and the valid range: :func:`positive_int`,
  :func:`positive_ints`, :func:`batch_size`, :func:`batch_sizes`, :func:`number`, :func:`boolean`, :func:`as_list`,
  :func:`image_models`, :func:`one_model`, :func:`names_list`, :func:`number_list`,
  :func:`image_size`, :func:`threads` (bools, NaN and inf are never numbers here; every range has an upper bound).
- Backend switches as context managers that restore the previous state: :func:`tf32`, :func:`cudnn_benchmark`.
"""

from __future__ import annotations

import ast
import contextlib
import math
import numbers
import os
from types import SimpleNamespace

import numpy as np
import torch

from cnnlab._compat import TF32_API, restore_tf32, set_tf32, tf32_enabled, tf32_leaf, tf32_state  # noqa: F401

PRESETS = ("quick", "standard", "paper")

# Canonical name -> dtype. Aliases below map the spellings the papers and notebooks use.
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}
_DTYPE_ALIASES = {
    "fp32": "float32", "float": "float32",
    "fp16": "float16", "half": "float16",
    "bf16": "bfloat16",
    "fp64": "float64", "double": "float64",
}
MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "channels_last": torch.channels_last,
}
_MEMORY_FORMAT_ALIASES = {"contiguous": "contiguous_format", "nchw": "contiguous_format", "nhwc": "channels_last"}
# autocast is a lower-precision dtype or off; float32 autocast would be a no-op and hide a mistake.
AUTOCAST_DTYPES = ("float16", "bfloat16")


def _valid(names, aliases) -> str:
    return ", ".join(sorted(set(names) | set(aliases)))


def dtype_name(dtype: str | torch.dtype | None, *, parameter: str = "dtype") -> str | None:
    """Canonical name ("float32", "float16", ...) of a dtype given as a name or torch.dtype; None stays None."""
    if dtype is None:
        return None
    if isinstance(dtype, torch.dtype):
        for name, value in DTYPES.items():
            if value == dtype:
                return name
        raise ValueError(f"{parameter}={dtype!r} is not supported; valid: {_valid(DTYPES, _DTYPE_ALIASES)}")
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = _DTYPE_ALIASES.get(key, key)
        if key in DTYPES:
            return key
    raise ValueError(f"{parameter}={dtype!r} is not a known dtype; valid: {_valid(DTYPES, _DTYPE_ALIASES)}")


def to_dtype(dtype: str | torch.dtype | None, *, parameter: str = "dtype") -> torch.dtype | None:
    """torch.dtype for a name or dtype (see :func:`dtype_name`); None stays None."""
    name = dtype_name(dtype, parameter=parameter)
    return None if name is None else DTYPES[name]


def autocast_name(autocast: str | torch.dtype | bool | None) -> str | None:
    """Canonical autocast dtype name ("float16"/"bfloat16") or None when autocast is off.

    ``True`` means float16, the dtype ``torch.autocast`` uses on CUDA by default (paper 001, Sec. III-D).
    """
    if autocast is None or autocast is False:
        return None
    if autocast is True:
        return "float16"
    try:
        name = dtype_name(autocast, parameter="autocast")
    except ValueError:
        name = None
    if name not in AUTOCAST_DTYPES:
        raise ValueError(f"autocast={autocast!r} is not valid; valid: None, False, True, {', '.join(AUTOCAST_DTYPES)}")
    return name


def memory_format_name(memory_format: str | torch.memory_format | None) -> str | None:
    """Canonical memory-format name ("contiguous_format"/"channels_last"); None (leave as is) stays None."""
    if memory_format is None:
        return None
    if isinstance(memory_format, torch.memory_format):
        for name, value in MEMORY_FORMATS.items():
            if value == memory_format:
                return name
    elif isinstance(memory_format, str):
        key = memory_format.strip().lower().removeprefix("torch.")
        key = _MEMORY_FORMAT_ALIASES.get(key, key)
        if key in MEMORY_FORMATS:
            return key
    raise ValueError(
        f"memory_format={memory_format!r} is not valid; valid: None, "
        f"{_valid(MEMORY_FORMATS, _MEMORY_FORMAT_ALIASES)}"
    )


def resolve_device(device: str | torch.device | None = "auto", *, parameter: str = "device") -> torch.device:
    """torch.device for "auto" or None (CUDA when available, else the CPU), "cpu", "cuda" or "cuda:N".

    ValueError naming ``parameter`` if the name is unknown or the device does not exist on this machine.
    """
    valid = ["auto", "cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
                               if torch.cuda.is_available() else [])
    if device is None or device == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{parameter}={device!r} is not a device; valid here: {', '.join(valid)}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{parameter}={device!r}: only cpu and cuda are measured; valid here: {', '.join(valid)}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{parameter}={device!r} but CUDA is not available on this machine; valid here: "
                             f"{', '.join(valid)}")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"{parameter}={device!r} does not exist; valid here: {', '.join(valid)}")
        dev = torch.device("cuda", index)
    return dev


def device_name(device: str | torch.device | None = "auto", parameter: str = "device") -> str:
    """:func:`resolve_device`'s device as its name ("cpu", "cuda:0"): how a configuration and every table spell it."""
    return str(resolve_device(device, parameter=parameter))


# Upper bounds of the shared checks: far above any run of the studies, low enough that a slip (an extra zero, a
# papermill text that became a huge number) fails in configure, not hours into a sweep or out of memory.
MAX_COUNT = 1_000_000  # repeats, images, epochs, vocabulary size, ...
MAX_BATCH_SIZE = 65_536  # 2**16: 32x the largest batch in the three papers (2048 per GPU, paper 002)
MAX_NUM_WORKERS = 128  # DataLoader worker processes (the sweeps skip those above the cores present)
MAX_IMAGE_SIZE = 2048  # an input image's pixels a side: 9x the papers' 224; a larger image is a slip, not a study
# An open end of a range of numbers (a fraction in (0, 1], a learning rate above 0) excludes the values this share of
# the range's width from it too: 1e-300 of the data is none of it, a timeout of 1e-300 s is no time at all.
RESOLUTION = 1e-9


def cores() -> int:
    """CPU cores this process may run on: its affinity mask where the OS has one (a container's or a job's share),
    else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def positive_int(value, *, parameter: str, minimum: int = 1, maximum: int = MAX_COUNT, bound: str = "") -> int:
    """``value`` as an int from ``minimum`` to ``maximum``; ValueError naming the parameter, the value and the range
    otherwise. Bools (``True`` is 1 to Python, a slip here), floats (4.0, NaN, inf) and text are rejected.
    ``bound`` says where the maximum comes from ("the CPU cores present")."""
    if _is_bool(value) or not (isinstance(value, int) or hasattr(value, "__index__")) or \
            not minimum <= int(value) <= maximum:
        raise ValueError(f"{parameter}={value!r} must be an integer >= {minimum} and <= {maximum}"
                         + (f" ({bound})" if bound else ""))
    return int(value)


def number(value, *, parameter: str, low: float, high: float, low_open: bool = True, high_open: bool = False
           ) -> float:
    """``value`` as a finite float in the range from ``low`` to ``high`` (open at ``low`` and closed at ``high`` by
    default: ``(0, 1]``); ValueError naming the parameter, the value and the range otherwise (bools, NaN, inf and
    text rejected: ``lr=inf`` would train to chance accuracy and only then fail). An open end also excludes the
    values within :data:`RESOLUTION` of the range's width of it: they are that end in all but name."""
    near = (high - low) * RESOLUTION
    least, most = (low + near if low_open else low), (high - near if high_open else high)
    ok = isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(value)
    if not (ok and least <= value <= most):
        tiny = ok and (low < value < least or most < value < high)
        raise ValueError(f"{parameter}={value!r} is not valid; valid: a finite number in "
                         f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
                         + (f", at least {near:g} from its open end (closer is that end in all but name)"
                            if tiny else ""))
    return float(value)


def number_list(value, *, parameter: str, low: float, high: float, high_open: bool = False, sort: bool = False,
                valid: str) -> list[float]:
    """``value`` (a list, a lone number or a list spelt as text) as a non-empty, duplicate-free list of
    :func:`number` s in the range from ``low`` (open) to ``high`` (closed unless ``high_open``), in the order given
    or sorted; ValueError naming ``parameter`` otherwise (``valid`` words the valid values for an empty list:
    "fractions in (0, 1], e.g. [1.0, 0.5]")."""
    values = as_list(value)
    if not values:
        raise ValueError(f"{parameter} is empty; valid: {valid}")
    values = list(dict.fromkeys(number(v, parameter=parameter, low=low, high=high, high_open=high_open)
                                for v in values))
    return sorted(values) if sort else values


def as_list(value) -> list:
    """A parameter as a list: a lone value (``models="resnet20"``) becomes a one-element list, and a string
    that spells a list (``papermill -p batch_sizes "[1, 4]"`` passes text) is read as that list."""
    if isinstance(value, str) and value.strip().startswith(("[", "(")):
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            pass  # not a list after all: reported as a bad value by the caller
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def positive_ints(value, *, parameter: str, minimum: int = 1, maximum: int = MAX_COUNT, bound: str = "",
                  example: str = "[1, 2, 4, 8]") -> list[int]:
    """``value`` (a list, a lone value or a list spelt as text) as a sorted, duplicate-free list of ints from
    ``minimum`` to ``maximum``; ValueError naming ``parameter`` otherwise."""
    values = as_list(value)
    valid = f"integers >= {minimum} and <= {maximum}" + (f" ({bound})" if bound else "")
    if not values:
        raise ValueError(f"{parameter} is empty; valid: a list of {valid}, e.g. {example}")
    for v in values:
        try:
            positive_int(v, parameter=parameter, minimum=minimum, maximum=maximum)
        except ValueError:
            raise ValueError(f"{parameter}: {v!r} is not valid; valid: {valid}, e.g. {example}") from None
    return sorted({int(v) for v in values})


def batch_sizes(value, parameter: str = "batch_sizes") -> list[int]:
    """``value`` as a non-empty, sorted, duplicate-free list of batch sizes (ints from 1 to :data:`MAX_BATCH_SIZE`)."""
    return positive_ints(value, parameter=parameter, maximum=MAX_BATCH_SIZE)


def batch_size(value, parameter: str = "batch_size") -> int:
    """``value`` as one batch size (an int from 1 to :data:`MAX_BATCH_SIZE`)."""
    return positive_int(value, parameter=parameter, maximum=MAX_BATCH_SIZE)


def image_size(value, parameter: str = "image_size", *, minimum: int = 32) -> int:
    """``value`` as an input image's pixels a side: an int from ``minimum`` to :data:`MAX_IMAGE_SIZE`."""
    return positive_int(value, parameter=parameter, minimum=minimum, maximum=MAX_IMAGE_SIZE)


def num_workers(value, parameter: str = "num_workers") -> list[int]:
    """``value`` as a sorted list of DataLoader worker counts (ints from 0 to :data:`MAX_NUM_WORKERS`)."""
    return positive_ints(value, parameter=parameter, minimum=0, maximum=MAX_NUM_WORKERS, example="[0, 2]")


def image_models() -> list[str]:
    """Registry models that take images."""
    from cnnlab import models  # lazy: the registry imports every architecture

    return [n for n in models.names() if models.spec(n).input_kind == "image"]


def models_list(value, parameter: str = "models", *, valid: list[str] | None = None) -> list[str]:
    """``value`` as a non-empty list of model names from ``valid`` (default: the image models)."""
    names = as_list(value)
    valid = image_models() if valid is None else valid
    if not names:
        raise ValueError(f"{parameter} is empty; valid models: {', '.join(valid)}")
    for name in names:
        if name not in valid:
            raise ValueError(f"{parameter}: {name!r} is not a known model here; valid models: {', '.join(valid)}")
    return names


def one_model(value, parameter: str = "model") -> str:
    """``value`` as one image model's registry name (a lone name, or a list of one); ValueError naming
    ``parameter`` and the valid models otherwise."""
    names = models_list(value, parameter)
    if len(names) != 1:
        raise ValueError(f"{parameter}={value!r}: give one model; valid: {', '.join(image_models())}")
    return names[0]


def names_list(value, parameter: str, *, valid, hint: str = "", required: str | None = None,
               why: str = "the baseline") -> list[str]:
    """``value`` (a list, a lone name or a list spelt as text) as a non-empty list of names from ``valid``, in the
    order given, duplicates dropped, that includes ``required`` (``why``: what it is for) where one is given;
    ValueError naming ``parameter`` and the valid names otherwise (``hint`` follows them in the message for an empty
    list, e.g. "(untiled is always measured)")."""
    names = as_list(value)
    if not names:
        raise ValueError(f"{parameter} is empty; valid: {', '.join(valid)}" + (f" {hint}" if hint else ""))
    names = list(dict.fromkeys(one_of(name, valid, parameter=parameter) for name in names))
    if required is not None and required not in names:
        raise ValueError(f"{parameter}={names!r} must include {required!r} ({why}); valid: {', '.join(valid)}")
    return names


def boolean(value, *, parameter: str) -> bool:
    """``value`` if it is True or False (not 1, 0 or "True": ``1 in (False, True)`` holds in Python); ValueError
    naming ``parameter`` otherwise."""
    if not _is_bool(value):
        raise ValueError(f"{parameter}={value!r} is not valid; valid: True, False")
    return bool(value)


def one_of(value, valid, *, parameter: str):
    """``value`` if it is in ``valid``; ValueError naming ``parameter`` and the valid values otherwise (also for a
    list or a dict, which a dict or set of names cannot even look up)."""
    try:
        known = value in valid
    except TypeError:  # unhashable: not one of the names either
        known = False
    if not known:
        raise ValueError(f"{parameter}={value!r} is not valid; valid: {', '.join(map(str, valid))}")
    return value


def threads(value, parameter: str = "threads") -> int | None:
    """``value`` as a number of intra-op CPU threads (int >= 1), or None for torch's default.

    Why a parameter: on a shared or small CPU, more OpenMP threads than free cores spin-wait on each other
    and inflate small-batch times by 10-100x (seen on a loaded 2-core machine: LeNet-5 at batch 1 took
    50 ms instead of 0.2 ms), so the quick preset, which CI runs two notebooks at a time, uses one thread.
    Every measured row records the thread count it ran with (``cpu_threads``). At most :func:`cores`: more would
    only be that spin-waiting.
    """
    return None if value is None else positive_int(value, parameter=parameter, maximum=cores(),
                                                   bound="the CPU cores present")


def set_threads(value: int | None) -> int:
    """Apply :func:`threads`'s value with ``torch.set_num_threads`` (None: leave it); return the count."""
    value = threads(value)
    if value is not None:
        torch.set_num_threads(value)
    return torch.get_num_threads()


# ------------------------------------------------------------------------------------------------ presets

def resolve(preset: str | None = None) -> str:
    """The preset to use: ``preset`` if given, else ``$CNNLAB_PRESET``, else ``auto``; ``auto`` is resolved."""
    name = (preset or os.environ.get("CNNLAB_PRESET") or "auto").lower()
    if name == "auto":
        return "standard" if torch.cuda.is_available() else "quick"
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; valid presets: auto, {', '.join(PRESETS)}")
    return name


def configure(preset: str | None, defaults: dict[str, dict], **overrides) -> SimpleNamespace:
    """A study's configuration: ``defaults[preset]`` with every non-None ``overrides`` value on top.

    ``defaults`` maps each preset name to a dict of parameters. An override naming a parameter the study
    does not have raises ValueError listing the valid ones. The namespace's ``preset`` is the resolved name.
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


# ------------------------------------------------------------------------------------------------ backends

@contextlib.contextmanager
def cudnn_benchmark(enabled: bool):
    """``torch.backends.cudnn.benchmark`` set to ``enabled`` inside the block, restored after."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = bool(enabled)
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 for CUDA matmuls and cuDNN convolutions on (``True``) or off inside the block, restored after.

    On Ampere and newer GPUs TF32 rounds fp32 operands to a 10-bit mantissa; a table that compares convolution
    strategies must say which setting it ran under. Works whichever of torch's two TF32 APIs a caller used (see
    ``cnnlab._compat``): the setting is read through the newer where it exists and always set so both agree;
    on exit every setting is put back exactly as the caller had it (:func:`cnnlab._compat.restore_tf32`).
    """
    before = tf32_state()
    for kind in TF32_API:
        set_tf32(kind, enabled)
    try:
        yield
    finally:
        restore_tf32(before)


# ------------------------------------------------------------------------------------------------ numerics

def relative_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    """max |y - reference| / max |reference|: how far another way of computing a network (a convolution strategy,
    a compiled or exported form) lands from the reference output, relative to that output's scale."""
    return ((y.float() - reference.float()).abs().max() / reference.float().abs().max().clamp_min(1e-12)).item()


def output_tolerance(device) -> float:
    """Largest :func:`relative_error` accepted between two fp32 computations of one network: 1e-3 on a CPU; 2e-2 on
    a GPU, where cuDNN and Inductor may run fp32 convolutions and matmuls in TF32 (10-bit mantissa) and in other
    layouts, so the reference itself is rounder."""
    return 2e-2 if torch.device(str(device)).type == "cuda" else 1e-3  # a named device, not resolved: no CUDA needed

