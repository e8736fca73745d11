"""cnnlab.kernels: convolution kernels of cnnlab's own, for the tiling study and the Li et al. 2016 comparison.

    tiled_conv2d(x, weight, bias, stride, padding, tile=(16, 16))   # Triton kernel, one output tile per program
    tile_model(model, tile=32)                                       # copy with Conv2d -> TiledConv2d

    tile_spatially(model, tile=32, until="layer3")                   # prefix runs tile by tile, output stitched
    apply_strategy(model, "fft_tiled")                               # gemm, fft, fft_tiled, direct, best, opt

One module per job: ``triton_conv`` (the Triton kernel and its drop-in module), ``spatial`` (model-level spatial
tiling with a receptive-field halo), ``strategies`` (the convolution algorithms of the Li et al. 2016 comparison).
"""

from cnnlab.kernels.spatial import SpatiallyTiled, TiledModel, receptive_field, split_model, tile_spatially
from cnnlab.kernels.strategies import STRATEGIES, apply_strategy
from cnnlab.kernels.triton_conv import TILE_SIZES, TiledConv2d, interpreter_enabled, tile_model, tiled_conv2d

__all__ = [
    "STRATEGIES", "TILE_SIZES", "SpatiallyTiled", "TiledConv2d", "TiledModel", "apply_strategy",
    "interpreter_enabled", "receptive_field", "split_model", "tile_model", "tile_spatially", "tiled_conv2d",
]  # fmt: skip
