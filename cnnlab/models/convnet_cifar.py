"""cuda-convnet's CIFAR-10 network, the "CIFAR" model of Li et al. 2016 (arXiv 1610.03618).

Krizhevsky's cuda-convnet ``layers-80sec.cfg``, as ported to Caffe's ``cifar10_quick``: three 5x5 convolutions
with 32, 32 and 64 filters, each followed by a 3x3 stride-2 pool (max, then average, then average), then a
64-unit fully connected layer and the classifier. Pools use ceil mode, as Caffe and cuda-convnet do, so the
feature maps go 32 -> 16 -> 8 -> 4. As in ``cifar10_quick`` there is no non-linearity between the two fully
connected layers. 145,578 parameters with 10 classes.
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model


class ConvNetCifar(nn.Module):
    """cuda-convnet CIFAR-10 network for 32x32 images; returns logits of shape (batch, num_classes)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.input_shape = (3, 32, 32)
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=5, padding=2),
            nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),  # 32 -> 16; pool before ReLU as in the cfg
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.AvgPool2d(kernel_size=3, stride=2, ceil_mode=True),  # 16 -> 8
            nn.Conv2d(32, 64, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.AvgPool2d(kernel_size=3, stride=2, ceil_mode=True),  # 8 -> 4
        )
        self.classifier = nn.Sequential(
            nn.Linear(64 * 4 * 4, 64),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


@register_model(input_shape=(3, 32, 32), num_classes=10)
def convnet_cifar(num_classes: int = 10) -> ConvNetCifar:
    """The cuda-convnet / Caffe ``cifar10_quick`` CIFAR-10 network (32x32 input)."""
    return ConvNetCifar(num_classes)
