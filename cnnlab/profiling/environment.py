"""The environment a result was measured in: :func:`environment`.

Every stored result carries this beside it (``sweep`` writes ``<store>.env.json``) because a latency
means nothing without the device, driver and library versions that produced it. Fields that do not
apply or cannot be read are None with a ``*_missing_reason``.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``, else "cpu"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _physical_cores() -> int | None:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo; None where that file is absent."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    cores = set()
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "core id" in fields:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores) or None


def _git(*args: str) -> str | None:
    from cnnlab import paths

    repo = paths.checkout()
    if repo is None:
        return None  # an installed package: no checkout to describe
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _driver_version() -> tuple[str | None, str | None]:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
        return (version.decode() if isinstance(version, bytes) else version), None
    except ImportError:
        return None, "pynvml (nvidia-ml-py) is not installed"
    except Exception as exc:  # NVMLError_LibraryNotFound on machines without an NVIDIA driver
        return None, f"NVML unavailable: {exc}"


def _preset() -> tuple[str | None, str | None]:
    from cnnlab.config import resolve

    try:
        return resolve(), None
    except Exception as exc:  # a bad CNNLAB_PRESET must not stop the record of the environment
        return None, f"cnnlab.config.resolve() failed: {exc}"


def environment() -> dict[str, Any]:
    """Flat, JSON-serialisable description of this machine and software stack.

    Keys: date_utc (ISO 8601), python/torch/torchvision/cnnlab versions, cuda_version, cudnn_version,
    device_name (first GPU, else the CPU model), gpu_count, gpu_names, gpu_memory_mib, driver_version,
    cpu_model, cpu_cores_logical, cpu_cores_physical, torch_num_threads, git_commit, git_dirty,
    preset, platform; plus ``*_missing_reason`` where a value could not be read.
    """
    import cnnlab

    try:
        import torchvision

        tv_version = torchvision.__version__
    except Exception:  # torchvision is optional for profiling
        tv_version = None
    cuda = torch.cuda.is_available()
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else []
    driver, driver_reason = _driver_version()
    preset, preset_reason = _preset()
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    env: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "torchvision_version": tv_version,
        "cnnlab_version": getattr(cnnlab, "__version__", None),
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "device_name": gpus[0] if gpus else cpu_model(),
        "gpu_count": len(gpus),
        "gpu_names": gpus,
        "gpu_memory_mib": [torch.cuda.get_device_properties(i).total_memory / 2**20 for i in range(len(gpus))],
        "driver_version": driver,
        "cpu_model": cpu_model(),
        "cpu_cores_logical": os.cpu_count(),
        "cpu_cores_physical": _physical_cores(),
        "torch_num_threads": torch.get_num_threads(),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "preset": preset,
        "platform": platform.platform(),
    }
    if not cuda:
        env["cuda_missing_reason"] = "torch.cuda.is_available() is False"
    if driver is None:
        env["driver_missing_reason"] = driver_reason
    if commit is None:
        env["git_missing_reason"] = "not a git checkout or git not installed"
    if preset is None:
        env["preset_missing_reason"] = preset_reason
    return env
