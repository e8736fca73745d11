"""ImageNet-style bottleneck ResNets (He et al. 2016, Table 1), used here for ResNet-152 on CIFAR-100 (paper 002).

Module names and shapes follow torchvision.models.resnet (stride on the 3x3 conv of each bottleneck, "ResNet
v1.5"), so torchvision state dicts load unchanged; ResNet-152 has 60,192,808 parameters with 1000 classes, as in
torchvision. The stem is a parameter:

- ``stem="imagenet"`` (the default): torchvision's 7x7 stride-2 conv and 3x3 stride-2 max pool. Paper 002 builds
  its ResNet-152 with torchvision (sec. 3.1 imports it) and feeds it the 32x32 CIFAR-100 images as they are, so
  this is the model it trained: a 32x32 image is 8x8 after the stem and 1x1 in layer4 (adaptive pooling makes
  any input size work).
- ``stem="cifar"``: one 3x3 stride-1 conv and no pool, the usual adaptation for 32x32 inputs
  (kuangliu/pytorch-cifar). Every block then sees 16x the pixels: 16x the FLOPs and activations per image
  (``tests/test_models.py`` measures both with :func:`cnnlab.profiling.cost_model`), which would not fit the
  paper's batches of 512-2048 per 40 GB GPU.
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model

BLOCKS_PER_STAGE = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}  # He et al. Table 1
STAGE_WIDTHS = (64, 128, 256, 512)
STEMS = ("imagenet", "cifar")


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

    def __init__(self, depth: int = 152, num_classes: int = 1000, stem: str = "imagenet",
                 image_size: int = 224) -> None:
        super().__init__()
        if depth not in BLOCKS_PER_STAGE:
            raise ValueError(f"depth must be one of {list(BLOCKS_PER_STAGE)}, got {depth!r}")
        if stem not in STEMS:
            raise ValueError(f"stem={stem!r} is not valid; valid: {', '.join(STEMS)}")
        if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
            raise ValueError(f"image_size must be a positive int (pixels), got {image_size!r}")
        self.depth = depth
        self.num_classes = num_classes
        self.stem = stem
        self.input_shape = (3, image_size, image_size)  # what example inputs use; any size runs
        if stem == "cifar":
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


@register_model(input_shape=(3, 32, 32), num_classes=100)
def resnet152(num_classes: int = 100, *, stem: str = "imagenet", image_size: int = 32) -> ResNetImageNet:
    """ResNet-152 for CIFAR-100 (100 classes, 32x32 inputs) with torchvision's ImageNet stem, as paper 002 ran it;
    ``stem="cifar"`` for the 3x3 stem, ``num_classes=1000, image_size=224`` for ImageNet."""
    return ResNetImageNet(152, num_classes, stem, image_size)
