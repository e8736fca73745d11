"""cnnlab: an open research workbook on deep-learning performance.

Importing cnnlab first makes ``import torchvision`` work beside a CPU-only torch (see ``cnnlab._compat``).
"""

from cnnlab._compat import patch_torchvision

__version__ = "0.1.0"

patch_torchvision()

__all__ = ["__version__"]
