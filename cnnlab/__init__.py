"""cnnlab: an open research workbook on deep-learning performance.

Importing cnnlab first makes ``import torchvision`` work beside a CPU-only torch (see ``cnnlab._compat``).

``import cnnlab`` itself imports neither torch nor torchvision (torch alone takes seconds to import): it puts a
finder in front of ``sys.meta_path`` that, the first time torchvision is imported (by the caller, or by
``cnnlab.profiling.environment`` for its version), registers the missing operator schemas first, then steps aside.
"""

import sys

__version__ = "0.1.0"


class _PatchTorchvisionFirst:
    """A meta-path finder that finds nothing itself: when ``torchvision`` is about to be imported it runs
    :func:`cnnlab._compat.patch_torchvision` (which imports torch), then leaves the import to the ordinary finders.
    It removes itself once the patch is in place; if the patch raised, it stays for the next try."""

    _busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision" or self._busy:
            return None
        self._busy = True  # patch_torchvision's own importlib.util.find_spec("torchvision") comes back here
        try:
            from cnnlab._compat import patch_torchvision

            patch_torchvision()
        finally:
            self._busy = False
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        return None

    def invalidate_caches(self):
        pass


if "torchvision" not in sys.modules and not any(
        type(f).__name__ == "_PatchTorchvisionFirst" for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchTorchvisionFirst())

__all__ = ["__version__"]
