"""Convolution strategies for the comparison with Li et al. 2016, selectable per model with apply_strategy.

Li, Yang, Feng, Chakradhar & Zhou 2016 ("Optimizing Memory Efficiency for Deep Convolutional Neural Networks on
GPUs", arXiv 1610.03618; Fig. 7 of the IISc study) time whole networks under cuDNN-MM, cuDNN-FFT, cuDNN-FFT-T,
cuda-convnet (direct), cuDNN-Best and their memory-optimised "Opt". cnnlab's counterparts:

- ``native``: torch.nn.functional.conv2d as is (cuDNN / oneDNN pick the algorithm): the reference.
- ``gemm``: explicit im2col (F.unfold) and one matrix multiply per image chunk (Chetlur et al. 2014, Sec. 3.1).
- ``fft``: the convolution theorem on the whole padded image (Mathieu, Henaff & LeCun 2014).
- ``fft_tiled``: overlap-add FFT on blocks so the FFT size stays small (cuDNN's FFT_TILING uses 32x32 tiles).
- ``direct``: cnnlab's Triton tiled kernel (cnnlab.kernels.triton_conv), the counterpart of cuda-convnet's direct
  convolution.
- ``best``: per layer, the fastest of the above, measured once on the layer's real input (with the caller's
  ``timer``) and cached by layer shape, device and dtype (cuDNN-Best's per-layer choice).
- ``opt``: the memory-optimised path: BatchNorm folded into the convolution weights, in-place ReLU, channels_last
  layout, cuDNN autotuning on a GPU and optionally torch.compile (which also fuses the ReLU into the conv).

FFT strategies transform in fp32 whatever the input dtype (cuFFT's half precision needs power-of-two sizes) and
process output channels in chunks so the filters' spectra stay within ``workspace_mib``.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from cnnlab.kernels import triton_conv

STRATEGIES = ("native", "gemm", "fft", "fft_tiled", "direct", "best", "opt")
CONV_STRATEGIES = ("gemm", "fft", "fft_tiled", "direct")  # the candidates of "best"
WORKSPACE_MIB = 256  # per-call scratch budget of gemm's im2col matrix and the FFT spectra, as cuDNN's workspace


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def _finish(y: torch.Tensor, bias, dtype, out) -> torch.Tensor:
    if bias is not None:
        y = y + bias.to(y.dtype).view(1, -1, 1, 1)
    y = y.to(dtype)
    if out is None:
        return y
    out.copy_(y)
    return out


def _check(x, weight, stride, padding):
    if x.dim() != 4 or weight.dim() != 4 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"expected x (N, C, H, W) and weight (C_out, C, KH, KW), got {tuple(x.shape)}, "
                         f"{tuple(weight.shape)}")  # fmt: skip
    (sh, sw), (ph, pw) = _pair(stride), _pair(padding)
    kh, kw = weight.shape[-2:]
    oh, ow = (x.shape[2] + 2 * ph - kh) // sh + 1, (x.shape[3] + 2 * pw - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"input {tuple(x.shape[-2:])} with padding {padding} is smaller than the kernel {(kh, kw)}")
    return (sh, sw), (ph, pw), (kh, kw), (oh, ow)


def conv2d_gemm(x, weight, bias=None, stride=1, padding=0, *, out=None, workspace_mib=WORKSPACE_MIB):
    """Convolution as im2col + GEMM: returns (N, C_out, OH, OW) in x's dtype (or writes ``out``).

    The im2col matrix (C*KH*KW x OH*OW per image) is built for as many images at a time as fit ``workspace_mib``.
    """
    (sh, sw), (ph, pw), (kh, kw), (oh, ow) = _check(x, weight, stride, padding)
    n, c_out = x.shape[0], weight.shape[0]
    w2d = weight.reshape(c_out, -1)
    per_image = w2d.shape[1] * oh * ow * x.element_size()
    chunk = max(1, int(workspace_mib * 2**20 // max(per_image, 1)))
    pieces = []
    for i in range(0, n, chunk):
        cols = F.unfold(x[i : i + chunk], (kh, kw), padding=(ph, pw), stride=(sh, sw))  # (n, C*KH*KW, OH*OW)
        pieces.append((w2d @ cols).view(-1, c_out, oh, ow))
    y = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
    return _finish(y, bias, x.dtype, out)


def fast_fft_size(n: int) -> int:
    """Smallest m >= n whose only prime factors are 2, 3 and 5 (sizes pocketfft and cuFFT transform fastest)."""
    m = n
    while True:
        r = m
        for p in (2, 3, 5):
            while r % p == 0:
                r //= p
        if r == 1:
            return m
        m += 1


def _freq_matmul(x_hat: torch.Tensor, w_hat: torch.Tensor) -> torch.Tensor:
    """sum over C of x_hat (B, C, *freq) * w_hat (O, C, *freq) -> (B, O, *freq): one matmul per frequency.

    Operands are made contiguous (frequency, rows, C) first: a batched complex matmul on strided views is ~50x
    slower on the CPU.
    """
    b, c, *freq = x_hat.shape
    o = w_hat.shape[0]
    nf = math.prod(freq)
    a = x_hat.reshape(b, c, nf).permute(2, 0, 1).contiguous()  # (F, B, C)
    w = w_hat.reshape(o, c, nf).permute(2, 1, 0).contiguous()  # (F, C, O)
    return torch.bmm(a, w).permute(1, 2, 0).reshape(b, o, *freq)


def _spectral(x_hat, weight, fft_size, workspace_mib):
    """Yield (co0, co1, y) with y = inverse FFT of sum_ci x_hat * FFT(flipped weight), chunked over C_out.

    x_hat: (B, C, FH, FW/2+1) spectra of B images or blocks; y: (B, co1 - co0, FH, FW) real.
    """
    c_out, c_in = weight.shape[:2]
    freq = fft_size[0] * (fft_size[1] // 2 + 1)
    rows = x_hat.shape[0]
    per_channel = 8 * freq * (c_in + rows)  # complex64 filter spectrum + product, per output channel
    chunk = max(1, int(workspace_mib * 2**20 // per_channel))
    flipped = weight.float().flip(-2, -1)  # correlation = convolution with the flipped filter
    for co0 in range(0, c_out, chunk):
        co1 = min(c_out, co0 + chunk)
        w_hat = torch.fft.rfft2(flipped[co0:co1], s=fft_size)  # (co, C, FH, FW/2+1)
        yield co0, co1, torch.fft.irfft2(_freq_matmul(x_hat, w_hat), s=fft_size)


def conv2d_fft(x, weight, bias=None, stride=1, padding=0, *, out=None, workspace_mib=WORKSPACE_MIB):
    """Convolution by FFT of the whole padded image: returns (N, C_out, OH, OW) in x's dtype (or writes ``out``).

    FFT size >= padded input size (the next 2-3-5-smooth size): the circular wrap-around then only touches
    outputs the valid correlation discards.
    """
    (sh, sw), (ph, pw), (kh, kw), (oh, ow) = _check(x, weight, stride, padding)
    xp = F.pad(x.float(), (pw, pw, ph, ph))
    size = (fast_fft_size(xp.shape[2]), fast_fft_size(xp.shape[3]))
    x_hat = torch.fft.rfft2(xp, s=size)  # (N, C, FH, FW/2+1)
    y = torch.empty(x.shape[0], weight.shape[0], oh, ow, dtype=torch.float32, device=x.device)
    for co0, co1, full in _spectral(x_hat, weight, size, workspace_mib):
        # Correlation output i sits at index i + K - 1 of the linear convolution.
        y[:, co0:co1] = full[:, :, kh - 1 :: sh, kw - 1 :: sw][:, :, :oh, :ow]
    return _finish(y, bias, x.dtype, out)


def fft_tile_size(kernel: int, image: int, fft: int = 32) -> int:
    """FFT size per axis for overlap-add: ``fft`` (32, as cuDNN's FFT_TILING), doubled while the kernel fills more
    than half of it, and never more than one block covering the whole padded image needs."""
    while fft < 2 * kernel:
        fft *= 2
    return min(fft, fast_fft_size(image + kernel - 1))


def conv2d_fft_tiled(x, weight, bias=None, stride=1, padding=0, *, out=None, fft=32, workspace_mib=WORKSPACE_MIB):
    """Overlap-add FFT convolution: returns (N, C_out, OH, OW) in x's dtype (or writes ``out``).

    The padded input is cut into blocks of B = F - K + 1 pixels; each block is convolved by an F-point FFT (no
    wrap-around, F >= block + kernel - 1), and the blocks' outputs, which overlap by K - 1, are summed (F.fold).
    """
    (sh, sw), (ph, pw), (kh, kw), (oh, ow) = _check(x, weight, stride, padding)
    xp = F.pad(x.float(), (pw, pw, ph, ph))
    hp, wp = xp.shape[-2:]
    fh, fw = fft_tile_size(kh, hp, fft), fft_tile_size(kw, wp, fft)
    bh, bw = fh - kh + 1, fw - kw + 1
    nbh, nbw = math.ceil(hp / bh), math.ceil(wp / bw)
    xp = F.pad(xp, (0, nbw * bw - wp, 0, nbh * bh - hp))
    n, c = x.shape[:2]
    blocks = xp.unfold(2, bh, bh).unfold(3, bw, bw)  # (N, C, nbh, nbw, bh, bw)
    blocks = blocks.permute(0, 2, 3, 1, 4, 5).reshape(n * nbh * nbw, c, bh, bw)
    x_hat = torch.fft.rfft2(blocks, s=(fh, fw))  # (N*nbh*nbw, C, fh, fw/2+1)
    y = torch.empty(n, weight.shape[0], oh, ow, dtype=torch.float32, device=x.device)
    full_size = ((nbh - 1) * bh + fh, (nbw - 1) * bw + fw)
    for co0, co1, blocks_out in _spectral(x_hat, weight, (fh, fw), workspace_mib):
        co = co1 - co0  # overlap-add: fold sums the overlapping F x F outputs placed every B pixels
        if nbh * nbw == 1:  # one block holds the whole image: nothing overlaps
            full = blocks_out.reshape(n, co, fh, fw)
        else:
            cols = blocks_out.reshape(n, nbh * nbw, co * fh * fw).transpose(1, 2)
            full = F.fold(cols, full_size, (fh, fw), stride=(bh, bw))
        y[:, co0:co1] = full[:, :, kh - 1 :: sh, kw - 1 :: sw][:, :, :oh, :ow]
    return _finish(y, bias, x.dtype, out)


def conv2d_direct(x, weight, bias=None, stride=1, padding=0, *, out=None, tile=(16, 16), **options):
    """cnnlab's Triton tiled kernel (see triton_conv.tiled_conv2d); needs a GPU or TRITON_INTERPRET=1."""
    return triton_conv.tiled_conv2d(x, weight, bias, stride, padding, tile, out=out, **options)


def conv2d_native(x, weight, bias=None, stride=1, padding=0, *, out=None):
    """torch.nn.functional.conv2d (the library's own algorithm choice)."""
    y = F.conv2d(x, weight, bias, stride, padding)
    if out is None:
        return y
    out.copy_(y)
    return out


CONV_FUNCTIONS = {
    "native": conv2d_native, "gemm": conv2d_gemm, "fft": conv2d_fft, "fft_tiled": conv2d_fft_tiled,
    "direct": conv2d_direct,
}  # fmt: skip


# (N, C, H, W, C_out, KH, KW, stride, padding, device, dtype, candidates) -> {"choice": name, "<name>_ms": time, ...}
_BEST_CACHE: dict[tuple, dict] = {}


def best_cache() -> dict[tuple, dict]:
    """The per-layer choices of strategy "best" measured so far (key: layer shape, device, dtype, candidates)."""
    return _BEST_CACHE


def candidates_for(device: torch.device | str) -> tuple[str, ...]:
    """Strategies "best" chooses from: all of CONV_STRATEGIES on a GPU; on the CPU not "direct" (interpreted)."""
    if torch.device(device).type == "cuda":
        return CONV_STRATEGIES
    return tuple(s for s in CONV_STRATEGIES if s != "direct")


def choose_best(x, weight, bias, stride, padding, *, timer, candidates=None) -> str:
    """Name of the fastest strategy for this layer on this input, timed once and cached by shape, device, dtype and
    candidate set (a pick among fewer candidates is not the answer for more).

    ``timer(fn)`` returns the time of one call ``fn()`` in seconds, measured as the caller sees fit (kernels sit
    below ``cnnlab.profiling``, so the caller supplies it, e.g. a median of a few ``profiling.wall_time`` calls);
    the cache entry keeps each candidate's time as ``<name>_ms``.
    """
    candidates = tuple(candidates or candidates_for(x.device))
    key = (*x.shape, weight.shape[0], *weight.shape[-2:], _pair(stride), _pair(padding), str(x.device), x.dtype,
           candidates)
    if key not in _BEST_CACHE:
        entry = {}
        for name in candidates:
            fn = CONV_FUNCTIONS[name]
            entry[f"{name}_ms"] = 1e3 * timer(lambda: fn(x, weight, bias, stride, padding))
        entry["choice"] = min((v, k[:-3]) for k, v in entry.items())[1]
        _BEST_CACHE[key] = entry
    return _BEST_CACHE[key]["choice"]


class StrategyConv2d(nn.Module):
    """nn.Conv2d replacement whose forward uses one strategy of CONV_FUNCTIONS, or "best" (shares conv's params).

    ``last_choice`` records the strategy the latest forward used (for "best": the cached per-layer pick).
    """

    def __init__(self, conv: nn.Conv2d, strategy: str, **options) -> None:
        super().__init__()
        if strategy not in (*CONV_FUNCTIONS, "best"):
            raise ValueError(f"strategy must be one of {(*CONV_FUNCTIONS, 'best')}, got {strategy!r}")
        if strategy == "best" and not callable(options.get("timer")):
            raise ValueError("strategy 'best' times its candidates per layer: pass timer=, a callable that returns "
                             "the seconds one call of a callable takes (e.g. built on cnnlab.profiling.wall_time)")
        if conv.groups != 1 or conv.dilation != (1, 1) or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise ValueError(f"strategy {strategy!r} supports dense convolutions with numeric zero padding only, got "
                             f"groups={conv.groups}, dilation={conv.dilation}, padding={conv.padding!r}, "
                             f"padding_mode={conv.padding_mode!r}")  # fmt: skip
        self.strategy = strategy
        self.options = options
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size, self.stride, self.padding = conv.kernel_size, conv.stride, conv.padding
        self.weight = conv.weight
        self.bias = conv.bias
        self.last_choice: str | None = None
        self._packed: tuple | None = None

    def _packed_weight(self) -> torch.Tensor:
        """The Triton kernel's (KH, KW, C_in, C_out) weight, rebuilt only when the weight changes."""
        w = self.weight
        # inference tensors (made under torch.inference_mode) have no version counter and never change
        key = (w.data_ptr(), -1 if w.is_inference() else w._version, w.dtype, w.device)
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, triton_conv.pack_weight(w.detach()))
        return self._packed[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name = self.strategy
        if name == "best":
            name = choose_best(x, self.weight, self.bias, self.stride, self.padding, **self.options)
        self.last_choice = name
        options = self.options if self.strategy != "best" else {}
        if name == "direct":
            options = {**options, "packed_weight": self._packed_weight()}
        return CONV_FUNCTIONS[name](x, self.weight, self.bias, self.stride, self.padding, **options)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, strategy={self.strategy!r}")  # fmt: skip


def _replace_convs(model: nn.Module, strategy: str, **options) -> nn.Module:
    model = copy.deepcopy(model)
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Conv2d):
                setattr(module, name, StrategyConv2d(child, strategy, **options))
    return model


def _fold_batchnorm(gm: fx.GraphModule) -> int:
    """Fold every eval-mode BatchNorm2d that directly follows a Conv2d (read by nothing else) into the conv's
    weights and bias; returns the number folded. (torch.fx.experimental.optimization.fuse does the same but
    imports deprecated torch.jit code.)"""
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    modules = dict(gm.named_modules())
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(modules.get(node.target), nn.BatchNorm2d):
            continue
        src = node.args[0]
        if not (isinstance(src, fx.Node) and src.op == "call_module" and len(src.users) == 1
                and isinstance(modules.get(src.target), nn.Conv2d)):  # fmt: skip
            continue
        fused = fuse_conv_bn_eval(modules[src.target], modules[node.target])
        parent, _, name = src.target.rpartition(".")
        setattr(gm.get_submodule(parent) if parent else gm, name, fused)
        node.replace_all_uses_with(src)
        gm.graph.erase_node(node)
        folded += 1
    gm.graph.lint()
    gm.delete_all_unused_submodules()
    gm.recompile()
    return folded


def _inplace_relus(gm: fx.GraphModule) -> None:
    """Make ReLUs in-place where their input is read by nothing else (saves one activation each)."""
    modules = dict(gm.named_modules())
    for node in gm.graph.nodes:
        src = node.args[0] if node.args else None
        if not isinstance(src, fx.Node) or len(src.users) != 1 or src.op == "placeholder":
            continue
        if node.op == "call_function" and node.target is F.relu:
            node.kwargs = {**node.kwargs, "inplace": True}
        elif node.op == "call_function" and node.target is torch.relu:
            node.target = torch.relu_
        elif node.op == "call_module" and isinstance(modules.get(node.target), nn.ReLU):
            modules[node.target].inplace = True
    gm.recompile()


class OptimizedModel(nn.Module):
    """The "opt" strategy's wrapper: converts inputs to channels_last and enables cuDNN autotuning on a GPU."""

    def __init__(self, model: nn.Module, *, channels_last: bool, cudnn_benchmark: bool) -> None:
        super().__init__()
        self.model = model
        self.channels_last = channels_last
        self.cudnn_benchmark = cudnn_benchmark

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        if x.is_cuda and self.cudnn_benchmark:
            previous = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True  # pick the fastest cuDNN algorithm per shape (cuDNN-Best's idea)
            try:
                return self.model(x)
            finally:
                torch.backends.cudnn.benchmark = previous
        return self.model(x)


def optimize_for_memory(
    model: nn.Module,
    *,
    channels_last: bool = True,
    fold_bn: bool = True,
    inplace_relu: bool = True,
    cudnn_benchmark: bool = True,
    compile: bool = False,
) -> nn.Module:
    """The "opt" strategy: an eval-mode copy of ``model`` with BatchNorm folded into the preceding convolutions,
    in-place ReLUs, channels_last weights and inputs, cuDNN autotuning on a GPU, and torch.compile if asked.

    Folding BN (w' = w * gamma / sigma, b' = (b - mu) * gamma / sigma + beta) removes a full read and write of
    each activation; channels_last is the layout-awareness Li et al.'s Opt argues for. Returns an nn.Module
    (OptimizedModel, or its compiled version) computing the same function as ``model.eval()``.
    """
    model = copy.deepcopy(model).eval()
    if fold_bn or inplace_relu:
        gm = fx.symbolic_trace(model)
        if fold_bn:
            _fold_batchnorm(gm)
        if inplace_relu:
            _inplace_relus(gm)
        for attr in ("input_shape", "num_classes"):
            if hasattr(model, attr):
                setattr(gm, attr, getattr(model, attr))
        model = gm
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    wrapped = OptimizedModel(model, channels_last=channels_last, cudnn_benchmark=cudnn_benchmark)
    return torch.compile(wrapped) if compile else wrapped


def apply_strategy(model: nn.Module, name: str, **options) -> nn.Module:
    """A copy of ``model`` whose convolutions use strategy ``name`` (one of STRATEGIES); ``model`` is untouched.

    options go to the strategy: e.g. tile=(32, 32) for "direct", fft=32 for "fft_tiled", timer=... (required, see
    :func:`choose_best`) and candidates=(...) for "best", compile=True for "opt". Raises ValueError for an unknown
    name, listing the valid ones.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; valid strategies: {', '.join(STRATEGIES)}")
    if name == "native":
        if options:
            raise ValueError(f"strategy 'native' takes no options, got {sorted(options)}")
        return copy.deepcopy(model)
    if name == "opt":
        return optimize_for_memory(model, **options)
    return _replace_convs(model, name, **options)


__all__ = [
    "CONV_FUNCTIONS", "CONV_STRATEGIES", "STRATEGIES", "OptimizedModel", "StrategyConv2d", "apply_strategy",
    "best_cache", "candidates_for", "choose_best", "conv2d_direct", "conv2d_fft", "conv2d_fft_tiled", "conv2d_gemm",
    "conv2d_native", "fast_fft_size", "fft_tile_size", "optimize_for_memory",
]  # fmt: skip
