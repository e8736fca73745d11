"""LeNet-5 (LeCun, Bottou, Bengio & Haffner 1998, "Gradient-based learning applied to document recognition").

Layout as in kuangliu/pytorch-cifar: conv 6@5x5 -> pool -> conv 16@5x5 -> pool -> fc 120 -> fc 84 -> fc classes,
with ReLU and max pooling in place of the paper's scaled tanh and trainable sub-sampling, and a fully connected C3
(the paper's sparse C3 table saved compute on 1998 hardware and no modern implementation keeps it).
"""

from __future__ import annotations

import torch
from torch import nn

from cnnlab.models.registry import register_model


class LeNet5(nn.Module):
    """LeNet-5 for 32x32 images (the paper's input size); returns logits of shape (batch, num_classes)."""

    def __init__(self, num_classes: int = 10, in_channels: int = 3) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.input_shape = (in_channels, 32, 32)
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 6, kernel_size=5),  # C1: 32 -> 28
            nn.ReLU(),
            nn.MaxPool2d(2),  # S2: 28 -> 14
            nn.Conv2d(6, 16, kernel_size=5),  # C3: 14 -> 10
            nn.ReLU(),
            nn.MaxPool2d(2),  # S4: 10 -> 5
        )
        self.classifier = nn.Sequential(
            nn.Linear(16 * 5 * 5, 120),  # C5
            nn.ReLU(),
            nn.Linear(120, 84),  # F6
            nn.ReLU(),
            nn.Linear(84, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


@register_model(input_shape=(3, 32, 32), num_classes=10)
def lenet5(num_classes: int = 10, *, in_channels: int = 3) -> LeNet5:
    """LeNet-5; ``in_channels=1`` gives the paper's grey-scale input."""
    if not isinstance(in_channels, int) or in_channels < 1:
        raise ValueError(f"in_channels must be a positive int, got {in_channels!r}")
    return LeNet5(num_classes, in_channels)
