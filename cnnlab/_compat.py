"""Version-independent paths through torch: ``import torchvision`` beside a CPU-only torch, and TF32's two APIs.

PyPI's torchvision 0.28 wheel is linked against CUDA. Beside the CPU build of torch 2.13 its compiled
extension (``torchvision/_C.so``) cannot load, and ``import torchvision`` then fails inside
``torchvision/_meta_registrations.py`` with "operator torchvision::nms does not exist": that module
registers fake (meta) kernels for ``nms`` and ``qnms`` unconditionally, which needs the operators'
schemas. We define those two schemas (declarations only, no kernels), which is all the import needs.
Models, datasets and transforms then work; the detection operators in ``torchvision.ops`` do not, and
cnnlab never uses them.

Where the extension loads (a matching CUDA torch, Colab), this does nothing.
"""

from __future__ import annotations

import glob
import importlib.util
import os

import torch

# Schemas copied from torchvision/csrc/ops/nms.cpp (TORCH_LIBRARY_FRAGMENT(torchvision, m)).
_MISSING_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # keeps the torch.library.Library alive: dropping it would unregister the schemas
torchvision_status = "not checked"


def _extension_path(package_dir: str) -> str | None:
    found = glob.glob(os.path.join(package_dir, "_C*.so")) + glob.glob(os.path.join(package_dir, "_C*.pyd"))
    return found[0] if found else None


def patch_torchvision() -> str:
    """Register torchvision's missing operator schemas if its extension cannot load.

    Returns one of ``"absent"`` (torchvision not installed), ``"extension"`` (the compiled extension
    loads: nothing done) or ``"schemas registered"`` (the CPU shim is in place). Idempotent.
    """
    global _library, torchvision_status
    if _library is not None:
        return torchvision_status
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        torchvision_status = "absent"
        return torchvision_status
    if hasattr(torch.ops.torchvision, "nms"):
        torchvision_status = "extension"
        return torchvision_status
    so = _extension_path(os.path.dirname(spec.origin))
    if so is not None:
        try:
            torch.ops.load_library(so)
            torchvision_status = "extension"
            return torchvision_status
        except (OSError, RuntimeError):
            pass  # CUDA-linked build beside a CPU torch: fall through to the shim
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _MISSING_SCHEMAS:
        _library.define(schema)
    torchvision_status = "schemas registered"
    return torchvision_status


# TF32 has two APIs: the legacy ``allow_tf32`` flags (every supported torch) and ``fp32_precision`` (torch 2.9+,
# hierarchical: "none" defers to the parent). In torch 2.13 the legacy setters update both states, the new setter
# only its own, and reading a legacy flag raises when the two disagree (a caller set only the new API). So cnnlab
# sets TF32 through the legacy setters (consistent everywhere) and reads it through the new API where torch has it.
TF32_API = {"matmul": ("cuda", "matmul"), "conv": ("cudnn", "conv")}


def tf32_leaf(kind: str):
    """torch.backends' ``fp32_precision`` object for ``kind``, or None where this torch has only the legacy flags."""
    backend, op = TF32_API[kind]
    leaf = getattr(getattr(torch.backends, backend), op, None)
    return leaf if leaf is not None and hasattr(leaf, "fp32_precision") else None


def _legacy(kind: str):
    return torch.backends.cuda.matmul if kind == "matmul" else torch.backends.cudnn


def tf32_enabled(kind: str) -> bool:
    """Whether TF32 is on for CUDA ``kind`` ("matmul": cuBLAS, "conv": cuDNN convolutions), however it was set."""
    leaf = tf32_leaf(kind)
    if leaf is not None:
        backend = getattr(torch.backends, TF32_API[kind][0])
        for value in (leaf.fp32_precision, getattr(backend, "fp32_precision", "none"),
                      getattr(torch.backends, "fp32_precision", "none")):
            if value != "none":
                return value == "tf32"
    try:
        return bool(_legacy(kind).allow_tf32)
    except RuntimeError:  # the two states disagree and the new one says "none" all the way up: torch's default
        return False


def _read_legacy(kind: str) -> bool | None:
    """The legacy flag, or None where torch refuses to read it (its two APIs disagree: a caller set cuDNN's
    convolutions and RNNs apart through the newer one)."""
    try:
        return bool(_legacy(kind).allow_tf32)
    except RuntimeError:
        return None


def _precisions(kind: str) -> dict[str, str]:
    """The newer API's settings under ``kind`` (torch 2.9+; empty before)."""
    if tf32_leaf(kind) is None:
        return {}
    backend = getattr(torch.backends, TF32_API[kind][0])
    ops = ("matmul",) if kind == "matmul" else ("conv", "rnn")
    return {op: getattr(backend, op).fp32_precision for op in ops if hasattr(getattr(backend, op, None),
                                                                             "fp32_precision")}


def tf32_state() -> dict:
    """What :func:`restore_tf32` needs to put TF32 back as the caller had it: per kind the legacy flag where torch
    can read it, else (a mixed state set through the newer API) the newer API's settings themselves."""
    return {kind: (_read_legacy(kind), _precisions(kind)) for kind in TF32_API}


def restore_tf32(state: dict) -> None:
    """Put back what :func:`tf32_state` saved: through the legacy setter, which keeps torch's states in step,
    where the flag was readable; else the newer API's settings one by one, as they were."""
    for kind, (legacy, precisions) in state.items():
        if legacy is not None:
            set_tf32(kind, legacy)
            continue
        backend = getattr(torch.backends, TF32_API[kind][0])
        for op, value in precisions.items():
            getattr(backend, op).fp32_precision = value


def set_tf32(kind: str, enabled: bool) -> None:
    """Turn TF32 on or off for ``kind`` through the legacy setter, which keeps both of torch's states in step."""
    setattr(_legacy(kind), "allow_tf32", bool(enabled))
