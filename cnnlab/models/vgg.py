"""VGG with batch normalisation for CIFAR (Simonyan & Zisserman 2015, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", Table 1 configurations A, B, D, E).

Configurations as data and a single 512 -> num_classes linear head, as in kuangliu/pytorch-cifar (the code the VGG
study's slides adapted): five 2x2 pools take a 32x32 image to 1x1x512, so the paper's 4096-wide fully connected
layers are dropped. Batch norm after every conv follows kuangliu (the paper predates batch norm). The global pool
is adaptive instead of kuangliu's ``AvgPool2d(1, 1)``: identical at 32x32, and larger inputs still give
(batch, num_classes). VGG-11 has 9,231,114 parameters with 10 classes.
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model

# Conv widths (3x3, padding 1) and "M" for a 2x2 max pool, per configuration of the paper's Table 1.
CONFIGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    """VGG-BN for 32x32 images; returns logits of shape (batch, num_classes)."""

    def __init__(self, config: str = "vgg11", num_classes: int = 10) -> None:
        super().__init__()
        if config not in CONFIGS:
            raise ValueError(f"config must be one of {list(CONFIGS)}, got {config!r}")
        self.config = config
        self.num_classes = num_classes
        self.input_shape = (3, 32, 32)
        layers: list[nn.Module] = []
        in_channels = 3
        for item in CONFIGS[config]:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2d(in_channels, item, 3, padding=1), nn.BatchNorm2d(item), nn.ReLU(inplace=True)]
                in_channels = item
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_model(input_shape=(3, 32, 32), num_classes=10)
def vgg11(num_classes: int = 10) -> VGG:
    """VGG-11 (configuration A) with batch norm."""
    return VGG("vgg11", num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def vgg13(num_classes: int = 10) -> VGG:
    """VGG-13 (configuration B) with batch norm."""
    return VGG("vgg13", num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def vgg16(num_classes: int = 10) -> VGG:
    """VGG-16 (configuration D) with batch norm."""
    return VGG("vgg16", num_classes)


@register_model(input_shape=(3, 32, 32), num_classes=10)
def vgg19(num_classes: int = 10) -> VGG:
    """VGG-19 (configuration E) with batch norm."""
    return VGG("vgg19", num_classes)
