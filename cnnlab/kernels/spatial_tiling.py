"""Spatial tiling, a model rewrite: run a network's first layers tile by tile so no full-size activation lives.

:func:`tile_spatially` splits a model after a submodule (:func:`split_model`, torch.fx) and runs the prefix tile
by tile with the model's own layers (``F.conv2d`` and friends, no kernel of cnnlab's); it imports only torch.

The paper's memory-tiling experiment (IISc study, Sec. III.D and IV.D: ResNet-20 on 224x224 Mini-ImageNet, batch
8, tiles of 8x8 ... 64x64) splits the work into tiles so that each tile's data stays in fast memory. At the model
level the same idea bounds activation memory: the prefix of a network (e.g. ResNet-20's stem and stages) runs on
one input tile at a time; each tile carries a halo equal to the prefix's receptive-field growth, computed from the
layers' kernel, stride and padding, and the tiles' outputs are stitched into the prefix's full output. This is
"fused-layer" execution (Alwani, Chen, Ferdman & Milder 2016, "Fused-Layer CNN Accelerators", MICRO; Lin et al.
2021, "MCUNetV2: Memory-Efficient Patch-based Inference"), which name the two ways to treat the halo:

- ``mode="recompute"``: square tiles of ``tile x tile`` input pixels; every tile recomputes its halo. Simple and
  works for any prefix, but the halo is recomputed: ``((tile + 2 * halo) / tile) ** 2`` more work.
- ``mode="batched"``: the square tiles of recompute mode, all cut from the image at once and stacked along the
  batch dimension, so every layer runs as one call over all tiles (``tiles_per_launch`` bounds how many: fewer
  tiles per call, less memory, more calls). For a GPU, where one launch per tile per layer leaves it waiting on
  Python. Equal-sized tiles need the image padded beyond its border; before every convolution and pooling the
  positions outside the true image are set to the value its padding would have (0, or -inf for max pooling), so
  the tiles see exactly the borders the untiled layers see.
- ``mode="stream"`` (default): strips of ``tile`` input rows, full width, processed top to bottom; each layer
  keeps the last rows the next strip needs (a line buffer), so nothing is computed twice.

Both are exact: a tile takes its real neighbours as halo and zero padding applies only at the true image border
(stream mode pads explicitly at the top and bottom of the image only; recompute mode discards every output whose
receptive field reaches a padded crop edge). BatchNorm must be in eval mode (it then acts per pixel).

The prefix is analysed with torch.fx; supported operations: Conv2d, MaxPool2d and AvgPool2d (no ceil_mode),
element-wise modules and functions (BatchNorm, ReLU and friends, add, mul), channel padding, strided slicing of
the spatial axes (the option-A shortcut of CIFAR ResNets), and, in stream mode, a final global average pool
(``nn.AdaptiveAvgPool2d(1)``, summed strip by strip: ``until="avgpool"`` tiles a CIFAR ResNet's whole trunk
without ever stitching its output). Anything else raises ValueError naming the op.

Stream mode works out its schedule once per input size (:class:`_StreamPlan`) and then runs it as one loop: per
strip and layer one call, the rows a layer no longer needs released before the next call allocates, so peak
memory is a few strips plus every layer's halo rows.
"""

from __future__ import annotations

import copy
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F
import torch.nn.utils.fusion
from torch import nn

MODES = ("stream", "recompute", "batched")

_POINTWISE_MODULES = (
    nn.BatchNorm2d, nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.ELU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Tanh, nn.Hardswish,
    nn.Hardtanh, nn.Identity, nn.Dropout, nn.Dropout2d, nn.LocalResponseNorm,
)  # fmt: skip
_POINTWISE_FUNCTIONS = {
    operator.add, operator.mul, operator.sub, operator.iadd, torch.add, torch.mul, torch.sub, F.relu, F.relu_,
    torch.relu, torch.relu_, F.relu6, F.leaky_relu, F.gelu, F.silu, F.hardswish, F.dropout, torch.sigmoid,
    torch.tanh, F.batch_norm,
}  # fmt: skip
_POINTWISE_METHODS = {"relu", "relu_", "add", "add_", "mul", "mul_", "sigmoid", "tanh", "contiguous", "clone"}


@dataclass(frozen=True)
class Geometry:
    """Where an output pixel looks in the input, along one axis: output o reads input o*stride - left ... o*stride
    + right (inclusive). ``left`` and ``right`` are the halo in input pixels; receptive field = left + right + 1."""

    stride: int = 1
    left: int = 0
    right: int = 0

    @property
    def receptive_field(self) -> int:
        return self.left + self.right + 1

    def then_window(self, kernel: int, stride: int, padding: int) -> Geometry:
        """Geometry after a window op (kernel, stride, padding) applied to this one's output."""
        return Geometry(self.stride * stride, self.left + padding * self.stride,
                        self.right + (kernel - 1 - padding) * self.stride)  # fmt: skip


@dataclass(frozen=True)
class _Window:
    kernel: int
    stride: int
    padding: int

    def size(self, n: int) -> int:
        return (n + 2 * self.padding - self.kernel) // self.stride + 1

    def needs(self, r0: int, r1: int) -> tuple[int, int]:
        """Input rows [lo, hi) that output rows [r0, r1) read (may lie outside the image: padding)."""
        return r0 * self.stride - self.padding, (r1 - 1) * self.stride - self.padding + self.kernel


_POINT = _Window(1, 1, 0)


@dataclass
class _Info:
    node: fx.Node
    kind: str  # "input", "window", "subsample", "pointwise", "global" (a final global average pool), "output"
    inputs: list  # tensor-valued input nodes
    window: tuple = (_POINT, _POINT)  # per axis (H, W)
    geometry: tuple = (Geometry(), Geometry())
    module: nn.Module | None = None


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _window_of_module(module: nn.Module, name: str) -> tuple[_Window, _Window]:
    if isinstance(module, nn.Conv2d):
        if module.padding_mode != "zeros" or isinstance(module.padding, str):
            raise ValueError(f"spatial tiling supports Conv2d with numeric zero padding only; {name} has "
                             f"padding={module.padding!r}, padding_mode={module.padding_mode!r}")  # fmt: skip
        k, s, p, d = module.kernel_size, module.stride, module.padding, module.dilation
    elif isinstance(module, (nn.MaxPool2d, nn.AvgPool2d)):
        if module.ceil_mode:
            raise ValueError(f"spatial tiling does not support ceil_mode=True pooling ({name})")
        if isinstance(module, nn.MaxPool2d) and module.return_indices:
            raise ValueError(f"spatial tiling does not support return_indices=True ({name})")
        if isinstance(module, nn.AvgPool2d) and not module.count_include_pad and _pair(module.padding) != (0, 0):
            raise ValueError(f"spatial tiling needs count_include_pad=True for a padded AvgPool2d ({name})")
        k, p = _pair(module.kernel_size), _pair(module.padding)
        s = _pair(module.stride if module.stride is not None else module.kernel_size)
        d = _pair(getattr(module, "dilation", 1))
    else:
        raise AssertionError(name)
    k = _pair(k)
    return tuple(_Window(d[i] * (k[i] - 1) + 1, _pair(s)[i], _pair(p)[i]) for i in range(2))


def _slice_window(index, name: str) -> tuple[_Window, _Window]:
    """Window of ``x[:, :, ::a, ::b]``-style indexing; only full slices with a step on the spatial axes."""
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > 4 or not all(isinstance(i, slice) for i in index):
        raise ValueError(f"spatial tiling supports only slicing like x[:, :, ::s, ::s], got {index!r} at {name}")
    steps = []
    for axis, sl in enumerate(index):
        if sl.start not in (None, 0) or sl.stop is not None:
            raise ValueError(f"spatial tiling supports slices with a step only (no start/stop), got {index!r} "
                             f"at {name}")  # fmt: skip
        if axis < 2 and sl.step not in (None, 1):
            raise ValueError(f"spatial tiling cannot slice the batch or channel axis with a step ({name})")
        steps.append(sl.step or 1)
    steps += [1] * (4 - len(steps))
    return _Window(1, steps[2], 0), _Window(1, steps[3], 0)


def _describe(node: fx.Node, modules: dict[str, nn.Module]) -> _Info:
    tensors = [a for a in node.all_input_nodes]
    if node.op == "placeholder":
        return _Info(node, "input", [])
    if node.op == "output":
        return _Info(node, "output", tensors)
    if node.op == "call_module":
        module = modules[node.target]
        if isinstance(module, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)):
            return _Info(node, "window", tensors, _window_of_module(module, node.target), module=module)
        if isinstance(module, _POINTWISE_MODULES):
            return _Info(node, "pointwise", tensors, module=module)
        if isinstance(module, nn.AdaptiveAvgPool2d) and _pair(module.output_size) == (1, 1):
            return _Info(node, "global", tensors, module=module)
        raise ValueError(f"spatial tiling does not support module {node.target} ({type(module).__name__}); "
                         "supported: Conv2d, MaxPool2d, AvgPool2d, element-wise modules and a final "
                         "AdaptiveAvgPool2d(1)")  # fmt: skip
    if node.op == "call_function":
        if node.target is operator.getitem:
            return _Info(node, "subsample", tensors, _slice_window(node.args[1], node.name))
        if node.target is F.pad:
            pad = tuple(node.args[1]) if len(node.args) > 1 else tuple(node.kwargs["pad"])
            mode = node.kwargs.get("mode", node.args[2] if len(node.args) > 2 else "constant")
            if mode != "constant" or any(pad[:4]):
                raise ValueError(f"spatial tiling supports F.pad of the channel axis only, got pad={pad} ({node.name})")
            return _Info(node, "pointwise", tensors)
        if node.target in _POINTWISE_FUNCTIONS:
            return _Info(node, "pointwise", tensors)
    if node.op == "call_method" and node.target in _POINTWISE_METHODS:
        return _Info(node, "pointwise", tensors)
    raise ValueError(f"spatial tiling does not support {node.op} {getattr(node.target, '__name__', node.target)!r} "
                     f"({node.name}); supported: convolution, pooling, element-wise ops, channel padding and "
                     "strided spatial slicing")  # fmt: skip


def _trace(prefix) -> fx.GraphModule:
    if isinstance(prefix, (list, tuple)):
        prefix = nn.Sequential(*prefix)
    if isinstance(prefix, fx.GraphModule):
        return prefix
    if not isinstance(prefix, nn.Module):
        raise ValueError(f"prefix must be an nn.Module or a list of modules, got {type(prefix).__name__}")
    return fx.symbolic_trace(prefix)


def fold_batchnorm(prefix) -> fx.GraphModule:
    """A copy of ``prefix`` (traced) with every eval-mode BatchNorm2d that follows a Conv2d as its only user folded
    into that convolution's weights and bias (``torch.nn.utils.fusion.fuse_conv_bn_eval``): the same function up to
    rounding, one call fewer per strip and layer. The caller's modules are not changed."""
    gm = copy.deepcopy(_trace(prefix))
    modules = dict(gm.named_modules())
    for node in list(gm.graph.nodes):
        bn = modules.get(node.target) if node.op == "call_module" else None
        src = node.args[0] if isinstance(bn, nn.BatchNorm2d) and node.args else None
        conv = modules.get(src.target) if isinstance(src, fx.Node) and src.op == "call_module" else None
        if not isinstance(conv, nn.Conv2d) or len(src.users) != 1 or bn.training or bn.running_mean is None:
            continue
        gm.add_submodule(src.target, torch.nn.utils.fusion.fuse_conv_bn_eval(conv, bn))
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return gm


def analyse(prefix) -> list[_Info]:
    """Describe every node of the traced prefix with its window and geometry. Raises ValueError if unsupported."""
    gm = _trace(prefix)
    modules = dict(gm.named_modules())
    infos: dict[fx.Node, _Info] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise ValueError(f"the prefix must take exactly one input, got {len(placeholders)}")
    for node in gm.graph.nodes:
        info = _describe(node, modules)
        if info.kind in ("window", "subsample"):
            if len(info.inputs) != 1:
                raise ValueError(f"{node.name} must have one tensor input, got {len(info.inputs)}")
            src = infos[info.inputs[0]].geometry
            info.geometry = tuple(
                src[a].then_window(info.window[a].kernel, info.window[a].stride, info.window[a].padding)
                for a in range(2)
            )
        elif info.kind in ("pointwise", "output", "global"):
            geoms = [infos[i].geometry for i in info.inputs]
            if not geoms:
                raise ValueError(f"{node.name} has no tensor input")
            for a in range(2):
                if len({g[a].stride for g in geoms}) != 1:
                    raise ValueError(f"{node.name} combines tensors of different strides {[g[a] for g in geoms]}")
            info.geometry = tuple(
                Geometry(geoms[0][a].stride, max(g[a].left for g in geoms), max(g[a].right for g in geoms))
                for a in range(2)
            )
        if any(infos[src].kind == "global" for src in info.inputs) and info.kind != "output":
            raise ValueError(f"spatial tiling supports a global average pool only as the prefix's last operation; "
                             f"{node.name} reads one")
        infos[node] = info
    return list(infos.values())


def receptive_field(prefix) -> tuple[Geometry, Geometry]:
    """Geometry of the prefix's output along (H, W): total stride and halo (left, right) in input pixels."""
    return analyse(prefix)[-1].geometry


def _heights(infos: list[_Info], size: tuple[int, int]) -> dict[fx.Node, tuple[int, int]]:
    sizes: dict[fx.Node, tuple[int, int]] = {}
    for info in infos:
        if info.kind == "input":
            sizes[info.node] = size
        elif info.kind == "global":
            sizes[info.node] = (1, 1)
        elif info.kind in ("window", "subsample"):
            src = sizes[info.inputs[0]]
            if info.kind == "subsample":
                sizes[info.node] = tuple(math.ceil(src[a] / info.window[a].stride) for a in range(2))
            else:
                sizes[info.node] = tuple(info.window[a].size(src[a]) for a in range(2))
            if min(sizes[info.node]) < 1:
                raise ValueError(f"input {size} is too small for {info.node.name}")
        else:
            sizes[info.node] = sizes[info.inputs[0]]
    return sizes


def output_size(prefix, size: tuple[int, int]) -> tuple[int, int]:
    """Spatial size (H, W) of the prefix's output for an input of spatial size ``size``."""
    infos = analyse(prefix)
    return _heights(infos, tuple(size))[infos[-1].node]


def _check_eval(module: nn.Module) -> None:
    for name, m in module.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training:
            raise ValueError(f"spatial tiling needs eval mode: BatchNorm {name!r} is training and would normalise "
                             "each tile with its own batch statistics; call model.eval() first")  # fmt: skip
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is None:
            raise ValueError(f"spatial tiling needs running statistics: BatchNorm {name!r} has "
                             "track_running_stats=False, so even in eval mode it would normalise each tile with its "
                             "own statistics")  # fmt: skip


def _tile_pair(tile, geometry: tuple[Geometry, Geometry]) -> tuple[int, int]:
    t = _pair(tile) if isinstance(tile, (int, tuple, list)) and not isinstance(tile, bool) else None
    if t is None or min(t) < 1:
        raise ValueError(f"tile must be a positive int or pair of ints (input pixels), got {tile!r}")
    for a in range(2):
        if t[a] % geometry[a].stride:
            raise ValueError(f"tile {tile!r} must be a multiple of the prefix's total stride "
                             f"{(geometry[0].stride, geometry[1].stride)}")  # fmt: skip
    return t


_COMPUTE, _KEEP, _DROP, _EMIT, _SUM = range(5)  # the instructions of a stream plan


class _StreamPlan:
    """Row streaming, planned once per input size: which rows every node computes when, and which it keeps.

    The schedule is worked out on row numbers alone (no tensors): the prefix's output is produced ``tile`` input
    rows at a time, top to bottom; a node computes the rows its consumers pull, at most ``tile`` input rows' worth at
    a time (``tile / stride`` rows at a node of total stride ``stride``: the first strip, which must also fill every
    layer's halo, is computed in such chunks too, so no strip is larger than the rest); after each computation the
    rows no consumer will read again are dropped, and a kept halo is copied out of its strip so the strip's memory
    is freed (the line buffer). A read within one kept piece is a view, a read across pieces (the halo kept from the
    previous strip plus the new strip) concatenates.

    Running the plan (:meth:`run`) is then one loop over its instructions, with no analysis left in it: per strip
    and node one call of the layer, so the Python cost per call is small beside the convolution it launches. A
    final global average pool (``nn.AdaptiveAvgPool2d(1)``) is summed strip by strip, so the prefix's full-size
    output is never stitched either.
    """

    def __init__(self, infos: list[_Info], size: tuple[int, int], tile_rows: int, conv2d=F.conv2d):
        self.sizes = _heights(infos, size)
        by_node = {i.node: i for i in infos}
        users: dict[fx.Node, list[_Info]] = {i.node: [] for i in infos}
        for info in infos:
            for src in info.inputs:
                users[src].append(info)
        last = by_node[infos[-1].inputs[0]]  # the node whose output the prefix returns
        self.pooled = last.kind == "global"
        target = last.inputs[0] if self.pooled else last.node  # the rows streamed out
        self.target_size = self.sizes[target]
        pieces: dict[fx.Node, list[tuple[int, int, int]]] = {i.node: [] for i in infos}  # (start, end, slot)
        done = {i.node: 0 for i in infos}
        program: list[tuple] = []
        slots = iter(range(1, 1 << 62))
        inp = infos[0].node
        pieces[inp], done[inp] = [(0, self.sizes[inp][0], 0)], self.sizes[inp][0]  # slot 0: the input

        def chunk(node: fx.Node) -> int:
            return max(1, tile_rows // by_node[node].geometry[0].stride)

        def fetch(node: fx.Node, lo: int, hi: int) -> tuple:
            parts = tuple((slot, max(lo, start) - start, min(hi, end) - max(lo, start))
                          for start, end, slot in pieces[node] if max(lo, start) < min(hi, end))
            if sum(p[2] for p in parts) != hi - lo:
                raise RuntimeError(f"{node.name}: rows [{lo}, {hi}) not buffered; line buffer bug")
            return parts

        def trim(node: fx.Node) -> None:
            if by_node[node].kind == "input":
                return  # the caller's input tensor: not ours to free
            keep_from = done[node]
            for user in users[node]:
                if user.kind == "output":
                    return
                s = user.window[0].stride
                pad = user.window[0].padding if user.kind == "window" else 0
                keep_from = min(keep_from, max(0, done[user.node] * s - pad))
            kept = []
            for start, end, slot in pieces[node]:
                if end <= keep_from:
                    program.append((_DROP, slot))
                    continue
                if start < keep_from:
                    new = next(slots)
                    program.append((_KEEP, slot, new, keep_from - start, end - keep_from))
                    start, slot = keep_from, new
                kept.append((start, end, slot))
            pieces[node] = kept

        def produce(node: fx.Node, upto: int) -> None:
            info = by_node[node]
            while done[node] < upto:
                r0 = done[node]
                r1 = min(upto, r0 + chunk(node))
                top = bottom = 0
                if info.kind == "window":
                    src = info.inputs[0]
                    lo, hi = info.window[0].needs(r0, r1)
                    h_in = self.sizes[src][0]
                    produce(src, min(hi, h_in))
                    reads = (fetch(src, max(lo, 0), min(hi, h_in)),)
                    top, bottom = max(0, -lo), max(0, hi - h_in)
                else:
                    reads = []
                    for src in info.inputs:
                        if info.kind == "subsample":
                            s = info.window[0].stride
                            lo, hi = r0 * s, (r1 - 1) * s + 1
                        else:
                            lo, hi = r0, r1
                        produce(src, hi)
                        reads.append(fetch(src, lo, hi))
                    reads = tuple(reads)
                slot = next(slots)
                pieces[node].append((r0, r1, slot))
                done[node] = r1
                # The inputs' rows no consumer reads again are released once read, before the call: where the
                # read concatenated (halo plus strip) the strip is then freed before the output is allocated.
                mark = len(program)
                for src in info.inputs:
                    trim(src)
                release = tuple(program[mark:])
                del program[mark:]
                program.append((_COMPUTE, info, slot, reads, top, bottom, r1 - r0, release))

        total = self.target_size[0]
        step = chunk(target)
        for r0 in range(0, total, step):
            r1 = min(total, r0 + step)
            produce(target, r1)
            program.append((_SUM if self.pooled else _EMIT, fetch(target, r0, r1), r0))
            if self.pooled:
                done[last.node] = r1
                trim(target)
            else:  # the stitched output holds these rows now
                program += [(_DROP, slot) for _, _, slot in pieces[target]]
                pieces[target] = []
        self.program = program
        self.calls = {info.node: _caller(info, conv2d) for info in infos
                      if info.kind not in ("input", "output", "global")}

    def run(self, x: torch.Tensor) -> torch.Tensor:
        slots: dict[int, torch.Tensor] = {0: x}
        out = None
        calls = self.calls
        for ins in self.program:
            op = ins[0]
            if op == _COMPUTE:
                _, info, slot, reads, top, bottom, rows, release = ins
                tensors = [_gather(slots, r) for r in reads]
                for old in release:
                    if old[0] == _DROP:
                        del slots[old[1]]
                    else:
                        slots[old[2]] = slots.pop(old[1]).narrow(2, old[3], old[4]).clone()
                y = calls[info.node](tensors, top, bottom)
                del tensors
                if y.shape[2] != rows:
                    raise RuntimeError(f"{info.node.name}: expected {rows} rows, got {y.shape[2]} (geometry mismatch)")
                slots[slot] = y
                del y  # the slot is its only holder: a later release frees it
            elif op == _DROP:
                del slots[ins[1]]
            elif op == _KEEP:
                _, old, new, offset, length = ins
                slots[new] = slots.pop(old).narrow(2, offset, length).clone()
            else:
                piece = _gather(slots, ins[1])
                if op == _SUM:  # in float32 at least: a sum of many rows in half precision would lose digits
                    part = piece.sum((2, 3), keepdim=True, dtype=torch.promote_types(piece.dtype, torch.float32))
                    out = part if out is None else out.add_(part)
                    continue
                if out is None:
                    shape = (piece.shape[0], piece.shape[1], self.target_size[0], piece.shape[3])
                    out = torch.empty(shape, dtype=piece.dtype, device=piece.device)
                out[:, :, ins[2] : ins[2] + piece.shape[2]] = piece
        if self.pooled:
            out = out.div_(self.target_size[0] * self.target_size[1]).to(x.dtype)
        return out


def _gather(slots: dict[int, torch.Tensor], parts: tuple) -> torch.Tensor:
    """The rows ``parts`` ((slot, offset, length), ...) name, as a view of one piece or concatenated."""
    if len(parts) == 1:
        slot, offset, length = parts[0]
        t = slots[slot]
        return t if offset == 0 and length == t.shape[2] else t.narrow(2, offset, length)
    return torch.cat([slots[s].narrow(2, o, n) for s, o, n in parts], 2)


def _caller(info: _Info, conv2d=F.conv2d):
    """``f(tensors, top, bottom)``: the node's operation on the rows read from each of its inputs (in
    ``info.inputs`` order), a window op padded at the true top and bottom border only (``top``/``bottom`` rows);
    convolutions by ``conv2d`` (F.conv2d's signature)."""
    node, m = info.node, info.module
    if info.kind == "window":
        wh, ww = info.window
        if isinstance(m, nn.Conv2d):
            weight, bias, stride, dilation, groups = m.weight, m.bias, m.stride, m.dilation, m.groups
            pad_w = m.padding[1]

            def conv(ts, top, bottom):
                x = ts[0]
                if not (top or bottom):
                    return conv2d(x, weight, bias, stride, (0, pad_w), dilation, groups)
                # At the true border: the convolution's own (symmetric) zero padding instead of a padded copy of
                # the rows, then a view without the rows that the padding on the other side added.
                pad = max(top, bottom)
                skip, rem = divmod(pad - top, stride[0])
                if rem:  # the padding's rows do not fall on the stride's grid: pad a copy
                    return conv2d(F.pad(x, (0, 0, top, bottom)), weight, bias, stride, (0, pad_w), dilation, groups)
                y = conv2d(x, weight, bias, stride, (pad, pad_w), dilation, groups)
                rows = (x.shape[2] + top + bottom - dilation[0] * (weight.shape[2] - 1) - 1) // stride[0] + 1
                return y.narrow(2, skip, rows)
            return conv
        if isinstance(m, nn.MaxPool2d):
            def max_pool(ts, top, bottom):
                x = F.pad(ts[0], (0, 0, top, bottom), value=-math.inf) if top or bottom else ts[0]
                return F.max_pool2d(x, _pair(m.kernel_size), (wh.stride, ww.stride), (0, ww.padding),
                                    _pair(m.dilation))
            return max_pool

        def avg_pool(ts, top, bottom):  # count_include_pad=True: padding counts as zeros
            x = F.pad(ts[0], (0, 0, top, bottom)) if top or bottom else ts[0]
            return F.avg_pool2d(x, _pair(m.kernel_size), (wh.stride, ww.stride), (0, ww.padding), False, True,
                                m.divisor_override)
        return avg_pool
    if isinstance(m, nn.BatchNorm2d) and not m.training:  # eval mode (checked): its affine map, no module call
        bn = (m.weight, m.bias, m.running_mean, m.running_var, False, 0.0, m.eps, torch.backends.cudnn.enabled)
        return lambda ts, top, bottom: torch.batch_norm(ts[0], *bn)  # what F.batch_norm calls, without its checks
    index = {src: i for i, src in enumerate(info.inputs)}
    copy_inputs = (node.op == "call_module" and getattr(m, "inplace", False)) or bool(node.kwargs.get("inplace")) \
        or (node.op == "call_method" and node.target.endswith("_"))
    # An in-place op would write into another node's line buffer: it runs on a copy instead.
    direct = _DIRECT.get(node.target) if node.op == "call_function" else None
    if direct is not None and not node.kwargs and list(node.args) == list(info.inputs):  # f(a) or f(a, b)
        return lambda ts, top, bottom: direct(*ts)  # the common case without binding arguments per call

    def bind(ts):
        if copy_inputs:
            ts = [t.clone() for t in ts]
        return (fx.node.map_arg(node.args, lambda n: ts[index[n]]), fx.node.map_arg(node.kwargs, lambda n: ts[index[n]]))

    if node.op == "call_module":
        return lambda ts, top, bottom: _call_module(m, bind(ts))
    if node.op == "call_function":
        def function(ts, top, bottom):
            args, kwargs = bind(ts)
            return node.target(*args, **kwargs)
        return function

    def method(ts, top, bottom):
        (self_arg, *rest), kwargs = bind(ts)
        return getattr(self_arg, node.target)(*rest, **kwargs)
    return method


# Functions a stream plan calls with its tensors as they are, when those are the node's only arguments.
_DIRECT = {operator.add: operator.add, operator.mul: operator.mul, torch.add: torch.add, torch.mul: torch.mul,
           F.relu: torch.relu, torch.relu: torch.relu}


def _call_module(module: nn.Module, bound: tuple) -> torch.Tensor:
    return module(*bound[0], **bound[1])


def _run_batched(infos: list[_Info], geometry, x: torch.Tensor, tile: tuple[int, int],
                 tiles_per_launch: int | None) -> torch.Tensor:
    """Square tiles with their halo stacked along the batch dimension, every layer one call per group of tiles.

    A tile's crop starts on a multiple of the total stride, so at every layer its local position ``i`` is the
    image's position ``crop_start / stride + i``: positions outside the image are masked before each window op, and
    the tile's outputs between its halos are exact (their receptive field lies inside the crop)."""
    size = tuple(x.shape[-2:])
    sizes = _heights(infos, size)
    out_size = sizes[infos[-1].node]
    stride = [g.stride for g in geometry]
    left = [math.ceil(g.left / g.stride) * g.stride for g in geometry]  # halos on the stride's grid
    right = [math.ceil(g.right / g.stride) * g.stride for g in geometry]
    t_out = [tile[a] // stride[a] for a in range(2)]
    counts = [math.ceil(out_size[a] / t_out[a]) for a in range(2)]
    step = [t_out[a] * stride[a] for a in range(2)]
    crop = [step[a] + left[a] + right[a] for a in range(2)]
    extent = [counts[a] * step[a] + left[a] + right[a] for a in range(2)]  # the padded image the tiles cover
    padded = F.pad(x, (left[1], extent[1] - left[1] - size[1], left[0], extent[0] - left[0] - size[0]))
    local = _heights(infos, tuple(crop))  # every tile's size at every node
    n = x.shape[0]
    origins = [(i * step[0] - left[0], j * step[1] - left[1]) for i in range(counts[0]) for j in range(counts[1])]
    per_launch = len(origins) if tiles_per_launch is None else tiles_per_launch
    by_node = {i.node: i for i in infos}
    users = {i.node: 0 for i in infos}
    for info in infos:
        for src in info.inputs:
            users[src] += 1
    out = None
    keep = [left[a] // stride[a] for a in range(2)]
    for g0 in range(0, len(origins), per_launch):
        group = origins[g0 : g0 + per_launch]
        tiles = torch.stack([padded[:, :, r + left[0] : r + left[0] + crop[0], c + left[1] : c + left[1] + crop[1]]
                             for r, c in group])  # (tiles, N, C, crop, crop)
        env = {infos[0].node: tiles.flatten(0, 1)}
        remaining = dict(users)
        for info in infos[1:]:
            node = info.node
            if info.kind == "output":
                y = env[info.inputs[0]]
                break
            values = env
            if info.kind == "window":
                src = info.inputs[0]
                fill = -math.inf if isinstance(info.module, nn.MaxPool2d) else 0.0
                values = {**env, src: _mask_outside(env[src], group, n, [g.stride for g in by_node[src].geometry],
                                                     sizes[src], local[src], fill)}  # fmt: skip
            env[node] = _eval(info, values)
            for src in info.inputs:
                remaining[src] -= 1
                if remaining[src] == 0 and src is not infos[0].node:
                    del env[src]
        y = y.unflatten(0, (len(group), n))[:, :, :, keep[0] : keep[0] + t_out[0], keep[1] : keep[1] + t_out[1]]
        if out is None:
            out = torch.empty((n, y.shape[2], counts[0] * t_out[0], counts[1] * t_out[1]), dtype=y.dtype,
                              device=y.device)  # fmt: skip
        for k, (r, c) in enumerate(group):
            i, j = (r + left[0]) // step[0], (c + left[1]) // step[1]
            out[:, :, i * t_out[0] : (i + 1) * t_out[0], j * t_out[1] : (j + 1) * t_out[1]] = y[k]
    return out[:, :, : out_size[0], : out_size[1]].contiguous()


def _mask_outside(t: torch.Tensor, group, n: int, stride, true_size, local_size, fill: float) -> torch.Tensor:
    """``t`` (tiles x N, C, h, w) with the positions outside the image at this resolution set to ``fill``."""
    rows = torch.stack([torch.arange(local_size[0]) + r // stride[0] for r, _ in group])
    cols = torch.stack([torch.arange(local_size[1]) + c // stride[1] for _, c in group])
    inside_r, inside_c = (rows >= 0) & (rows < true_size[0]), (cols >= 0) & (cols < true_size[1])
    if bool(inside_r.all()) and bool(inside_c.all()):
        return t
    outside = ~(inside_r[:, :, None] & inside_c[:, None, :])  # (tiles, h, w)
    outside = outside.repeat_interleave(n, 0)[:, None].to(t.device)
    return t.masked_fill(outside, fill)


def _eval(info: _Info, env: dict) -> torch.Tensor:
    """The node's own operation (its module, function or method) on the values of its inputs."""
    node = info.node
    args = fx.node.map_arg(node.args, lambda a: env[a])
    kwargs = fx.node.map_arg(node.kwargs, lambda a: env[a])
    if node.op == "call_module":
        return info.module(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    self_arg, *rest = args
    return getattr(self_arg, node.target)(*rest, **kwargs)


def _run_recompute(prefix: nn.Module, geometry, out_size, x: torch.Tensor, tile: tuple[int, int]) -> torch.Tensor:
    """Square tiles, each with its full halo recomputed; crops start on multiples of the total stride."""
    out = None
    size = x.shape[-2:]
    steps = [tile[a] // geometry[a].stride for a in range(2)]
    for a0 in range(0, out_size[0], steps[0]):
        a1 = min(out_size[0], a0 + steps[0])
        for b0 in range(0, out_size[1], steps[1]):
            b1 = min(out_size[1], b0 + steps[1])
            crop, keep = [], []
            for axis, (o0, o1) in enumerate(((a0, a1), (b0, b1))):
                g = geometry[axis]
                # Start on a multiple of the total stride so every layer's sampling grid lines up with the image's.
                c0 = max(0, o0 * g.stride - g.left) // g.stride * g.stride
                c1 = min(size[axis], (o1 - 1) * g.stride + g.right + 1)
                crop.append((c0, c1))
                keep.append((o0 - c0 // g.stride, o1 - c0 // g.stride))
            piece = prefix(x[:, :, crop[0][0] : crop[0][1], crop[1][0] : crop[1][1]].contiguous())
            piece = piece[:, :, keep[0][0] : keep[0][1], keep[1][0] : keep[1][1]]
            if piece.shape[-2:] != (a1 - a0, b1 - b0):
                raise RuntimeError(f"tile output {tuple(piece.shape[-2:])} != {(a1 - a0, b1 - b0)} (geometry mismatch)")
            if out is None:
                out = torch.empty((*piece.shape[:2], *out_size), dtype=piece.dtype, device=piece.device)
            out[:, :, a0:a1, b0:b1] = piece
    return out


class SpatiallyTiled(nn.Module):
    """Runs ``prefix`` (a module or a list of layers, applied in order) over tiles of its input and stitches them.

    tile: input pixels per tile, an int or (h, w), a multiple of the prefix's total stride. mode: "stream" (strips
    of ``tile`` rows, halo rows kept in line buffers, nothing recomputed), "recompute" (tile x tile squares, halo
    recomputed, one call per tile and layer) or "batched" (the same squares stacked along the batch dimension:
    one call per layer for every ``tiles_per_launch`` tiles, None: all). conv2d (stream mode): the function the
    strips' convolutions call, F.conv2d's signature (None: F.conv2d), e.g. a Triton kernel. fold_bn: fold each
    eval-mode BatchNorm into the convolution before it (:func:`fold_batchnorm`), one call fewer per strip and layer
    (folded once, here: weights changed afterwards are not seen).
    forward(x) returns what ``prefix(x)`` returns (same shape and dtype, NCHW contiguous), up to floating-point
    rounding. Needs eval mode for BatchNorm. In stream mode the prefix may end in a global average
    pool (``nn.AdaptiveAvgPool2d(1)``), summed strip by strip.
    """

    def __init__(self, prefix, tile=32, mode: str = "stream", *, tiles_per_launch: int | None = None,
                 conv2d=None, fold_bn: bool = False) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not isinstance(fold_bn, bool):
            raise ValueError(f"fold_bn={fold_bn!r}: True (BatchNorm folded into the convolution before it) or False")
        if fold_bn:
            _check_eval(_trace(prefix))
        self.fold_bn = fold_bn
        self.prefix = fold_batchnorm(prefix) if fold_bn else _trace(prefix)
        self.infos = analyse(self.prefix)
        self.geometry = self.infos[-1].geometry
        self.tile = _tile_pair(tile, self.geometry)
        self.mode = mode
        if mode != "stream" and any(i.kind == "global" for i in self.infos):
            raise ValueError(f"a prefix that ends in a global average pool needs mode='stream' (it sums the pool "
                             f"strip by strip); mode={mode!r} would pool each tile on its own")
        if tiles_per_launch is not None and (mode != "batched" or isinstance(tiles_per_launch, bool)
                                             or not isinstance(tiles_per_launch, int) or tiles_per_launch < 1):
            raise ValueError(f"tiles_per_launch={tiles_per_launch!r}: a positive int, with mode='batched' only "
                             "(None: every tile in one call per layer)")
        self.tiles_per_launch = tiles_per_launch
        if conv2d is not None and (mode != "stream" or not callable(conv2d)):
            raise ValueError(f"conv2d={conv2d!r}: a function with F.conv2d's signature, with mode='stream' only (the "
                             "other modes call the prefix's own modules)")
        self.conv2d = conv2d
        self._plans: dict[tuple[int, int], _StreamPlan] = {}  # stream mode: one plan per input size

    @property
    def halo(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(left, right) halo in input pixels along H and W."""
        return tuple((g.left, g.right) for g in self.geometry)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"x must be a 4-D (N, C, H, W) tensor, got shape {tuple(x.shape)}")
        _check_eval(self.prefix)
        if self.mode == "stream":
            size = tuple(x.shape[-2:])
            if size not in self._plans:
                self._plans[size] = _StreamPlan(self.infos, size, self.tile[0], self.conv2d or F.conv2d)
            return self._plans[size].run(x)
        if self.mode == "batched":
            return _run_batched(self.infos, self.geometry, x, self.tile, self.tiles_per_launch)
        out_size = _heights(self.infos, tuple(x.shape[-2:]))[self.infos[-1].node]
        return _run_recompute(self.prefix, self.geometry, out_size, x, self.tile)

    def extra_repr(self) -> str:
        per_launch = f", tiles_per_launch={self.tiles_per_launch}" if self.mode == "batched" else ""
        folded = ", fold_bn=True" if self.fold_bn else ""
        return (f"tile={self.tile}, mode={self.mode!r}, halo={self.halo}, stride={self.geometry[0].stride}"
                f"{per_launch}{folded}")


def _module_paths(node: fx.Node) -> list[str]:
    paths = [v[0] if isinstance(v, tuple) else str(v) for v in node.meta.get("nn_module_stack", {}).values()]
    if node.op == "call_module":
        paths.append(node.target)
    return paths


def split_model(model: nn.Module, until: str) -> tuple[fx.GraphModule, fx.GraphModule]:
    """Split ``model`` after the submodule named ``until`` (e.g. "layer1"): returns (prefix, rest) GraphModules
    with ``rest(prefix(x)) == model(x)``. They share ``model``'s parameters. Raises ValueError if ``until`` is not
    a submodule or the cut is not a single tensor (a later op reads an earlier activation)."""
    gm = fx.symbolic_trace(model)
    nodes = list(gm.graph.nodes)
    inside = [i for i, n in enumerate(nodes) if any(p == until or p.startswith(until + ".") for p in _module_paths(n))]
    if not inside:
        names = [name for name, _ in model.named_children()]
        raise ValueError(f"until={until!r} is not a submodule used in the forward pass; top-level modules: {names}")
    cut_index = inside[-1]
    cut = nodes[cut_index]
    before = set(nodes[: cut_index + 1])
    for node in nodes[cut_index + 1 :]:
        leaked = [a.name for a in node.all_input_nodes if a in before and a is not cut]
        if leaked:
            raise ValueError(f"cannot split after {until!r}: {node.name} also reads {leaked}")
    head, tail = fx.Graph(), fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in nodes[: cut_index + 1]:
        env[node] = head.node_copy(node, lambda n: env[n])
    head.output(env[cut])
    env2 = {cut: tail.placeholder("x")}
    for node in nodes[cut_index + 1 :]:
        env2[node] = tail.node_copy(node, lambda n: env2[n])
    return fx.GraphModule(gm, head, "Prefix"), fx.GraphModule(gm, tail, "Rest")


class TiledModel(nn.Module):
    """``rest(SpatiallyTiled(prefix)(x))``: a model whose first layers run tile by tile."""

    def __init__(self, tiled_prefix: SpatiallyTiled, rest: nn.Module) -> None:
        super().__init__()
        self.tiled_prefix = tiled_prefix
        self.rest = rest

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rest(self.tiled_prefix(x))


def tile_spatially(model: nn.Module, tile=32, *, until: str, mode: str = "stream",
                   tiles_per_launch: int | None = None, conv2d=None, fold_bn: bool = False) -> TiledModel:
    """A copy of ``model`` (in eval mode) whose layers up to and including submodule ``until`` run spatially tiled.

    E.g. ``tile_spatially(resnet20, 32, until="layer3")`` tiles the whole convolutional trunk of ResNet-20 in
    strips of 32 input rows; logits equal the untiled model's within fp tolerance. Attributes ``input_shape``
    and ``num_classes`` are carried over.
    """
    model = copy.deepcopy(model).eval()
    prefix, rest = split_model(model, until)
    tiled = TiledModel(SpatiallyTiled(prefix, tile, mode, tiles_per_launch=tiles_per_launch, conv2d=conv2d,
                                      fold_bn=fold_bn), rest).eval()
    for attr in ("input_shape", "num_classes"):
        if hasattr(model, attr):
            setattr(tiled, attr, getattr(model, attr))
    return tiled
