"""Validate and normalise the settings every measurement is labelled with.

One place turns user-facing names ("fp16", "channels_last", "cuda:0") into torch objects, so that a
typo fails at once with a ValueError naming the parameter and its valid values, not halfway through a
sweep, and so that every table spells a setting the same way.
"""

from __future__ import annotations

import torch

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


def to_device(device: str | torch.device | None, *, parameter: str = "device") -> torch.device:
    """torch.device for "cpu", "cuda" or "cuda:N"; ValueError if unknown or not available on this machine."""
    valid = ["cpu"] + (["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
                       if torch.cuda.is_available() else [])
    if device is None:
        raise ValueError(f"{parameter} is required; valid here: {', '.join(valid)}")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{parameter}={device!r} is not a device; valid here: {', '.join(valid)}") from None
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{parameter}={device!r}: only cpu and cuda are measured; valid here: {', '.join(valid)}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{parameter}={device!r} but CUDA is not available on this machine; valid here: cpu")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"{parameter}={device!r} does not exist; valid here: {', '.join(valid)}")
        dev = torch.device("cuda", index)
    return dev


def positive_int(value, *, parameter: str, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum``; ValueError naming the parameter otherwise (bools rejected)."""
    if isinstance(value, bool) or not isinstance(value, int) and not (hasattr(value, "__index__")):
        raise ValueError(f"{parameter}={value!r} must be an integer >= {minimum}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{parameter}={value!r} must be an integer >= {minimum}")
    return value
