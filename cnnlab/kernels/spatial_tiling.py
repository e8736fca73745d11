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
- ``mode="stream"`` (default): strips of ``tile`` input rows, full width, processed top to bottom; each layer
  keeps the last rows the next strip needs (a line buffer), so nothing is computed twice.

Both are exact: a tile takes its real neighbours as halo and zero padding applies only at the true image border
(stream mode pads explicitly at the top and bottom of the image only; recompute mode discards every output whose
receptive field reaches a padded crop edge). BatchNorm must be in eval mode (it then acts per pixel).

The prefix is analysed with torch.fx; supported operations: Conv2d, MaxPool2d and AvgPool2d (no ceil_mode),
element-wise modules and functions (BatchNorm, ReLU and friends, add, mul), channel padding, and strided slicing
of the spatial axes (the option-A shortcut of CIFAR ResNets). Anything else raises ValueError naming the op.
"""

from __future__ import annotations

import copy
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

MODES = ("stream", "recompute")

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
    kind: str  # "input", "window", "subsample", "pointwise", "output"
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
        raise ValueError(f"spatial tiling does not support module {node.target} ({type(module).__name__}); "
                         "supported: Conv2d, MaxPool2d, AvgPool2d and element-wise modules")  # fmt: skip
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
        elif info.kind in ("pointwise", "output"):
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


def _tile_pair(tile, geometry: tuple[Geometry, Geometry]) -> tuple[int, int]:
    t = _pair(tile) if isinstance(tile, (int, tuple, list)) and not isinstance(tile, bool) else None
    if t is None or min(t) < 1:
        raise ValueError(f"tile must be a positive int or pair of ints (input pixels), got {tile!r}")
    for a in range(2):
        if t[a] % geometry[a].stride:
            raise ValueError(f"tile {tile!r} must be a multiple of the prefix's total stride "
                             f"{(geometry[0].stride, geometry[1].stride)}")  # fmt: skip
    return t


class _Stream:
    """Row-streaming executor: every node keeps the rows of its output that a consumer will still read.

    A node's rows live in pieces (start_row, tensor); a read within one piece is a view, a read across pieces
    (the halo kept from the previous strip plus the new strip) concatenates. Rows no consumer will read again are
    dropped at once, and a kept halo is copied out of its strip so the strip's memory is freed.
    """

    def __init__(self, infos: list[_Info], x: torch.Tensor):
        self.infos = {i.node: i for i in infos}
        self.output = infos[-1]
        self.sizes = _heights(infos, tuple(x.shape[-2:]))
        self.users: dict[fx.Node, list[_Info]] = {i.node: [] for i in infos}
        for info in infos:
            for src in info.inputs:
                self.users[src].append(info)
        self.pieces: dict[fx.Node, list[tuple[int, torch.Tensor]]] = {i.node: [] for i in infos}
        self.done = {i.node: 0 for i in infos}
        inp = infos[0].node
        self.pieces[inp], self.done[inp] = [(0, x)], x.shape[2]

    def rows(self, node: fx.Node, lo: int, hi: int) -> torch.Tensor:
        parts = []
        for start, t in self.pieces[node]:
            a, b = max(lo, start), min(hi, start + t.shape[2])
            if a < b:
                parts.append(t.narrow(2, a - start, b - a))
        got = sum(p.shape[2] for p in parts)
        if got != hi - lo:
            raise RuntimeError(f"{node.name}: rows [{lo}, {hi}) not buffered (have {got}); line buffer bug")
        return parts[0] if len(parts) == 1 else torch.cat(parts, 2)

    def produce(self, node: fx.Node, upto: int) -> None:
        """Compute rows [done, upto) of ``node``'s output, pulling exactly the input rows they need."""
        if self.done[node] >= upto:
            return
        info, r0 = self.infos[node], self.done[node]
        if info.kind == "window":
            src = info.inputs[0]
            lo, hi = info.window[0].needs(r0, upto)
            h_in = self.sizes[src][0]
            self.produce(src, min(hi, h_in))
            x = self.rows(src, max(lo, 0), min(hi, h_in))
            y = self._window(info, x, max(0, -lo), max(0, hi - h_in))
        else:
            args = {}
            for src in info.inputs:
                if info.kind == "subsample":
                    s = info.window[0].stride
                    lo, hi = r0 * s, (upto - 1) * s + 1
                else:
                    lo, hi = r0, upto
                self.produce(src, hi)
                args[src] = self.rows(src, lo, hi)
            y = self._call(info, args)
        if y.shape[2] != upto - r0:
            raise RuntimeError(f"{node.name}: expected {upto - r0} rows, got {y.shape[2]} (geometry mismatch)")
        self.pieces[node].append((r0, y))
        self.done[node] = upto
        for src in info.inputs:
            self._trim(src)

    def _trim(self, node: fx.Node) -> None:
        """Drop rows of ``node`` that no consumer will read again (the line buffer keeps only the halo)."""
        if self.infos[node].kind == "input":
            return  # the caller's input tensor: not ours to free
        keep_from = self.done[node]
        for user in self.users[node]:
            if user.kind == "output":
                return
            s = user.window[0].stride
            pad = user.window[0].padding if user.kind == "window" else 0
            keep_from = min(keep_from, max(0, self.done[user.node] * s - pad))
        kept = []
        for start, t in self.pieces[node]:
            end = start + t.shape[2]
            if end <= keep_from:
                continue
            if start < keep_from:  # copy the halo out so the rest of the strip is freed
                t, start = t.narrow(2, keep_from - start, end - keep_from).clone(), keep_from
            kept.append((start, t))
        self.pieces[node] = kept

    def run(self, rows_per_step: int) -> torch.Tensor:
        out_node = self.output.inputs[0]
        total = self.sizes[out_node][0]
        out = None
        for r0 in range(0, total, rows_per_step):
            r1 = min(total, r0 + rows_per_step)
            self.produce(out_node, r1)
            piece = self.rows(out_node, r0, r1)
            if out is None:
                shape = (piece.shape[0], piece.shape[1], total, piece.shape[3])
                out = torch.empty(shape, dtype=piece.dtype, device=piece.device)
            out[:, :, r0:r1] = piece
            self.pieces[out_node] = []  # the stitched output holds these rows now
        return out

    def _window(self, info: _Info, x: torch.Tensor, top: int, bottom: int) -> torch.Tensor:
        m, (wh, ww) = info.module, info.window
        if isinstance(m, nn.Conv2d):
            if top or bottom:  # zero padding at the true top/bottom border only
                x = F.pad(x, (0, 0, top, bottom))
            return F.conv2d(x, m.weight, m.bias, m.stride, (0, m.padding[1]), m.dilation, m.groups)
        if isinstance(m, nn.MaxPool2d):
            if top or bottom:
                x = F.pad(x, (0, 0, top, bottom), value=-math.inf)
            return F.max_pool2d(x, _pair(m.kernel_size), (wh.stride, ww.stride), (0, ww.padding), _pair(m.dilation))
        if top or bottom:  # AvgPool2d with count_include_pad=True: padding counts as zeros
            x = F.pad(x, (0, 0, top, bottom))
        return F.avg_pool2d(x, _pair(m.kernel_size), (wh.stride, ww.stride), (0, ww.padding), False, True,
                            m.divisor_override)  # fmt: skip

    def _call(self, info: _Info, args: dict[fx.Node, torch.Tensor]) -> torch.Tensor:
        node = info.node
        if node.op == "call_module" and getattr(info.module, "inplace", False):
            # An in-place op would write into another node's line buffer: run it on a copy instead.
            args = {k: v.clone() for k, v in args.items()}
        if node.kwargs.get("inplace"):
            args = {k: v.clone() for k, v in args.items()}
        fn_args = fx.node.map_arg(node.args, lambda n: args[n])
        fn_kwargs = fx.node.map_arg(node.kwargs, lambda n: args[n])
        if node.op == "call_module":
            return info.module(*fn_args, **fn_kwargs)
        if node.op == "call_function":
            return node.target(*fn_args, **fn_kwargs)
        self_arg, *rest = fn_args
        if node.target.endswith("_"):
            self_arg = self_arg.clone()
        return getattr(self_arg, node.target)(*rest, **fn_kwargs)


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
    of ``tile`` rows, halo rows kept in line buffers, nothing recomputed) or "recompute" (tile x tile squares, halo
    recomputed). forward(x) returns exactly what ``prefix(x)`` returns (same shape and dtype, NCHW contiguous), up
    to floating-point rounding. Needs eval mode for BatchNorm.
    """

    def __init__(self, prefix, tile=32, mode: str = "stream") -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.prefix = _trace(prefix)
        self.infos = analyse(self.prefix)
        self.geometry = self.infos[-1].geometry
        self.tile = _tile_pair(tile, self.geometry)
        self.mode = mode

    @property
    def halo(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(left, right) halo in input pixels along H and W."""
        return tuple((g.left, g.right) for g in self.geometry)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            raise ValueError(f"x must be a 4-D (N, C, H, W) tensor, got shape {tuple(x.shape)}")
        _check_eval(self.prefix)
        if self.mode == "stream":
            return _Stream(self.infos, x).run(self.tile[0] // self.geometry[0].stride)
        out_size = _heights(self.infos, tuple(x.shape[-2:]))[self.infos[-1].node]
        return _run_recompute(self.prefix, self.geometry, out_size, x, self.tile)

    def extra_repr(self) -> str:
        return f"tile={self.tile}, mode={self.mode!r}, halo={self.halo}, stride={self.geometry[0].stride}"


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


def tile_spatially(model: nn.Module, tile=32, *, until: str, mode: str = "stream") -> TiledModel:
    """A copy of ``model`` (in eval mode) whose layers up to and including submodule ``until`` run spatially tiled.

    E.g. ``tile_spatially(resnet20, 32, until="layer3")`` tiles the whole convolutional trunk of ResNet-20 in
    strips of 32 input rows; logits equal the untiled model's within fp tolerance. Attributes ``input_shape``
    and ``num_classes`` are carried over.
    """
    model = copy.deepcopy(model).eval()
    prefix, rest = split_model(model, until)
    tiled = TiledModel(SpatiallyTiled(prefix, tile, mode), rest).eval()
    for attr in ("input_shape", "num_classes"):
        if hasattr(model, attr):
            setattr(tiled, attr, getattr(model, attr))
    return tiled
