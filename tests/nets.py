"""Networks shared by tests: a small one whose operator counts are known (profiling: timing, ops, traces), and a
ResNet-20 with non-trivial BatchNorm statistics (kernels and spatial tiling: folding and tiling must carry BN's
per-channel scale and shift)."""

import torch
from torch import nn


class SmallConvNet(nn.Module):
    """Three conv layers: profile_ops must count exactly 3 aten::conv2d per forward."""

    n_conv = 3

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(self.features(x))


def randomise_bn(model: nn.Module, gen: torch.Generator) -> nn.Module:
    """``model`` in eval mode with random BatchNorm statistics and affine parameters (drawn from ``gen``)."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(0.3 * torch.randn(m.num_features, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(m.num_features, generator=gen))
            m.weight.data.copy_(1 + 0.2 * torch.randn(m.num_features, generator=gen))
            m.bias.data.copy_(0.2 * torch.randn(m.num_features, generator=gen))
    return model.eval()


def resnet20(seed: int) -> nn.Module:
    """The registry's ResNet-20 with random weights and BatchNorm statistics, both from ``seed``."""
    from cnnlab import models

    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=gen)))
    return randomise_bn(models.get("resnet20"), gen)
