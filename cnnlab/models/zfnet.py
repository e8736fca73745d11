"""ZFNet (Zeiler & Fergus 2013, "Visualizing and Understanding Convolutional Networks", Fig. 3).

AlexNet with a 7x7 stride-2 first convolution (instead of 11x11 stride 4) and a stride-2 second convolution, which
the paper's visualisations showed removes aliasing and dead filters in the first two layers. Feature maps follow
Fig. 3 for a 224x224 input: 110 -> 55 -> 26 -> 13 -> 13 -> 13 -> 6. The paper's contrast normalisation after
the first two layers is kept as local response normalisation with AlexNet's constants, since the network is used
to reproduce Li et al. 2016, whose ZFNet has those layers.
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model


class ZFNet(nn.Module):
    """ZFNet for 224x224 images; returns logits of shape (batch, num_classes)."""

    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.input_shape = (3, 224, 224)
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, kernel_size=7, stride=2, padding=1),  # 224 -> 110
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),  # 110 -> 55
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0),
            nn.Conv2d(96, 256, kernel_size=5, stride=2),  # 55 -> 26
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),  # 26 -> 13
            nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=2.0),
            nn.Conv2d(256, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 384, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),  # 13 -> 6
        )
        self.avgpool = nn.AdaptiveAvgPool2d(6)  # identity at 224x224; lets other sizes through
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Linear(256 * 6 * 6, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@register_model(input_shape=(3, 224, 224), num_classes=1000)
def zfnet(num_classes: int = 1000) -> ZFNet:
    """ZFNet as in Zeiler & Fergus 2013 (224x224 input)."""
    return ZFNet(num_classes)
