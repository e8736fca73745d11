"""A small network shared by the profiling tests (timing, ops, traces): its operator counts are known."""

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
