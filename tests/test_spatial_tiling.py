"""Tests for cnnlab.kernels.spatial_tiling (the model rewrite that runs a network's first layers tile by tile; the
tiling study compares it with the Triton kernel): receptive fields, exact activations and logits in every mode,
peak memory falling with the tile, errors naming what is not supported.

Inputs and weights are fresh random tensors every run.
"""

import random

import pytest
import torch
import torch.utils._python_dispatch  # noqa: F401  (TorchDispatchMode: counts convolution calls)
from torch import nn

import cnnlab  # noqa: F401
from cnnlab.kernels import spatial_tiling
from cnnlab.kernels.spatial_tiling import SpatiallyTiled, receptive_field, split_model, tile_spatially
import nets
from margins import check


def _seed() -> int:
    return random.SystemRandom().randrange(2**31)  # fresh inputs every run; printed on failure


def _rel_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    return ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-6)).item()


@pytest.fixture(scope="module")
def resnet20():
    return nets.resnet20(_seed())


def test_receptive_field_of_resnet20_prefixes(resnet20):
    # stem conv + 6 convs at stride 1: halo 7; layer2 adds one stride-2 conv (+1) and 5 convs at stride 2 (+10);
    # layer3 adds 1 * 2 + 5 * 4 = 22 more. Right halo equals left for 3x3 / padding 1.
    expected = {"layer1": (1, 7), "layer2": (2, 18), "layer3": (4, 40)}
    for until, (stride, halo) in expected.items():
        prefix, _ = split_model(resnet20, until)
        g_h, g_w = receptive_field(prefix)
        assert (g_h.stride, g_h.left, g_h.right) == (stride, halo, halo) == (g_w.stride, g_w.left, g_w.right)


def test_receptive_field_matches_a_perturbation_probe(resnet20):
    """Changing one input pixel changes outputs exactly within the computed receptive field (never outside)."""
    prefix, _ = split_model(resnet20, "layer2")
    g_h, g_w = receptive_field(prefix)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        base = prefix(x)
        x[0, :, 31, 40] += 10.0
        changed = (prefix(x) - base).abs().amax((0, 1)) > 0
    rows, cols = changed.nonzero(as_tuple=True)
    # Output o sees input o*stride - left ... o*stride + right, so pixel p reaches o in [(p-right)/s, (p+left)/s].
    assert rows.min() >= (31 - g_h.right) / g_h.stride and rows.max() <= (31 + g_h.left) / g_h.stride
    assert cols.min() >= (40 - g_w.right) / g_w.stride and cols.max() <= (40 + g_w.left) / g_w.stride
    assert rows.max() - rows.min() >= (g_h.receptive_field // g_h.stride) - 2  # and it is not much smaller


@pytest.mark.parametrize("mode", spatial_tiling.MODES)
@pytest.mark.parametrize("until", ["layer1", "layer2", "layer3"])
def test_spatial_tiling_reproduces_prefix_activations(resnet20, mode, until):
    prefix, _ = split_model(resnet20, until)
    stride = receptive_field(prefix)[0].stride
    h, w = random.randrange(20, 50), random.randrange(20, 50)  # odd sizes: ragged last tiles
    x = torch.randn(2, 3, h, w)
    with torch.no_grad():
        ref = prefix(x)
        for tile in (8 * stride, 12 * stride):
            y = SpatiallyTiled(prefix, tile, mode)(x)
            assert y.shape == ref.shape
            check("test_spatial_tiling_reproduces_prefix_activations: relative error",
                  _rel_error(y, ref), "<", 1e-5, detail=(mode, until, tile, (h, w)))


@pytest.mark.parametrize("mode,tile", [("stream", 32), ("recompute", 64)])
def test_tiled_resnet20_gives_the_same_logits(resnet20, mode, tile):
    x = torch.randn(1, 3, 224, 224)  # the tiling study's Mini-ImageNet size
    tiled = tile_spatially(resnet20, tile, until="layer3", mode=mode)
    with torch.no_grad():
        ref, y = resnet20(x), tiled(x)
    assert y.shape == ref.shape == (1, 10)
    check("test_tiled_resnet20_gives_the_same_logits: relative error", _rel_error(y, ref), "<", 1e-5)
    assert tiled.num_classes == 10 and tiled.input_shape == resnet20.input_shape


def test_spatial_tiling_with_pooling_and_inplace_ops():
    torch.manual_seed(_seed())
    prefix = nn.Sequential(
        nn.Conv2d(3, 4, 5, stride=2, padding=2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, padding=1),
        nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.AvgPool2d(2), nn.Conv2d(4, 3, 1),
    ).eval()  # fmt: skip
    x = torch.randn(2, 3, 71, 53)
    with torch.no_grad():
        ref = prefix(x.clone())
        for mode in spatial_tiling.MODES:
            y = SpatiallyTiled(list(prefix), 16, mode)(x)
            check("test_spatial_tiling_with_pooling_and_inplace_ops: relative error",
                  _rel_error(y, ref), "<", 1e-5, detail=mode)


def test_stream_tiling_cuts_peak_activation_memory(resnet20):
    """Peak live tensor memory (allocator events) falls with the tile size, to under half of untiled at 16 rows."""
    from cnnlab.profiling.memory import cpu_peak_bytes

    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        untiled = cpu_peak_bytes(lambda: resnet20(x))
        tiled = {}
        for tile in (16, 64):
            model = tile_spatially(resnet20, tile, until="layer3")
            tiled[tile] = cpu_peak_bytes(lambda: model(x))  # noqa: B023 - called right here
    assert tiled[16] * 2 < untiled, (tiled, untiled)
    assert tiled[16] < tiled[64] < untiled, (tiled, untiled)


def test_spatial_tiling_errors(resnet20):
    prefix, _ = split_model(resnet20, "layer2")
    with pytest.raises(ValueError, match="multiple of the prefix's total stride"):
        SpatiallyTiled(prefix, 15)
    with pytest.raises(ValueError, match="mode must be one of"):
        SpatiallyTiled(prefix, 16, "fancy")
    with pytest.raises(ValueError, match="does not support module"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3), nn.Flatten()], 8)
    with pytest.raises(ValueError, match="not a submodule"):
        split_model(resnet20, "layer9")
    train_mode = SpatiallyTiled([nn.Conv2d(3, 3, 3), nn.BatchNorm2d(3)], 8)  # modules default to train mode
    with pytest.raises(ValueError, match="eval mode"):
        train_mode(torch.randn(1, 3, 16, 16))


def test_stream_tiling_through_the_global_pool_gives_the_same_logits(resnet20):
    """The whole trunk and its global average pool streamed (the pool summed strip by strip): no full-size
    activation, not even the trunk's output, and the same logits."""
    x = torch.randn(2, 3, 100, 76)  # ragged last strips
    tiled = tile_spatially(resnet20, 16, until="avgpool")
    with torch.no_grad():
        ref, y = resnet20(x), tiled(x)
    assert y.shape == ref.shape == (2, 10)
    check("test_stream_tiling_through_the_global_pool_gives_the_same_logits: relative error",
          _rel_error(y, ref), "<", 1e-5)


@pytest.mark.parametrize("stride,dilation,padding", [(1, 2, 2), (2, 1, 1), (2, 1, 2), (3, 2, 3)])
def test_stream_tiling_at_the_border_with_strides_and_dilations(stride, dilation, padding):
    """Every strip at the top or bottom border is padded by the convolution's own padding (a view of its output) or,
    where the padding rows miss the stride's grid, by a padded copy: both agree with the untiled layers."""
    torch.manual_seed(_seed())
    prefix = nn.Sequential(nn.Conv2d(3, 5, 3, stride=stride, padding=padding, dilation=dilation), nn.ReLU(),
                           nn.Conv2d(5, 4, 3, padding=1)).eval()
    x = torch.randn(2, 3, random.randrange(31, 61), random.randrange(17, 40))
    with torch.no_grad():
        ref = prefix(x)
        for tile in (stride, 4 * stride, 7 * stride):
            y = SpatiallyTiled(list(prefix), tile)(x)
            assert y.shape == ref.shape
            check("test_stream_tiling_at_the_border_with_strides_and_dilations: relative error",
                  _rel_error(y, ref), "<", 1e-5, detail=(stride, dilation, padding, tile, tuple(x.shape)))


def test_stream_tiling_through_the_global_pool_cuts_peak_memory_further(resnet20):
    """Streaming the pool too, the trunk's output is never stitched: the peak falls below the layer3 cut's."""
    from cnnlab.profiling.memory import cpu_peak_bytes

    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        peaks = {}
        for until in ("layer3", "avgpool"):
            model = tile_spatially(resnet20, 16, until=until)
            peaks[until] = cpu_peak_bytes(lambda: model(x))  # noqa: B023 - called right here
    # the layer3 cut stitches 64 x 32 x 32 float32 (256 KiB) that the pooled stream never holds
    assert peaks["avgpool"] + 200 * 1024 < peaks["layer3"], peaks


def test_global_pool_and_batch_statistics_errors():
    pooled = [nn.Conv2d(3, 3, 3, padding=1), nn.AdaptiveAvgPool2d(1)]
    with pytest.raises(ValueError, match="needs mode='stream'"):
        SpatiallyTiled(pooled, 8, "recompute")
    with pytest.raises(ValueError, match="only as the prefix's last operation"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3), nn.AdaptiveAvgPool2d(1), nn.ReLU()], 8)
    with pytest.raises(ValueError, match="does not support module"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3), nn.AdaptiveAvgPool2d(2)], 8)
    no_stats = SpatiallyTiled([nn.Conv2d(3, 3, 3), nn.BatchNorm2d(3, track_running_stats=False).eval()], 8)
    with pytest.raises(ValueError, match="running statistics"):
        no_stats(torch.randn(1, 3, 16, 16))


class _CountConvolutions(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += func in (torch.ops.aten.convolution.default, torch.ops.aten.mkldnn_convolution.default)
        return func(*args, **(kwargs or {}))


def test_batched_tiles_run_each_layer_in_one_call_and_agree_with_stream_and_untiled(resnet20):
    """Batched mode stacks the tiles along the batch dimension: ResNet-20's trunk (19 convolutions) is 19 calls
    whatever the number of tiles (49 at 32 pixels on 224x224), or 19 per group of ``tiles_per_launch`` tiles."""
    x = torch.randn(2, 3, 224, 224)
    prefix, _ = split_model(resnet20, "layer3")
    with torch.no_grad():
        ref = prefix(x)
        for per_launch, calls in ((None, 19), (25, 38)):
            tiled = SpatiallyTiled(prefix, 32, "batched", tiles_per_launch=per_launch)
            with _CountConvolutions() as count:
                y = tiled(x)
            assert count.calls == calls, (per_launch, count.calls)
            check("test_batched_tiles_run_each_layer_in_one_call: relative error", _rel_error(y, ref), "<", 1e-5,
                  detail=per_launch)
        with _CountConvolutions() as count:
            SpatiallyTiled(prefix, 32, "stream")(x)
        assert count.calls > 19 * 5  # one call per strip and layer


def test_tiles_per_launch_is_for_batched_mode_only():
    with pytest.raises(ValueError, match="tiles_per_launch=4: a positive int, with mode='batched' only"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3, padding=1)], 8, "stream", tiles_per_launch=4)
    with pytest.raises(ValueError, match="tiles_per_launch=0"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3, padding=1)], 8, "batched", tiles_per_launch=0)
    with pytest.raises(ValueError, match="needs mode='stream'"):
        SpatiallyTiled([nn.Conv2d(3, 3, 3, padding=1), nn.AdaptiveAvgPool2d(1)], 8, "batched")


def test_stream_tiling_with_the_triton_kernel_as_its_convolution(resnet20, monkeypatch):
    """The Triton kernel (interpreted on a CPU) computing every strip's convolution: the same activations, and the
    kernel really is what ran (its calls counted)."""
    from cnnlab.kernels import triton_conv

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if triton_conv.triton_check_device()[0] is None:
        pytest.skip("Triton cannot run here: " + str(triton_conv.triton_check_device()[1]))
    prefix, _ = split_model(resnet20, "layer1")
    x = torch.randn(1, 3, 19, 13)  # small: interpreted Triton is slow; odd sizes: ragged strips
    conv, calls = triton_conv.conv2d_function(8), []

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return conv(*args, **kwargs)

    with torch.no_grad():
        ref = prefix(x)
        y = SpatiallyTiled(prefix, 8, conv2d=counted)(x.to(triton_conv.triton_check_device()[0])).cpu()
    check("test_stream_tiling_with_the_triton_kernel_as_its_convolution: relative error", _rel_error(y, ref), "<",
          1e-5)
    assert len(calls) >= 7 * 3  # 7 convolutions, each over at least 3 strips of 8 of the 19 rows
    with pytest.raises(ValueError, match="with mode='stream' only"):
        SpatiallyTiled(prefix, 8, "batched", conv2d=counted)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_every_tiled_path_on_a_gpu_agrees_and_the_streamed_ones_cut_peak_memory(resnet20):
    """On a GPU (make gpu-check): stream mode through the global pool, stream mode with the Triton kernel and
    batched mode give the untiled logits (TF32 off, so only summation order differs), and the two stream paths hold
    far less than the untiled model at their peak (torch.cuda.max_memory_allocated above what was resident)."""
    from cnnlab import config
    from cnnlab.kernels import triton_conv

    model = resnet20.cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    paths = {"untiled": model, "stream": tile_spatially(model, 16, until="avgpool"),
             "stream_triton": tile_spatially(model, 16, until="avgpool", conv2d=triton_conv.conv2d_function(16)),
             "batched": tile_spatially(model, 56, until="layer1", mode="batched", tiles_per_launch=4)}
    peaks, outputs = {}, {}
    with torch.inference_mode(), config.tf32(False):
        for name, net in paths.items():
            net(x)  # compiles (Triton) and warms up
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            outputs[name] = net(x)
            torch.cuda.synchronize()
            peaks[name] = torch.cuda.max_memory_allocated() - before
    for name in ("stream", "stream_triton", "batched"):
        check("test_every_tiled_path_on_a_gpu_agrees: relative error", _rel_error(outputs[name], outputs["untiled"]),
              "<", 1e-4, detail=name)
    assert peaks["stream"] * 3 < peaks["untiled"] and peaks["stream_triton"] * 3 < peaks["untiled"], peaks


class _CountBatchNorms(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += "batch_norm" in func.__name__
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", spatial_tiling.MODES)
def test_batchnorm_folded_into_its_convolution_gives_the_same_activations_without_a_batchnorm_call(resnet20, mode):
    prefix, _ = split_model(resnet20, "layer2")
    before = {k: v.clone() for k, v in resnet20.state_dict().items()}
    h, w = random.randrange(20, 50), random.randrange(20, 50)
    x = torch.randn(2, 3, h, w)
    with torch.no_grad():
        ref = prefix(x)
        tiled = SpatiallyTiled(prefix, 16, mode, fold_bn=True)
        with _CountBatchNorms() as count:
            y = tiled(x)
    assert count.calls == 0 and sum(isinstance(m, nn.BatchNorm2d) for m in tiled.prefix.modules()) == 0
    check("test_batchnorm_folded: relative error", _rel_error(y, ref), "<", 1e-5, detail=(mode, (h, w)))
    with _CountBatchNorms() as count, torch.no_grad():
        SpatiallyTiled(prefix, 16, mode)(x)
    assert count.calls > 0  # unfolded, the same prefix calls BatchNorm
    assert all(torch.equal(v, resnet20.state_dict()[k]) for k, v in before.items())  # the caller's model unchanged
    assert "fold_bn=True" in repr(tiled)


def test_folding_needs_eval_mode_and_a_bool():
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4))
    with pytest.raises(ValueError, match="eval mode"):
        SpatiallyTiled(net, 8, fold_bn=True)
    with pytest.raises(ValueError, match="fold_bn='yes'"):
        SpatiallyTiled(net.eval(), 8, fold_bn="yes")
