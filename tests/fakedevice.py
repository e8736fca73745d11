"""CUDA's tensor-placement rules on a CPU-only machine: ``cpu:0`` plays the GPU.

On a CPU every tensor is on the one device, so a mask built on the host and applied to a GPU weight passes every
CPU test and fails on the first GPU run (issue 30: notebook 06 on an H100). Under :func:`cuda_rules`, tensors put
on :data:`DEVICE` (``torch.device("cpu:0")``: its type is "cpu", so every CPU code path runs and really computes)
are tracked as if they lived on a GPU, and a call CUDA would refuse raises CUDA's error:

- placement: ``t.to("cpu:0")`` (the device by position, by keyword, or as a tensor on it), ``Module.to("cpu:0")``
  and a factory (``torch.zeros``, ``torch.tensor``, ``*_like``, ``new_*``...) given ``device="cpu:0"`` put a tensor
  on the device; ``.cpu()`` and ``.to("cpu")`` take it off (a new tensor, as a copy to the host is; the original
  stays). ``t.device`` says ``cpu:0``, so ``torch.zeros(n, device=w.device)`` lands beside ``w``, as on a GPU.
- propagation: a call with a device tensor among its inputs (inside lists, tuples and dicts too) puts its tensor
  outputs on the device; so does ``nn.Parameter(device_tensor)``.
- rules: one call mixing device and host tensors fails ("Expected all tensors to be on the same device"), except
  0-dim host tensors (CPU scalars, which CUDA's element-wise kernels take; torch.searchsorted and torch.bucketize
  do not), ``copy_`` (copies cross devices) and indexing: a device tensor indexed by host indices is allowed, a
  host tensor indexed by device indices fails ("indices should be either on cpu or on the same device as the
  indexed tensor (cpu)"), and ``t[i] = v`` / ``index_put_`` moves its indices to ``t``'s device (its values must
  be there, or be 0-dim). ``.numpy()`` of a device tensor fails (a TypeError, as CUDA's), and so does any use of one
  in a forked child (a DataLoader worker holds host tensors only: CUDA cannot run in a forked process).

What it cannot see: work done in C++ without a Python call (inside one ``torch.lstm`` call, say), in another thread
(the mode is thread-local), or by a Python function that torch hands to the mode whole (``F.embedding``: its
inputs are checked, not the calls inside it).
"""

from __future__ import annotations

import contextlib
import os

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

DEVICE = torch.device("cpu", 0)  # the fake GPU; "cpu:0" as a string
HOST = torch.device("cpu")
MIXED = "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
INDICES = "indices should be either on cpu or on the same device as the indexed tensor (cpu)"
NUMPY = "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
FORKED = ("Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
          "'spawn' start method")
SEARCHSORTED = ("torch.searchsorted(): boundaries and input value tensors should have same device type, but got "
                "boundaries tensor device type {} and input value tensor device type {}")
GRAD = "assigned grad has data of a different type"  # a CPU grad for a CUDA tensor: another tensor type

T = torch.Tensor
_DESCRIPTORS = {name: torch._C.TensorBase.__dict__[name] for name in ("device", "data", "grad")}
_MOVES = {T.to, T.cpu, T.type_as}
_NUMPY = {T.numpy, T.__array__}
_INDEXING = {T.__getitem__}
_PUTS = {T.__setitem__, T.index_put_, T.index_put, torch.index_put}  # indices go to self's device; values must be there
# the other tensor arguments give a shape or are copied from: the result is where self is
_SELF_DECIDES = {T.copy_, T.expand_as, T.view_as, T.reshape_as, T.new_zeros, T.new_ones, T.new_empty, T.new_full,
                 T.new_tensor}
_STRICT = {torch.searchsorted, torch.bucketize}  # explicit device checks: no CPU-scalar exemption
# Module.to's plumbing; set_ makes self a view of its source, wherever that is
_UNCHECKED = {torch._has_compatible_shallow_copy_type, torch._C._nn._parse_to, T.set_}


def _tensors(obj, found: list) -> list:
    """Every tensor in ``obj``, looking inside lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        found.append(obj)
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            _tensors(item, found)
    elif isinstance(obj, dict):
        for item in obj.values():
            _tensors(item, found)
    return found


def _is_device(device) -> bool | None:
    """True for :data:`DEVICE`, False for another CPU device, None where no device is named (or one torch refuses
    here, a CUDA one: torch raises for it)."""
    if device is None or isinstance(device, int):
        return None
    device = torch.device(device)
    return device == DEVICE if device.type == "cpu" else None


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


class CudaRules(TorchFunctionMode):
    """The mode :func:`cuda_rules` enters; :meth:`on_device` says whether a tensor is on :data:`DEVICE`."""

    def __init__(self):
        super().__init__()
        self._placed = WeakIdKeyDictionary()
        self.forked = False  # set in a forked child (a DataLoader worker)

    def on_device(self, tensor: torch.Tensor) -> bool:
        return tensor in self._placed

    def _place(self, tensor: torch.Tensor, on: bool) -> None:
        if on:
            self._placed[tensor] = True
        else:
            self._placed.pop(tensor, None)

    def _refuse_in_child(self, tensors, placing: bool = False) -> None:
        if self.forked and (placing or any(self.on_device(t) for t in tensors)):
            raise RuntimeError(FORKED)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        descriptor = getattr(func, "__self__", None)
        if descriptor is _DESCRIPTORS["device"] and func.__name__ == "__get__":
            return DEVICE if self.on_device(args[0]) else func(*args, **kwargs)
        if descriptor is _DESCRIPTORS["data"] and func.__name__ == "__set__":  # Module.to: param.data = moved
            self._refuse_in_child(args[1:])
            func(*args, **kwargs)
            self._place(args[0], self.on_device(args[1]))
            return None
        if descriptor is _DESCRIPTORS["grad"] and func.__name__ == "__set__" and isinstance(args[1], torch.Tensor) \
                and self.on_device(args[0]) != self.on_device(args[1]):
            raise RuntimeError(GRAD)
        if func in _MOVES:
            return self._move(func, args, kwargs)
        tensors = _tensors((args, kwargs), [])
        if func in _NUMPY and self.on_device(args[0]):
            raise TypeError(NUMPY)
        self._refuse_in_child(tensors, placing=_is_device(kwargs.get("device")) is True)
        if func in _INDEXING or func in _PUTS:
            on = self._check_indexing(func, args, kwargs)
        else:
            if func not in _UNCHECKED and func is not T.copy_:
                self._check_mixed(func, tensors)
            on = self.on_device(args[0]) if func in _SELF_DECIDES and args else any(map(self.on_device, tensors))
            named = _is_device(kwargs.get("device"))
            if named is not None:
                on = named
        out = func(*args, **kwargs)
        if func is T.set_ and len(args) > 1 and isinstance(args[1], torch.Tensor):
            self._place(args[0], self.on_device(args[1]))
        elif on:
            for tensor in _tensors(out, []):
                self._place(tensor, True)
        return out

    def _check_mixed(self, func, tensors) -> None:
        placed = [t for t in tensors if self.on_device(t)]
        if not placed:
            return
        host = [t for t in tensors if not self.on_device(t) and (t.dim() > 0 or func in _STRICT)]
        if host:
            if func in _STRICT:
                raise RuntimeError(SEARCHSORTED.format(*("cuda:0" if self.on_device(t) else "cpu" for t in tensors[:2])))
            raise RuntimeError(f"{MIXED} (fakedevice: cpu:0 stands for cuda:0; in {_name(func)})")

    def _check_indexing(self, func, args, kwargs) -> bool:
        """CUDA's indexing rules; True when the result is on the device (where the indexed tensor is)."""
        self_on = self.on_device(args[0])
        indices = [t for t in _tensors(args[1] if len(args) > 1 else kwargs.get("indices"), [])
                   # a 0-dim integer index is read as a Python int
                   if not (t.dim() == 0 and not t.is_floating_point() and not t.is_complex())]
        if func in _INDEXING:
            if not self_on and any(map(self.on_device, indices)):
                raise RuntimeError(INDICES)
        else:
            values = _tensors(args[2:] if len(args) > 2 else kwargs.get("values"), [])
            if any(self.on_device(v) != self_on and v.dim() > 0 for v in values):
                raise RuntimeError(f"{MIXED} (fakedevice: cpu:0 stands for cuda:0; values of {_name(func)})")
        return self_on

    def _move(self, func, args, kwargs):
        """Tensor.to / .cpu() / .type_as(): torch runs on the host, the tag follows the target; a tensor that changes
        device is a new one (a copy), as on a GPU."""
        source, args, kwargs = args[0], list(args), dict(kwargs)
        if func is T.cpu:
            target = False
        elif func is T.type_as:
            target = self.on_device(args[1])
        elif "device" in kwargs:
            target = _is_device(kwargs["device"])
            if target is not None:
                kwargs["device"] = HOST
        elif len(args) > 1 and isinstance(args[1], torch.Tensor):
            target = self.on_device(args[1])
        elif len(args) > 1 and isinstance(args[1], (str, torch.device)):
            target = _is_device(args[1])
            if target is not None:
                args[1] = HOST
        else:
            target = None  # a dtype or memory format only: it stays where it is
        if target is None:
            target = self.on_device(source)
        self._refuse_in_child([source], placing=target)
        out = func(*args, **kwargs)
        if out is source and target != self.on_device(source):
            out = out.clone()
        if out is not source:
            self._place(out, target)
        return out


_ACTIVE: list[CudaRules] = []


def _after_fork_in_child() -> None:
    for rules in _ACTIVE:
        rules.forked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def cuda_rules():
    """Apply CUDA's placement rules to tensors on ``"cpu:0"`` (:data:`DEVICE`) inside the block; yields the
    :class:`CudaRules` mode (``rules.on_device(t)``). ``nn.Parameter`` is patched while it runs, and restored."""
    if _ACTIVE:
        raise RuntimeError("fakedevice.cuda_rules() is already active")
    rules = CudaRules()
    original = nn.Parameter.__dict__["__new__"]

    def new_parameter(cls, data=None, requires_grad=True):
        param = original.__func__(cls, data, requires_grad)
        if data is not None and rules.on_device(data):
            rules._place(param, True)
        return param

    nn.Parameter.__new__ = staticmethod(new_parameter)
    _ACTIVE.append(rules)
    try:
        with rules:
            yield rules
    finally:
        _ACTIVE.remove(rules)
        nn.Parameter.__new__ = original
