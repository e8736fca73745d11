"""ImageNet-style bottleneck ResNets (He et al. 2016, Table 1), used here for ResNet-152 on CIFAR-100.

Module names and shapes follow torchvision.models.resnet (stride on the 3x3 conv of each bottleneck, "ResNet
v1.5"), so torchvision state dicts load unchanged; ResNet-152 has 60,192,808 parameters with 1000 classes, as in
torchvision. ``cifar_stem=True`` (the default here) swaps the 7x7 stride-2 conv and 3x3 max pool for one 3x3
stride-1 conv, the usual adaptation for 32x32 inputs (e.g. kuangliu/pytorch-cifar): with the ImageNet stem a 32x32
image is down to 1x1 after layer3 and layer4 sees no spatial extent.
"""

from __future__ import annotations

import torch
from torch import nn

BLOCKS_PER_STAGE = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}  # He et al. Table 1
STAGE_WIDTHS = (64, 128, 256, 512)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride), 1x1 expand by 4; projection shortcut (option B) on shape change."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        out_planes = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out_planes, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_planes != out_planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False), nn.BatchNorm2d(out_planes)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNetImageNet(nn.Module):
    """Bottleneck ResNet; returns logits of shape (batch, num_classes)."""

    def __init__(self, depth: int = 152, num_classes: int = 1000, cifar_stem: bool = False) -> None:
        super().__init__()
        if depth not in BLOCKS_PER_STAGE:
            raise ValueError(f"depth must be one of {list(BLOCKS_PER_STAGE)}, got {depth!r}")
        self.depth = depth
        self.num_classes = num_classes
        self.cifar_stem = cifar_stem
        self.input_shape = (3, 32, 32) if cifar_stem else (3, 224, 224)
        if cifar_stem:
            self.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        in_planes = 64
        for index, (planes, blocks) in enumerate(zip(STAGE_WIDTHS, BLOCKS_PER_STAGE[depth])):
            stride = 1 if index == 0 else 2
            layer = []
            for block in range(blocks):
                layer.append(Bottleneck(in_planes, planes, stride if block == 0 else 1))
                in_planes = planes * Bottleneck.expansion
            setattr(self, f"layer{index + 1}", nn.Sequential(*layer))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)
        # Same initialisation as torchvision: Kaiming normal (fan_out) for convs, BN scale 1 and shift 0.
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet152(num_classes: int = 100, *, cifar_stem: bool = True) -> ResNetImageNet:
    """ResNet-152; default 100 classes and a 32x32 stem for CIFAR-100, ``cifar_stem=False`` for 224x224."""
    if not isinstance(cifar_stem, bool):
        raise ValueError(f"cifar_stem must be True or False, got {cifar_stem!r}")
    return ResNetImageNet(152, num_classes, cifar_stem)
