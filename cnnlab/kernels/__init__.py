"""cnnlab.kernels: convolution kernels of cnnlab's own, for the tiling study and the Li et al. 2016 comparison.

    tiled_conv2d(x, weight, bias, stride, padding, tile=(16, 16))   # Triton kernel, one output tile per program
    tile_model(model, tile=32)                                       # copy with Conv2d -> TiledConv2d
    apply_strategy(model, "fft_tiled")                               # gemm, fft, fft_tiled, direct, best, opt
    spatial_tiling.tile_spatially(model, 32, until="layer3")         # first layers run tile by tile (strips)

One module per job: ``triton_conv`` (the Triton kernel and its drop-in module), ``strategies`` (the convolution
algorithms of the Li et al. 2016 comparison), ``spatial_tiling`` (a model rewrite that runs a network's first
layers tile by tile with its own layers: the tiling study's other way to tile; it imports only torch).
"""

from cnnlab.kernels.strategies import STRATEGIES, apply_strategy
from cnnlab.kernels.triton_conv import TILE_SIZES, TiledConv2d, interpreter_enabled, tile_model, tiled_conv2d

__all__ = ["STRATEGIES", "TILE_SIZES", "TiledConv2d", "apply_strategy", "interpreter_enabled", "tile_model",
           "tiled_conv2d"]
