"""Tests for cnnlab.kernels (the Triton tiled convolution, the convolution strategies); spatial tiling has its own
file, tests/test_spatial_tiling.py.

Every kernel is compared with torch.nn.functional.conv2d on fresh random shapes and inputs (the seed is printed
in each failure message), writing into an output poisoned with NaN so elements a kernel forgets to write fail.
The Triton kernel runs on the GPU when there is one, else in Triton's CPU interpreter (TRITON_INTERPRET=1, set
per test with monkeypatch so nothing leaks into other tests).
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import cnnlab  # noqa: F401
from cnnlab.kernels import strategies, triton_conv
from cnnlab.kernels.triton_conv import TiledConv2d, tile_model, tiled_conv2d
import nets
from margins import check

ROOT = Path(__file__).resolve().parents[1]
# Relative error (max |error| / max |reference|) each precision must meet: fp32 accumulation in every case.
# fp32: sums of up to 11*11*20 products in another order than oneDNN's differ by ~1e-6 relative (2e-5: 10x);
# fp16/bf16: the output is rounded to 11 / 8 mantissa bits (2^-11 = 4.9e-4, 2^-8 = 3.9e-3) plus the inputs' rounding
# compounded over the sum. Measured margins on the AVX-512 and AVX2 paths are in the closing notes of issue 10.
TOLERANCE = {torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def _seed() -> int:
    return random.SystemRandom().randrange(2**31)  # fresh inputs every run; printed on failure


def _random_case(gen: torch.Generator, kernel: int, stride: int, padding: int, max_batch=8, max_channels=9, extra=12):
    def r(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    n, c_in, c_out = r(1, max_batch), r(1, max_channels), r(1, max_channels)
    h, w = r(max(1, kernel - 2 * padding), kernel + extra), r(max(1, kernel - 2 * padding), kernel + extra)
    return n, c_in, c_out, h, w


def _rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item()


def _reference(x, w, b, stride, padding):
    return F.conv2d(x.float(), w.float(), None if b is None else b.float(), stride, padding)


@pytest.fixture
def device(monkeypatch) -> str:
    """Where the Triton kernel runs: the GPU if there is one (full fp32, no TF32, so the fp32 tolerance holds for
    kernel and reference), else the CPU through Triton's interpreter."""
    if torch.cuda.is_available():
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
        return "cuda"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    return "cpu"


# ---------------------------------------------------------------- Triton kernel (interpreter on the CPU)

# (kernel, stride, padding, tile, channels_last, bias): 1x1/3x3/5x5/11x11, stride 1 and 2, padding 0-2.
KERNEL_CASES = [
    (1, 1, 0, (8, 8), False, True),
    (1, 2, 1, (4, 8), True, False),
    (3, 1, 1, (16, 16), False, True),
    (3, 2, 0, (8, 16), True, True),
    (3, 2, 2, (8, 8), False, False),
    (5, 1, 2, (8, 8), True, True),
    (5, 2, 1, (16, 8), False, True),
    (11, 2, 2, (8, 8), False, True),
    (11, 1, 0, (8, 8), True, False),
]


@pytest.mark.parametrize("kernel,stride,padding,tile,channels_last,bias", KERNEL_CASES)
@pytest.mark.gpu
def test_triton_kernel_matches_conv2d_fp32(device, kernel, stride, padding, tile, channels_last, bias):
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    n, c_in, c_out, h, w = _random_case(gen, kernel, stride, padding, max_batch=8 if kernel < 5 else 2, extra=10)
    if kernel == 11:
        n, c_in, c_out = 1, min(c_in, 3), min(c_out, 4)  # keep the interpreted 121-tap loop short
    x = torch.randn(n, c_in, h, w, generator=gen).to(device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    wt = torch.randn(c_out, c_in, kernel, kernel, generator=gen).to(device)
    b = torch.randn(c_out, generator=gen).to(device) if bias else None
    ref = _reference(x, wt, b, stride, padding)
    out = torch.full(ref.shape, float("nan"), device=device)
    y = tiled_conv2d(x, wt, b, stride, padding, tile, out=out)
    assert y is out
    assert not torch.isnan(out).any(), f"seed {seed}: unwritten output elements"
    check("test_triton_kernel_matches_conv2d_fp32: relative error",
          _rel_error(out, ref), "<", TOLERANCE[torch.float32], detail=f"seed {seed}: {(n, c_in, c_out, h, w)}")
    # Without out=: the result keeps the input's memory format (where the input's format is unambiguous).
    y = tiled_conv2d(x, wt, b, stride, padding, tile)
    if c_in > 1 and h * w > 1:
        assert y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    check("test_triton_kernel_matches_conv2d_fp32: relative error",
          _rel_error(y, ref), "<", TOLERANCE[torch.float32], detail=f"seed {seed}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kernel,stride,padding", [(3, 1, 1), (5, 2, 2)])
@pytest.mark.gpu
def test_triton_kernel_half_precisions(device, dtype, kernel, stride, padding):
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    n, c_in, c_out, h, w = _random_case(gen, kernel, stride, padding, max_batch=3, max_channels=20, extra=8)
    x = torch.randn(n, c_in, h, w, generator=gen).to(device, dtype)
    wt = torch.randn(c_out, c_in, kernel, kernel, generator=gen).to(device, dtype)
    b = torch.randn(c_out, generator=gen).to(device, dtype)
    ref = _reference(x, wt, b, stride, padding)  # exact products of the rounded inputs, fp32 sums
    out = torch.full(ref.shape, float("nan"), dtype=dtype, device=device).contiguous(memory_format=torch.channels_last)
    tiled_conv2d(x, wt, b, stride, padding, (8, 8), out=out)
    assert out.dtype == dtype
    assert not torch.isnan(out).any(), f"seed {seed}"
    check(f"test_triton_kernel_half_precisions {dtype}: relative error",
          _rel_error(out, ref), "<", TOLERANCE[dtype], detail=f"seed {seed}: {(n, c_in, c_out, h, w)}")


@pytest.mark.gpu
def test_triton_kernel_writes_only_its_output_view(device):
    """out may be any strided view (here every other channel of a bigger tensor): the rest stays untouched."""
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 5, 13, 9, generator=gen).to(device)
    wt = torch.randn(20, 5, 3, 3, generator=gen).to(device)
    big = torch.full((2, 40, 13, 9), float("nan"), device=device)
    view = big[:, ::2]
    tiled_conv2d(x, wt, None, 1, 1, (8, 8), out=view)
    check("test_triton_kernel_writes_only_its_output_view: relative error",
          _rel_error(view, _reference(x, wt, None, 1, 1)), "<", TOLERANCE[torch.float32], detail=f"seed {seed}")
    assert torch.isnan(big[:, 1::2]).all(), "wrote outside the out view"


@pytest.mark.gpu
def test_tiled_conv2d_module_and_tile_model(device):
    torch.manual_seed(_seed())
    model = nn.Sequential(nn.Conv2d(3, 6, 5, padding=2), nn.ReLU(), nn.Conv2d(6, 4, 3, stride=2, bias=False))
    model = model.eval().to(device)
    x = torch.randn(2, 3, 15, 17, device=device)
    tiled = tile_model(model, tile=(8, 16))
    assert [type(m) for m in tiled] == [TiledConv2d, nn.ReLU, TiledConv2d]
    assert isinstance(model[0], nn.Conv2d), "tile_model must not modify its argument"
    assert tiled[0].weight is not model[0].weight  # a copy
    with torch.no_grad():
        check("test_tiled_conv2d_module_and_tile_model: relative error",
              _rel_error(tiled(x), model(x)), "<", TOLERANCE[torch.float32])
    # Gradients flow (the backward uses PyTorch's reference convolution gradients).
    layer = TiledConv2d.from_conv(model[0], tile=8)
    xg = x.clone().requires_grad_()
    layer(xg).square().sum().backward()
    xr = x.clone().requires_grad_()
    ref_w = model[0].weight.detach().clone().requires_grad_()
    F.conv2d(xr, ref_w, model[0].bias.detach(), 1, 2).square().sum().backward()
    check("test_tiled_conv2d_module_and_tile_model: input gradient relative error",
          _rel_error(xg.grad, xr.grad), "<", 1e-4)
    check("test_tiled_conv2d_module_and_tile_model: weight gradient relative error",
          _rel_error(layer.weight.grad, ref_w.grad), "<", 1e-4)


@pytest.mark.gpu
def test_tile_model_works_on_a_model_built_under_inference_mode(device):
    # Weights made under torch.inference_mode have no version counter; the packed-weight cache must cope.
    with torch.inference_mode():
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval().to(device)
        tiled = tile_model(model, tile=8)
        x = torch.randn(1, 3, 9, 11, device=device)
        check("test_tile_model_works_on_a_model_built_under_inference_mode: relative error",
              _rel_error(tiled(x), model(x)), "<", TOLERANCE[torch.float32])


def test_triton_kernel_rejects_what_it_does_not_implement():
    x, w = torch.randn(1, 4, 8, 8), torch.randn(4, 2, 3, 3)
    with pytest.raises(ValueError, match="groups must be 1"):
        tiled_conv2d(x, w, groups=2)
    with pytest.raises(ValueError, match="tile edges must be powers of two"):
        tiled_conv2d(x, torch.randn(4, 4, 3, 3), tile=(12, 12))
    with pytest.raises(ValueError, match="dtype"):
        tiled_conv2d(x.double(), torch.randn(4, 4, 3, 3).double())
    with pytest.raises(ValueError, match="groups="):
        TiledConv2d.from_conv(nn.Conv2d(4, 4, 3, groups=2))


def test_interpreted_kernel_runs_whatever_mode_triton_was_imported_in():
    """Set TRITON_INTERPRET only after triton is imported (as pytest-xdist workers or notebooks may): CPU calls
    still run, through an interpreted copy of the kernel."""
    code = (
        "import os, torch, triton\nfrom cnnlab.kernels import tiled_conv2d\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "x, w = torch.randn(2, 3, 9, 7), torch.randn(4, 3, 3, 3)\n"
        "for dt in (torch.float32, torch.bfloat16):\n"
        "    y = tiled_conv2d(x.to(dt), w.to(dt), None, 2, 1, 8).float()\n"
        "    r = torch.nn.functional.conv2d(x.to(dt).float(), w.to(dt).float(), None, 2, 1)\n"
        "    print(((y - r).abs().max() / r.abs().max()).item())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [float(v) for v in proc.stdout.split()]
    check("Triton kernel in a subprocess, fp32: relative error", errors[0], "<", TOLERANCE[torch.float32])
    check("Triton kernel in a subprocess, bf16: relative error", errors[1], "<", TOLERANCE[torch.bfloat16])


def test_cpu_call_without_interpreter_says_how_to_enable_it():
    """Without TRITON_INTERPRET, a CPU call raises a RuntimeError that says how to enable the interpreter."""
    code = (
        "import torch\nfrom cnnlab.kernels import tiled_conv2d\n"
        "try:\n    tiled_conv2d(torch.randn(1, 2, 8, 8), torch.randn(3, 2, 3, 3))\n"
        "except RuntimeError as e:\n    print('ERR', e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERR" in proc.stdout and "TRITON_INTERPRET=1" in proc.stdout


def test_gpu_kernel_compiles_for_h100_without_spills():
    """Ahead-of-time compilation for sm_90 (no GPU needed): the GPU path builds and keeps its accumulator in
    registers at every tile size the study sweeps; larger tiles never use less shared memory per program."""
    code = (
        "import json, torch\nfrom cnnlab.kernels.triton_conv import compile_report\n"
        "rows = [compile_report(d, t, 3, 1, 64, 64) for d in (torch.float16, torch.float32) for t in (8, 64)]\n"
        "print(json.dumps(rows))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True)
    if "ptxas" in proc.stderr and proc.returncode != 0 and "No such file" in proc.stderr:
        pytest.skip("compiling for CUDA needs Triton's bundled ptxas (its CUDA assembler), which this Triton "
                    "install lacks")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    # Register allocation is the compiler's: with the locked Triton (3.7.1) nothing spills; Triton 3.6.0 (the lent
    # GPU machine's) reaches 255 registers and spills 8 bytes per thread at fp32 tiles 32 and 64, Triton 3.4.0
    # (torch 2.8's, the oldest supported) 64 bytes (both measured): 16 registers at most, not the 64x64 fp32
    # accumulator (128 per thread). Any other Triton may spill at most 64 bytes.
    import triton
    import lockfile

    locked = lockfile.read_lock().get("triton") == triton.__version__
    for row in rows:
        assert row["spill_bytes"] <= (0 if locked else 64), (triton.__version__, row)
        assert 0 < row["registers_per_thread"] <= 255, row
    assert rows[1]["shared_mem_bytes"] >= rows[0]["shared_mem_bytes"] > 0


def test_triton_private_compiler_api_is_where_compile_report_expects():
    """compile_report rests on Triton's private compiler API, all of it in triton_conv._compile_for_cuda: if a
    Triton upgrade moves it, this fails saying what moved (the public replacement, if any, goes there)."""
    if triton_conv.triton is None:
        pytest.skip(f"Triton is not installed: {triton_conv.TRITON_IMPORT_ERROR}")
    try:
        triton_conv._compile_for_cuda()
    except RuntimeError as error:
        pytest.fail(f"{error}; update cnnlab.kernels.triton_conv._compile_for_cuda")


# ---------------------------------------------------------------- strategies

CONV_CASES = [(k, s, p) for k in (1, 3, 5, 11) for s in (1, 2) for p in (0, 1, 2)]


@pytest.mark.parametrize("name", ["native", "gemm", "fft", "fft_tiled"])
def test_strategy_functions_match_conv2d(name):
    fn = strategies.CONV_FUNCTIONS[name]
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    for kernel, stride, padding in CONV_CASES:  # 24 shapes, fresh inputs for each
        n, c_in, c_out, h, w = _random_case(gen, kernel, stride, padding, max_channels=7, extra=20)
        x = torch.randn(n, c_in, h, w, generator=gen)
        if kernel == 3:
            x = x.contiguous(memory_format=torch.channels_last)
        wt = torch.randn(c_out, c_in, kernel, kernel, generator=gen)
        b = torch.randn(c_out, generator=gen) if kernel != 5 else None
        ref = _reference(x, wt, b, stride, padding)
        out = torch.full(ref.shape, float("nan"))
        assert fn(x, wt, b, stride, padding, out=out) is out
        case = f"seed {seed}: {name} {(n, c_in, c_out, h, w)} k={kernel} s={stride} p={padding}"
        assert not torch.isnan(out).any(), case
        check("test_strategy_functions_match_conv2d: relative error",
              _rel_error(out, ref), "<", TOLERANCE[torch.float32], detail=case)


def test_fft_tiled_uses_several_blocks_and_small_workspaces():
    """Overlap-add across many 32x32 blocks and output-channel chunks (tiny workspace) is still exact."""
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 75, 61, generator=gen)
    wt = torch.randn(10, 3, 5, 5, generator=gen)
    ref = _reference(x, wt, None, 2, 2)
    for fn in (strategies.conv2d_fft_tiled, strategies.conv2d_fft, strategies.conv2d_gemm):
        y = fn(x, wt, None, 2, 2, workspace_mib=0.05)
        check("test_fft_tiled_uses_several_blocks_and_small_workspaces: relative error",
              _rel_error(y, ref), "<", TOLERANCE[torch.float32], detail=f"seed {seed}: {fn.__name__}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_strategy_functions_keep_half_dtypes(dtype):
    seed = _seed()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 6, 15, 13, generator=gen).to(dtype)
    wt = torch.randn(5, 6, 3, 3, generator=gen).to(dtype)
    ref = _reference(x, wt, None, 1, 1)
    for name in ("gemm", "fft", "fft_tiled"):
        y = strategies.CONV_FUNCTIONS[name](x, wt, None, 1, 1)
        assert y.dtype == dtype
        check(f"test_strategy_functions_keep_half_dtypes {dtype}: relative error",
              _rel_error(y, ref), "<", TOLERANCE[dtype], detail=f"seed {seed}: {name}")


@pytest.fixture(scope="module")
def resnet20():
    return nets.resnet20(_seed())


def _wall_timer(fn) -> float:
    """The timer strategy "best" needs (kernels do not import cnnlab.profiling): one wall-clock call, in s."""
    from cnnlab.profiling import wall_time

    return wall_time(fn, device="cpu").seconds


@pytest.mark.parametrize("name", ["gemm", "fft", "fft_tiled", "best", "opt", "native"])
def test_apply_strategy_on_resnet20_matches(resnet20, name):
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = resnet20(x)
        model = strategies.apply_strategy(resnet20, name, **({"timer": _wall_timer} if name == "best" else {}))
        y = model(x)
    check("test_apply_strategy_on_resnet20_matches: relative error", _rel_error(y, ref), "<", 1e-4, detail=name)
    assert any(isinstance(m, nn.BatchNorm2d) for m in resnet20.modules()), "the original must stay untouched"
    if name == "opt":
        assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules()), "BN must be folded"
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        assert convs and all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    elif name != "native":
        layers = [m for m in model.modules() if isinstance(m, strategies.StrategyConv2d)]
        assert len(layers) == 19 and all(m.last_choice in strategies.CONV_STRATEGIES for m in layers)


def test_best_measures_once_per_layer_shape():
    strategies.best_cache().clear()
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                          nn.Conv2d(8, 8, 3, padding=1)).eval()  # fmt: skip
    best = strategies.apply_strategy(model, "best", timer=_wall_timer)
    x = torch.randn(1, 3, 20, 20)
    with torch.no_grad():
        y = best(x)
        assert len(strategies.best_cache()) == 2  # the two 8->8 layers share one shape, so one measurement
        entry = next(iter(strategies.best_cache().values()))
        assert entry["choice"] in strategies.candidates_for("cpu") and "direct" not in strategies.candidates_for("cpu")
        assert entry[f"{entry['choice']}_ms"] == min(v for k, v in entry.items() if k.endswith("_ms"))
        y2 = best(x)
        assert len(strategies.best_cache()) == 2
    check("test_best_measures_once_per_layer_shape: relative error", _rel_error(y, model(x)), "<", 1e-5)
    assert torch.equal(y, y2)


def test_best_picks_what_the_callers_timer_says_is_fastest():
    """The timer is the caller's: a timer that makes fft_tiled look fastest gets fft_tiled chosen, every candidate
    timed once per layer shape; without a timer "best" is refused before any forward pass."""
    strategies.best_cache().clear()
    calls = []

    def timer(fn):
        calls.append(fn)
        fn()
        return {1: 3e-3, 2: 2e-3, 3: 1e-3}[len(calls)]  # gemm, fft, fft_tiled: the last is "fastest"

    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval()
    best = strategies.apply_strategy(model, "best", timer=timer, candidates=("gemm", "fft", "fft_tiled"))
    with torch.no_grad():
        best(torch.randn(1, 3, 9, 9))
    assert len(calls) == 3 and best[0].last_choice == "fft_tiled"
    assert next(iter(strategies.best_cache().values())) == {"gemm_ms": pytest.approx(3.0), "fft_ms": pytest.approx(2.0),
                                                             "fft_tiled_ms": pytest.approx(1.0), "choice": "fft_tiled"}
    with pytest.raises(ValueError, match="pass timer="):
        strategies.apply_strategy(model, "best")
    strategies.best_cache().clear()


def test_best_cache_is_kept_per_candidate_set():
    """A layer picked among gemm alone must not answer for gemm and fft: the second set is timed anew."""
    strategies.best_cache().clear()
    timed = []

    def timer(fn):
        timed.append(fn)
        fn()
        return 1e-3 * len(timed)

    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval()
    x = torch.randn(1, 3, 9, 9)
    with torch.no_grad():
        strategies.apply_strategy(model, "best", timer=timer, candidates=("gemm",))(x)
        assert len(timed) == 1
        both = strategies.apply_strategy(model, "best", timer=timer, candidates=("fft", "gemm"))
        both(x)
    assert len(timed) == 3 and len(strategies.best_cache()) == 2 and both[0].last_choice == "fft"
    strategies.best_cache().clear()


@pytest.mark.gpu
def test_direct_strategy_uses_triton_kernel(device):
    model = nn.Sequential(nn.Conv2d(3, 5, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(5, 4, 1)).eval().to(device)
    x = torch.randn(2, 3, 11, 9, device=device)
    direct = strategies.apply_strategy(model, "direct", tile=(8, 8))
    with torch.no_grad():
        check("test_direct_strategy_uses_triton_kernel: relative error",
              _rel_error(direct(x), model(x)), "<", TOLERANCE[torch.float32])
    assert [m.last_choice for m in direct if isinstance(m, strategies.StrategyConv2d)] == ["direct", "direct"]


def test_unknown_strategy_lists_valid_names():
    with pytest.raises(ValueError, match="valid strategies: native, gemm, fft, fft_tiled, direct, best, opt"):
        strategies.apply_strategy(nn.Conv2d(1, 1, 1), "winograd")


def test_interpreter_scalar_compat_squeezes_scalars_for_older_interpreters(monkeypatch):
    """Triton 3.4-3.6's interpreter gives a scalar argument (a 1-element array) to ``range`` through ``int(array)``,
    which numpy 2.4 refuses; cnnlab's compat wraps such an interpreter so the index comes from the squeezed array.
    A stand-in with 3.6's code checks the wrap, on whatever triton and numpy are installed."""
    pytest.importorskip("triton", reason="Triton is not installed: the interpreter this test wraps is Triton's")
    import numpy as np
    from triton.runtime import interpreter

    from cnnlab.kernels import triton_conv

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    def old_patch_lang_tensor(tensor, scope):  # the line of triton 3.6's interpreter.py
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    class Handle:
        data = np.array([7], dtype=np.int32)

    class Tensor:
        handle = Handle()

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", old_patch_lang_tensor)
    triton_conv._interpreter_scalar_compat()
    triton_conv._interpreter_scalar_compat()  # idempotent: wraps once
    assert interpreter._patch_lang_tensor is not old_patch_lang_tensor
    interpreter._patch_lang_tensor(Tensor, Scope())
    assert list(range(Tensor())) == list(range(7))
