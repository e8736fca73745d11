"""AlexNet (Krizhevsky, Sutskever & Hinton 2012, "ImageNet Classification with Deep Convolutional Neural Networks").

Two variants, described as data:
- ``imagenet``: the 224x224 original in torchvision's single-tower layout (one GPU instead of the paper's two
  towers, no local response normalisation, adaptive 6x6 pool before the classifier): 61,100,840 parameters
  with 1000 classes.
- ``cifar``: the 32x32 variant of bearpaw/pytorch-classification (same five convolutions, 11x11 stride-4 first
  conv padded so 32x32 inputs survive, 2x2 pools, one linear head), 2,472,266 parameters with 10 classes. The
  adaptive 1x1 pool before the head is an identity at 32x32 and lets larger inputs through.
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model

# Convolutions as (out_channels, kernel, stride, padding); "M" is a max pool.
_FEATURES = {
    "imagenet": [(64, 11, 4, 2), "M", (192, 5, 1, 2), "M", (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), "M"],
    "cifar": [(64, 11, 4, 5), "M", (192, 5, 1, 2), "M", (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), "M"],
}
_POOL = {"imagenet": dict(kernel_size=3, stride=2), "cifar": dict(kernel_size=2, stride=2)}
_POOLED_SIZE = {"imagenet": 6, "cifar": 1}
_HIDDEN = {"imagenet": [4096, 4096], "cifar": []}  # fully connected widths before the head
_INPUT_SIZE = {"imagenet": 224, "cifar": 32}
VARIANTS = tuple(_FEATURES)


class AlexNet(nn.Module):
    """AlexNet; returns logits of shape (batch, num_classes)."""

    def __init__(self, num_classes: int = 10, variant: str = "cifar") -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.num_classes = num_classes
        self.input_shape = (3, _INPUT_SIZE[variant], _INPUT_SIZE[variant])
        layers: list[nn.Module] = []
        in_channels = 3
        for item in _FEATURES[variant]:
            if item == "M":
                layers.append(nn.MaxPool2d(**_POOL[variant]))
            else:
                out_channels, kernel, stride, padding = item
                layers += [nn.Conv2d(in_channels, out_channels, kernel, stride, padding), nn.ReLU(inplace=True)]
                in_channels = out_channels
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(_POOLED_SIZE[variant])
        head: list[nn.Module] = []
        width = in_channels * _POOLED_SIZE[variant] ** 2
        for hidden in _HIDDEN[variant]:
            head += [nn.Dropout(0.5), nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            width = hidden
        head.append(nn.Linear(width, num_classes))
        self.classifier = nn.Sequential(*head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_model(input_shape=(3, 32, 32), num_classes=10)
def alexnet(num_classes: int | None = None, *, variant: str = "cifar") -> AlexNet:
    """AlexNet; ``variant`` is "cifar" (32x32, 10 classes by default) or "imagenet" (224x224, 1000 classes)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    if num_classes is None:
        num_classes = 1000 if variant == "imagenet" else 10
    return AlexNet(num_classes, variant)


@register_model(input_shape=(3, 224, 224), num_classes=1000)
def alexnet_imagenet(num_classes: int = 1000) -> AlexNet:
    """The 224x224 original AlexNet (same as ``alexnet(variant="imagenet")``)."""
    return AlexNet(num_classes, "imagenet")
