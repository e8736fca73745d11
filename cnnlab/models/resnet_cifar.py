"""CIFAR ResNets of He, Zhang, Ren & Sun 2016 ("Deep Residual Learning for Image Recognition", Sec. 4.2).

One BasicBlock and a depth number, as in akamaster/pytorch_resnet_cifar10: a 3x3 conv with 16 filters, then
three stages of n blocks with 16, 32 and 64 filters on 32x32, 16x16 and 8x8 maps, global average pooling and a
linear head; depth = 6n + 2. Shortcuts are the paper's option A (Sec. 3.3): identity, and where the shape
changes, stride-2 subsampling plus zero padding of the new channels, so shortcuts add no parameters and the
counts match the paper's Table 6 (0.27M for ResNet-20 ... 1.7M for ResNet-110). Global pooling is adaptive, so
inputs larger than 32x32 (the tiling study feeds 224x224) give the same (batch, num_classes) output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from cnnlab.models.registry import register_model

DEPTHS = (20, 32, 44, 56, 110)  # the depths of He et al. Table 6 that cnnlab registers
STAGE_WIDTHS = (16, 32, 64)


class PadShortcut(nn.Module):
    """Option-A shortcut: subsample by ``stride`` and zero-pad channels from ``in_planes`` to ``out_planes``.

    A module rather than akamaster's lambda so the model can be pickled, deep-copied and exported.
    """

    def __init__(self, in_planes: int, out_planes: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad_front = (out_planes - in_planes) // 2
        self.pad_back = out_planes - in_planes - self.pad_front

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad_front, self.pad_back))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a parameter-free shortcut; output is relu(F(x) + shortcut(x))."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        if stride != 1 or in_planes != planes:
            self.shortcut: nn.Module = PadShortcut(in_planes, planes, stride)
        else:
            self.shortcut = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNetCifar(nn.Module):
    """ResNet-(6n+2) for CIFAR; returns logits of shape (batch, num_classes)."""

    def __init__(self, depth: int = 20, num_classes: int = 10) -> None:
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth must be 6n + 2 with n >= 1 (e.g. {list(DEPTHS)}), got {depth!r}")
        blocks_per_stage = (depth - 2) // 6
        self.depth = depth
        self.num_classes = num_classes
        self.input_shape = (3, 32, 32)
        self.conv1 = nn.Conv2d(3, STAGE_WIDTHS[0], 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(STAGE_WIDTHS[0])
        in_planes = STAGE_WIDTHS[0]
        stages = []
        for index, planes in enumerate(STAGE_WIDTHS):
            blocks = []
            for block in range(blocks_per_stage):
                stride = 2 if index > 0 and block == 0 else 1
                blocks.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.linear = nn.Linear(STAGE_WIDTHS[-1], num_classes)
        # He et al. initialise weights as in their PReLU paper (He et al. 2015), i.e. Kaiming normal.
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.linear(torch.flatten(self.avgpool(out), 1))


@register_model(input_shape=(3, 32, 32), num_classes=10)
def resnet20(num_classes: int = 10) -> ResNetCifar:
    """ResNet-20 (n = 3), 269,722 parameters with 10 classes."""
    return ResNetCifar(20, num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def resnet32(num_classes: int = 10) -> ResNetCifar:
    """ResNet-32 (n = 5), 464,154 parameters with 10 classes."""
    return ResNetCifar(32, num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def resnet44(num_classes: int = 10) -> ResNetCifar:
    """ResNet-44 (n = 7), 658,586 parameters with 10 classes."""
    return ResNetCifar(44, num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def resnet56(num_classes: int = 10) -> ResNetCifar:
    """ResNet-56 (n = 9), 853,018 parameters with 10 classes."""
    return ResNetCifar(56, num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def resnet110(num_classes: int = 10) -> ResNetCifar:
    """ResNet-110 (n = 18), 1,727,962 parameters with 10 classes."""
    return ResNetCifar(110, num_classes)
