"""A tiled 2-D convolution written in Triton: each program computes one output tile for a block of channels.

The paper's memory-tiling experiment (Sec. III.D and IV.D of the IISc study) splits the convolution's output
into tiles of 8x8 ... 64x64 pixels so that a tile's input window (the tile plus its halo of ``kernel - 1``
pixels) stays in fast on-chip memory while it is used. This kernel makes that tile size an explicit parameter.

Formulation: implicit GEMM (Chetlur et al. 2014, "cuDNN: Efficient Primitives for Deep Learning", Sec. 3.1). A
program owns output pixels ``tile_h x tile_w`` of one image and ``block_co`` output channels and accumulates, in
fp32 registers, ``sum over (kh, kw, ci) of x[ci, oh*s - p + kh, ow*s - p + kw] * w[co, ci, kh, kw]`` with one
``tl.dot`` per filter tap and block of ``block_ci`` input channels. The im2col matrix is never materialised: the
program reads its input window straight from the NCHW or NHWC tensor (strides are kernel arguments). Triton has
no addressable shared memory, so the window is not copied explicitly; the first tap reads it from DRAM and the
remaining ``kh*kw - 1`` taps, shifted by at most the halo, re-read the same lines from L1/L2. Large tiles are
processed ``sub_rows`` output rows at a time so the accumulator fits in registers.

On a GPU the kernel is compiled; on the CPU it runs only in Triton's interpreter, which is slow: use it to check
correctness on small inputs, never to time. Which one a call gets (:func:`_kernel_for`):

- CUDA tensors launch ``_KERNEL``, made by ``triton.jit`` when this module is imported: compiled, or interpreted
  if the environment variable ``TRITON_INTERPRET=1`` was set at that moment.
- CPU tensors always run interpreted: ``_KERNEL`` if it was made interpreted, else an interpreted copy made at the
  first CPU call. The copy runs whatever mode triton itself was imported in, because the kernel uses only Triton
  builtins, none of the jitted ``tl.*`` helpers (``tl.zeros``, ``tl.cdiv``) whose mode is fixed when
  ``triton.language`` is imported.
- A CPU call is accepted only while :func:`interpreter_enabled`: ``TRITON_INTERPRET=1`` is set now (read at each
  call) or was set when triton was imported; otherwise it raises a RuntimeError that says how to set it.

Importing this module works in either mode, and without triton (then every call says it is missing).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from dataclasses import dataclass

import torch
from torch import nn

from cnnlab._compat import tf32_enabled

try:  # Triton ships with torch on Linux; keep the module importable where it does not.
    import triton
    import triton.language as tl

    TRITON_IMPORT_ERROR: str | None = None
except ImportError as error:  # pragma: no cover - depends on the installation
    triton = None
    tl = None
    TRITON_IMPORT_ERROR = str(error)

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
TILE_SIZES = (8, 16, 32, 64)  # the tile edges the paper sweeps (Sec. IV.D)
MAX_TILE_EDGE = 128
_MAX_SUB_PIXELS = 128  # output pixels per accumulator block: 128 x block_co fp32 stays in registers


def _env_flag() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def _imported_interpreted() -> bool:
    """Whether triton itself was imported in interpreter mode (TRITON_INTERPRET set at import)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.zeros, InterpretedFunction)


def interpreter_enabled() -> bool:
    """Whether CPU calls are accepted (they run in Triton's interpreter): TRITON_INTERPRET=1 is set now, or was
    set when triton was imported. False without triton."""
    if triton is None:
        return False
    return _env_flag() or _imported_interpreted()


if triton is not None:

    def _conv2d_tile_kernel(
        x_ptr, w_ptr, b_ptr, y_ptr,
        C_in, H, W, C_out, OH, OW,
        sxn, sxc, sxh, sxw,
        swh, sww, swc, swo,
        syn, syc, syh, syw,
        tiles_h, tiles_w,
        STRIDE_H: tl.constexpr, STRIDE_W: tl.constexpr, PAD_H: tl.constexpr, PAD_W: tl.constexpr,
        KH: tl.constexpr, KW: tl.constexpr,
        TILE_H: tl.constexpr, TILE_W: tl.constexpr, SUB_H: tl.constexpr,
        BLOCK_CO: tl.constexpr, BLOCK_CI: tl.constexpr,
        HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr, DOT_IN_FP32: tl.constexpr,
    ):  # fmt: skip
        # Only Triton builtins here (tl.full, not the jitted helper tl.zeros), so that an interpreted copy
        # runs even when triton.language was imported in compiled mode.
        # Grid axis 0 walks (image, tile row, tile column), axis 1 the blocks of output channels.
        pid = tl.program_id(0)
        pid_co = tl.program_id(1)
        tile_w_idx = pid % tiles_w
        rest = pid // tiles_w
        tile_h_idx = rest % tiles_h
        n = rest // tiles_h

        co = pid_co * BLOCK_CO + tl.arange(0, BLOCK_CO)
        co_mask = co < C_out
        ci_range = tl.arange(0, BLOCK_CI)
        pix = tl.arange(0, SUB_H * TILE_W)
        ow = tile_w_idx * TILE_W + pix % TILE_W
        x_img = x_ptr + n.to(tl.int64) * sxn  # int64: batch offsets can pass 2**31 elements
        y_img = y_ptr + n.to(tl.int64) * syn
        if HAS_BIAS:
            bias = tl.load(b_ptr + co, mask=co_mask, other=0.0).to(tl.float32)

        num_ci_blocks = (C_in + BLOCK_CI - 1) // BLOCK_CI  # not tl.cdiv: a jitted helper, fixed at import
        for sub in range(0, TILE_H, SUB_H):
            oh = tile_h_idx * TILE_H + sub + pix // TILE_W
            out_mask = (oh < OH) & (ow < OW)
            ih0 = oh * STRIDE_H - PAD_H
            iw0 = ow * STRIDE_W - PAD_W
            acc = tl.full((SUB_H * TILE_W, BLOCK_CO), 0.0, tl.float32)  # not tl.zeros: a jitted helper
            # One flat loop over (filter tap, block of input channels): a single pipelined loop keeps one stage
            # of addresses live (unrolling the taps made ptxas spill for sm_90).
            for step in range(0, KH * KW * num_ci_blocks):
                tap = step // num_ci_blocks
                ci = (step - tap * num_ci_blocks) * BLOCK_CI + ci_range
                kh = tap // KW
                kw = tap - kh * KW
                ih = ih0 + kh
                iw = iw0 + kw
                # Zero padding and ragged edges are masks: out-of-image taps load 0 and are never read.
                in_mask = out_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                ci_mask = ci < C_in
                a = tl.load(
                    x_img + (ih * sxh + iw * sxw)[:, None] + ci[None, :] * sxc,
                    mask=in_mask[:, None] & ci_mask[None, :],
                    other=0.0,
                )
                b = tl.load(
                    w_ptr + kh * swh + kw * sww + ci[:, None] * swc + co[None, :] * swo,
                    mask=ci_mask[:, None] & co_mask[None, :],
                    other=0.0,
                )
                if DOT_IN_FP32:  # exact for bf16 products; see _dot_in_fp32
                    a = a.to(tl.float32)
                    b = b.to(tl.float32)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
            if HAS_BIAS:
                acc += bias[None, :]
            y_off = oh * syh + ow * syw
            tl.store(
                y_img + y_off[:, None] + co[None, :] * syc,
                acc.to(y_ptr.dtype.element_ty),
                mask=out_mask[:, None] & co_mask[None, :],
            )

    # triton.jit reads TRITON_INTERPRET now, at this module's import: interpreted if it is set, else compiled
    # (which may differ from the mode triton.language was imported in; see the module docstring).
    _KERNEL = triton.jit(_conv2d_tile_kernel)


# ------------------------------------------------------------------------------------------------ availability

TRITON_CPU_REASON = "Triton kernels are timed only on a GPU"
TRITON_CPU_DETAIL = (f"{TRITON_CPU_REASON}: on a CPU they run only in Triton's interpreter (TRITON_INTERPRET=1), "
                     "which checks correctness but is orders of magnitude slower than compiled code")
TRITON_INTERPRETED_REASON = "Triton's interpreter is on (TRITON_INTERPRET=1): interpreted kernels are never timed"


def triton_untimed_reason(device) -> tuple[str, str] | None:
    """(reason, detail) why the Triton kernel is not timed on ``device`` in this process, or None if it is."""
    if torch.device(device).type != "cuda":
        return TRITON_CPU_REASON, TRITON_CPU_DETAIL
    if interpreter_enabled():
        return TRITON_INTERPRETED_REASON, (f"{TRITON_INTERPRETED_REASON}; start the process without it to time "
                                           "the compiled kernel")
    return None


def triton_check_device() -> tuple[str | None, str | None]:
    """Where the Triton kernel can run in this process: ("cpu", None) when :func:`interpreter_enabled` (CPU
    tensors, interpreted), else ("cuda", None) when there is a GPU, else (None, the reason it cannot run)."""
    if triton is None:
        return None, f"Triton is not installed: {TRITON_IMPORT_ERROR}"
    if interpreter_enabled():
        return "cpu", None
    if torch.cuda.is_available():
        return "cuda", None
    return None, ("no GPU, and Triton's interpreter is off: set TRITON_INTERPRET=1 to check the kernel on a CPU "
                  "(interpreted)")


_INTERPRETED_KERNEL = None


def _kernel_for(x: torch.Tensor):
    """The kernel to launch for ``x``: ``_KERNEL`` for CUDA tensors and when it was made interpreted, else (CPU
    tensors, ``_KERNEL`` compiled) an interpreted copy, made once."""
    global _INTERPRETED_KERNEL
    from triton.runtime.interpreter import InterpretedFunction

    if x.is_cuda:
        return _KERNEL
    _interpreter_scalar_compat()
    if isinstance(_KERNEL, InterpretedFunction):
        return _KERNEL
    if _INTERPRETED_KERNEL is None:
        _INTERPRETED_KERNEL = InterpretedFunction(_conv2d_tile_kernel)
    return _INTERPRETED_KERNEL


def _interpreter_scalar_compat() -> None:
    """Let Triton 3.4-3.6's interpreter take a runtime scalar as a loop bound under numpy 2.4.

    The interpreter holds a kernel's scalar arguments as 1-element arrays and gives them to ``range`` through
    ``int(array)``, which numpy 2.4 refuses for arrays of one dimension ("only 0-dimensional arrays can be
    converted to Python scalars"): our kernel's ``range(0, KH * KW * num_ci_blocks)`` then fails. Triton 3.7
    squeezes the array first; on older interpreters we wrap their tensor patching to do the same. Compiled (GPU)
    kernels never pass here. Idempotent; does nothing where the interpreter already squeezes.
    """
    import inspect

    from triton.runtime import interpreter

    patch = interpreter._patch_lang_tensor
    if getattr(patch, "_cnnlab_scalar_compat", False) or "int(self.handle.data)" not in inspect.getsource(patch):
        return

    def patched(tensor, scope=None):  # Triton 3.4 passes no scope and sets the attribute directly
        if scope is None:
            patch(tensor)
            tensor.__index__ = lambda self: int(self.handle.data.squeeze())
        else:
            patch(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patched._cnnlab_scalar_compat = True
    interpreter._patch_lang_tensor = patched


@dataclass(frozen=True)
class TileConfig:
    """Launch parameters of one convolution: tile edges (pixels), rows per accumulator block, channel blocks."""

    tile_h: int
    tile_w: int
    sub_rows: int
    block_co: int
    block_ci: int
    num_warps: int


def _pair(value, name: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return int(value[0]), int(value[1])
    raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")


def _power_of_two(value: int) -> bool:
    return value >= 1 and (value & (value - 1)) == 0


def _block(requested: int | None, channels: int, name: str, cap: int) -> int:
    if requested is None:
        # tl.dot needs every dimension >= 16; beyond `cap` the accumulator outgrows the registers.
        return max(16, min(cap, triton.next_power_of_2(channels)))
    if not (_power_of_two(requested) and 16 <= requested <= 256):
        raise ValueError(f"{name} must be a power of two in [16, 256] (Triton's dot needs >= 16), got {requested!r}")
    return requested


def tile_config(
    tile, c_in: int, c_out: int, dtype: torch.dtype, *, block_co=None, block_ci=None, sub_rows=None, num_warps=None
) -> TileConfig:
    """Validate the tiling parameters and fill in defaults; returns a TileConfig. Raises ValueError on bad values."""
    tile_h, tile_w = _pair(tile, "tile")
    for edge in (tile_h, tile_w):
        if not (_power_of_two(edge) and edge <= MAX_TILE_EDGE):
            raise ValueError(f"tile edges must be powers of two up to {MAX_TILE_EDGE} (e.g. {TILE_SIZES}), "
                             f"got {tile!r}")  # fmt: skip
    if tile_h * tile_w < 16:
        raise ValueError(f"tile must cover at least 16 pixels (Triton's dot needs M >= 16), got {tile!r}")
    co = _block(block_co, c_out, "block_co", 64)
    ci = _block(block_ci, c_in, "block_ci", 64 if dtype != torch.float32 else 32)
    if sub_rows is None:
        sub_rows = max(1, min(tile_h, _MAX_SUB_PIXELS // tile_w))
        while sub_rows * tile_w < 16:  # narrow tiles: take more rows so the dot has M >= 16
            sub_rows *= 2
    if not (_power_of_two(sub_rows) and sub_rows <= tile_h and sub_rows * tile_w >= 16):
        raise ValueError(
            f"sub_rows must be a power of two <= tile height {tile_h} with sub_rows * tile width >= 16, "
            f"got {sub_rows!r}"
        )
    if num_warps is None:
        num_warps = 8 if sub_rows * tile_w * co >= 128 * 64 else 4
    if num_warps not in (1, 2, 4, 8, 16):
        raise ValueError(f"num_warps must be one of 1, 2, 4, 8, 16, got {num_warps!r}")
    return TileConfig(tile_h, tile_w, sub_rows, co, ci, num_warps)


def output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution along one axis (no dilation), as in torch.nn.Conv2d."""
    return (size + 2 * padding - kernel) // stride + 1


def _padding_pair(padding, kernel: tuple[int, int], stride: tuple[int, int]) -> tuple[int, int]:
    if padding == "valid":
        return 0, 0
    if padding == "same":
        if stride != (1, 1) or kernel[0] % 2 == 0 or kernel[1] % 2 == 0:
            raise ValueError("padding='same' needs stride 1 and odd kernel sizes here")
        return kernel[0] // 2, kernel[1] // 2
    pad = _pair(padding, "padding")
    if min(pad) < 0:
        raise ValueError(f"padding must be >= 0, got {padding!r}")
    return pad


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """Weight (C_out, C_in, KH, KW) rearranged to a contiguous (KH, KW, C_in, C_out) tensor.

    The kernel reads a (block_ci x block_co) slab per tap; with C_out innermost that read is coalesced.
    """
    return weight.permute(2, 3, 1, 0).contiguous()


def _dot_in_fp32(x: torch.Tensor) -> bool:
    """Whether to upcast the dot's operands to fp32: only for bf16 under the interpreter.

    Triton's interpreter (3.7) stores bf16 as raw uint16 and its dot is a plain numpy matmul of those integers, so
    a bf16 dot returns garbage there. A product of two bf16 numbers is exact in fp32, so upcasting gives the same
    result as the GPU's bf16 MMA with fp32 accumulation.
    """
    from triton.runtime.interpreter import InterpretedFunction

    return x.dtype == torch.bfloat16 and isinstance(_kernel_for(x), InterpretedFunction)


def _check_device(x: torch.Tensor) -> None:
    if triton is None:
        raise RuntimeError(f"tiled_conv2d needs Triton, which failed to import: {TRITON_IMPORT_ERROR}")
    if x.device.type == "cuda":
        return
    if x.device.type == "cpu":
        if not interpreter_enabled():
            raise RuntimeError(
                "tiled_conv2d got CPU tensors, but compiled Triton kernels need a GPU. To run it on the CPU "
                "(slowly, for correctness checks only) set the environment variable TRITON_INTERPRET=1, e.g. "
                "`TRITON_INTERPRET=1 python ...` or os.environ['TRITON_INTERPRET'] = '1' before the call."
            )
        return
    raise RuntimeError(f"tiled_conv2d supports CUDA tensors (and CPU under TRITON_INTERPRET=1), got {x.device}")


def tiled_conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding=0,
    tile=(16, 16),
    *,
    dilation=1,
    groups: int = 1,
    block_co: int | None = None,
    block_ci: int | None = None,
    sub_rows: int | None = None,
    num_warps: int | None = None,
    out: torch.Tensor | None = None,
    packed_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """2-D convolution (cross-correlation, as F.conv2d) computed tile by tile by the Triton kernel.

    x: (N, C_in, H, W) in fp32, fp16 or bf16, NCHW or channels_last (any strides). weight: (C_out, C_in, KH, KW) of
    the same dtype; bias: (C_out,) or None. stride, padding: int or pair (padding may be "valid"/"same"). tile:
    output pixels per program, (height, width) or one int; powers of two, e.g. 8, 16, 32, 64. The products
    accumulate in fp32 (for fp32 inputs on a GPU the tensor cores use TF32 exactly when
    torch.backends.cudnn.allow_tf32 lets cuDNN do so, so both are compared like for like).

    Returns y of shape (N, C_out, OH, OW) in x's dtype and memory format, or writes into ``out`` (any strides) and
    returns it. Only groups=1 and dilation=1 are implemented: anything else raises ValueError.
    """
    if groups != 1:
        raise ValueError(f"groups must be 1: tiled_conv2d implements dense convolution only, got groups={groups!r}")
    if _pair(dilation, "dilation") != (1, 1):
        raise ValueError(f"dilation must be 1: tiled_conv2d does not implement dilated convolution, got {dilation!r}")
    if x.dim() != 4 or weight.dim() != 4:
        raise ValueError(f"x and weight must be 4-D, got shapes {tuple(x.shape)} and {tuple(weight.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"x.dtype must be one of {SUPPORTED_DTYPES}, got {x.dtype}")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise ValueError(f"weight and bias must have x's dtype {x.dtype}, got {weight.dtype} and "
                         f"{None if bias is None else bias.dtype}")  # fmt: skip
    if weight.device != x.device or (bias is not None and bias.device != x.device):
        raise ValueError(f"x, weight and bias must be on one device, got {x.device}, {weight.device}")
    n, c_in, h, w = x.shape
    c_out, w_c_in, kh, kw = weight.shape
    if w_c_in != c_in:
        raise ValueError(f"weight has {w_c_in} input channels but x has {c_in}")
    if bias is not None and tuple(bias.shape) != (c_out,):
        raise ValueError(f"bias must have shape ({c_out},), got {tuple(bias.shape)}")
    sh, sw = _pair(stride, "stride")
    if min(sh, sw) < 1:
        raise ValueError(f"stride must be >= 1, got {stride!r}")
    ph, pw = _padding_pair(padding, (kh, kw), (sh, sw))
    oh, ow = output_size(h, kh, sh, ph), output_size(w, kw, sw, pw)
    if oh < 1 or ow < 1:
        raise ValueError(f"input {h}x{w} with padding {padding!r} is smaller than the kernel {kh}x{kw}")
    shape = (n, c_out, oh, ow)
    if out is None:
        channels_last = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        out = torch.empty(shape, device=x.device, dtype=x.dtype, memory_format=fmt)
    elif tuple(out.shape) != shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"out must be a {x.dtype} tensor of shape {shape} on {x.device}, got "
                         f"{out.dtype} {tuple(out.shape)} on {out.device}")  # fmt: skip
    cfg = tile_config(tile, c_in, c_out, x.dtype, block_co=block_co, block_ci=block_ci, sub_rows=sub_rows,
                      num_warps=num_warps)  # fmt: skip
    if n == 0 or c_out == 0:
        return out
    _check_device(x)
    wp = pack_weight(weight) if packed_weight is None else packed_weight
    if tuple(wp.shape) != (kh, kw, c_in, c_out):
        raise ValueError(f"packed_weight must have shape {(kh, kw, c_in, c_out)}, got {tuple(wp.shape)}")
    tf32 = x.is_cuda and x.dtype == torch.float32 and tf32_enabled("conv")
    tiles_h, tiles_w = math.ceil(oh / cfg.tile_h), math.ceil(ow / cfg.tile_w)
    grid = (n * tiles_h * tiles_w, math.ceil(c_out / cfg.block_co))
    with torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext():
        _kernel_for(x)[grid](
            x, wp, bias if bias is not None else wp, out,
            c_in, h, w, c_out, oh, ow,
            *x.stride(), *wp.stride(), *out.stride(),
            tiles_h, tiles_w,
            STRIDE_H=sh, STRIDE_W=sw, PAD_H=ph, PAD_W=pw, KH=kh, KW=kw,
            TILE_H=cfg.tile_h, TILE_W=cfg.tile_w, SUB_H=cfg.sub_rows,
            BLOCK_CO=cfg.block_co, BLOCK_CI=cfg.block_ci,
            HAS_BIAS=bias is not None, PRECISION="tf32" if tf32 else "ieee", DOT_IN_FP32=_dot_in_fp32(x),
            num_warps=cfg.num_warps,
        )  # fmt: skip
    return out


class _TiledConvFunction(torch.autograd.Function):
    """Forward by the Triton kernel, backward by PyTorch's reference gradients (so TiledConv2d can train)."""

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, tile, options):
        ctx.save_for_backward(x, weight)
        ctx.conf = (stride, padding, bias is not None)
        return tiled_conv2d(x, weight, bias, stride, padding, tile, **options)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        stride, padding, has_bias = ctx.conf
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = torch.nn.grad.conv2d_input(x.shape, weight, grad, stride=stride, padding=padding)
        if ctx.needs_input_grad[1]:
            gw = torch.nn.grad.conv2d_weight(x, weight.shape, grad, stride=stride, padding=padding)
        if has_bias and ctx.needs_input_grad[2]:
            gb = grad.sum((0, 2, 3))
        return gx, gw, gb, None, None, None, None


class TiledConv2d(nn.Module):
    """Drop-in replacement for nn.Conv2d whose forward is tiled_conv2d (same parameters, same outputs).

    Build it with ``TiledConv2d.from_conv(conv, tile)``; it shares ``conv``'s weight and bias Parameters. The
    packed (KH, KW, C_in, C_out) weight is cached and rebuilt when the weight changes (in place or by dtype).
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True, tile=(16, 16),
                 **options) -> None:  # fmt: skip
        super().__init__()
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _padding_pair(padding, self.kernel_size, self.stride)
        self.tile = _pair(tile, "tile")
        self.options = options
        tile_config(self.tile, in_channels, out_channels, torch.float32, **options)  # validate early
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels, *self.kernel_size))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=5**0.5)
        if self.bias is not None:
            nn.init.zeros_(self.bias)
        self._packed: tuple | None = None

    @classmethod
    def from_conv(cls, conv: nn.Conv2d, tile=(16, 16), **options) -> TiledConv2d:
        """A TiledConv2d sharing ``conv``'s parameters. Raises ValueError for what the kernel does not implement."""
        if not isinstance(conv, nn.Conv2d):
            raise ValueError(f"conv must be an nn.Conv2d, got {type(conv).__name__}")
        unsupported = {
            "groups": (conv.groups, 1),
            "dilation": (conv.dilation, (1, 1)),
            "padding_mode": (conv.padding_mode, "zeros"),
        }
        for name, (value, needed) in unsupported.items():
            if value != needed:
                raise ValueError(f"TiledConv2d supports {name}={needed!r} only, got {name}={value!r}")
        with torch.device("meta"):  # no throwaway allocation: the parameters are replaced below
            module = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                         conv.bias is not None, tile, **options)  # fmt: skip
        module.weight = conv.weight
        module.bias = conv.bias
        return module

    def _packed_weight(self) -> torch.Tensor:
        w = self.weight
        # inference tensors (made under torch.inference_mode) have no version counter and never change
        key = (w.data_ptr(), -1 if w.is_inference() else w._version, w.dtype, w.device)
        if self._packed is None or self._packed[0] != key:
            self._packed = (key, pack_weight(w.detach()))
        return self._packed[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return _TiledConvFunction.apply(x, self.weight, self.bias, self.stride, self.padding, self.tile,
                                            self.options)  # fmt: skip
        return tiled_conv2d(x, self.weight, self.bias, self.stride, self.padding, self.tile,
                            packed_weight=self._packed_weight(), **self.options)  # fmt: skip

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, bias={self.bias is not None}, tile={self.tile}")  # fmt: skip


def tile_model(model: nn.Module, tile=(16, 16), **options) -> nn.Module:
    """A deep copy of ``model`` with every nn.Conv2d replaced by a TiledConv2d of the given tile (pixels).

    Raises ValueError if a convolution uses groups, dilation or a non-zero padding mode (not implemented).
    """
    tiled = copy.deepcopy(model)
    for module in list(tiled.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Conv2d):
                setattr(module, child_name, TiledConv2d.from_conv(child, tile, **options))
    return tiled


def conv2d_function(tile=(16, 16), **options):
    """A function with ``F.conv2d``'s signature that computes with :func:`tiled_conv2d` at ``tile``: what spatial
    tiling's stream mode calls per strip (``spatial_tiling.tile_spatially(..., conv2d=conv2d_function(16))``), so
    the Triton path never holds a full-size activation either. Each weight is packed once and kept while it is
    unchanged (the same key as :class:`TiledConv2d`'s cache)."""
    packed: dict = {}

    def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        key = (weight.data_ptr(), -1 if weight.is_inference() else weight._version, weight.dtype, weight.device)
        if key not in packed:
            packed[key] = pack_weight(weight.detach())
        return tiled_conv2d(x, weight, bias, stride, padding, tile, dilation=dilation, groups=groups,
                            packed_weight=packed[key], **options)  # fmt: skip

    return conv2d


def _compile_for_cuda(source_fn=None, signature=None, constants=None, *, arch: int = 90, num_warps: int = 4) -> dict:
    """Compile ``source_fn`` (a ``triton.jit`` function) ahead of time for an NVIDIA GPU of compute capability
    ``arch``, no GPU needed, and read its resource usage: {"registers_per_thread", "spill_bytes" (local memory per
    thread), "shared_mem_bytes" (per program)}. Needs the ptxas and cuobjdump that ship with Triton.

    Every use of Triton's private compiler API in cnnlab is here: ``triton.compiler.ASTSource``,
    ``triton.backends.compiler.GPUTarget``, the compiled kernel's ``asm["cubin"]`` and ``metadata.shared``, and
    the cuobjdump under ``triton/backends/nvidia/bin``. No public API replaces it: ``JITFunction.warmup`` compiles
    only for the GPU of this machine (it needs one), and ``python -m triton.tools.compile --target cuda:90:32``
    (Triton's ahead-of-time tool, built on these same calls) writes C launchers, not the resource usage. If
    Triton moves any of it, this raises a RuntimeError naming what moved. Without ``source_fn`` it only checks
    that the API is where it expects it and returns {} (what ``tests/test_kernels.py`` does, in any mode).
    """
    import subprocess
    import tempfile

    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as error:
        raise RuntimeError(f"Triton {triton.__version__} moved its private compiler API, which compile_report "
                           f"needs (triton.compiler.ASTSource, triton.backends.compiler.GPUTarget): {error}") from error
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        raise RuntimeError(f"Triton {triton.__version__} no longer ships cuobjdump at {tool}")
    if source_fn is None:
        return {}
    compiled = triton.compile(ASTSource(source_fn, signature, constants), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps})
    try:
        cubin, shared = compiled.asm["cubin"], int(compiled.metadata.shared)
    except (KeyError, AttributeError) as error:
        raise RuntimeError(f"Triton {triton.__version__} changed its compiled kernel object (asm['cubin'], "
                           f"metadata.shared): {error}") from error
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        usage = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True)
    fields = dict(part.split(":", 1) for part in usage.stdout.split() if ":" in part and part.split(":")[0].isupper())
    return {"registers_per_thread": int(fields["REG"]), "spill_bytes": int(fields["STACK"]) + int(fields["LOCAL"]),
            "shared_mem_bytes": shared}


def compile_report(
    dtype: torch.dtype = torch.float16,
    tile=(16, 16),
    kernel_size: int = 3,
    stride: int = 1,
    c_in: int = 64,
    c_out: int = 64,
    *,
    arch: int = 90,
    **options,
) -> dict:
    """Compile the kernel ahead of time for an NVIDIA GPU of compute capability ``arch`` (90 = H100), no GPU needed.

    Returns a dict: arch, dtype, tile_h, tile_w, registers_per_thread, spill_bytes (local memory per thread;
    0 = no spills), shared_mem_bytes (per program), num_warps, sub_rows, block_co, block_ci. Needs Triton in
    compiled mode (not under TRITON_INTERPRET=1) and the ptxas/cuobjdump that ship with Triton.
    """
    if triton is None:
        raise RuntimeError(f"compile_report needs Triton, which failed to import: {TRITON_IMPORT_ERROR}")
    if _imported_interpreted():
        raise RuntimeError("compile_report needs compiled Triton: import triton without TRITON_INTERPRET=1")
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"dtype must be one of {SUPPORTED_DTYPES}, got {dtype}")
    cfg = tile_config(tile, c_in, c_out, dtype, **options)
    ptr = "*" + {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    pad = kernel_size // 2
    constants = dict(
        STRIDE_H=stride, STRIDE_W=stride, PAD_H=pad, PAD_W=pad, KH=kernel_size, KW=kernel_size,
        TILE_H=cfg.tile_h, TILE_W=cfg.tile_w, SUB_H=cfg.sub_rows, BLOCK_CO=cfg.block_co, BLOCK_CI=cfg.block_ci,
        HAS_BIAS=False, PRECISION="tf32" if dtype == torch.float32 else "ieee", DOT_IN_FP32=False,
    )  # fmt: skip
    signature = {name: "i32" for name in _KERNEL.arg_names}
    signature.update({name: ptr for name in ("x_ptr", "w_ptr", "b_ptr", "y_ptr")})
    signature.update({name: "constexpr" for name in constants})
    usage = _compile_for_cuda(_KERNEL, signature, constants, arch=arch, num_warps=cfg.num_warps)
    return {
        "arch": arch, "dtype": str(dtype).removeprefix("torch."), "tile_h": cfg.tile_h, "tile_w": cfg.tile_w, **usage,
        "num_warps": cfg.num_warps, "sub_rows": cfg.sub_rows, "block_co": cfg.block_co, "block_ci": cfg.block_ci,
    }  # fmt: skip
