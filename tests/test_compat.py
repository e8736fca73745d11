import subprocess
import sys


def test_torchvision_imports_after_cnnlab():
    code = ("import cnnlab, torchvision, torchvision.models, torchvision.transforms;"
            "from cnnlab._compat import torchvision_status as s; print(s)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() in {"extension", "schemas registered"}


def test_patch_is_idempotent_and_keeps_its_status():
    from cnnlab._compat import patch_torchvision

    first = patch_torchvision()
    assert patch_torchvision() == first
    assert first in {"extension", "schemas registered", "absent"}


def test_importing_cnnlab_changes_no_global_torch_state():
    """`import cnnlab` and every module of it leaves threads, TF32, cuDNN, determinism and dtype flags alone."""
    code = r'''
import json, pkgutil, importlib, torch
def state():
    return {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "matmul_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn_tf32": torch.backends.cudnn.allow_tf32,
            "cudnn_benchmark": torch.backends.cudnn.benchmark, "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_enabled": torch.backends.cudnn.enabled, "mkldnn_enabled": torch.backends.mkldnn.enabled,
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "default_dtype": str(torch.get_default_dtype()), "grad_enabled": torch.is_grad_enabled(),
            "fp16_reduction": torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction}
before = state()
import cnnlab
names = [m.name for m in pkgutil.walk_packages(cnnlab.__path__, "cnnlab.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"before": before, "after": state(), "modules": len(names)}))
'''
    import json

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["modules"] > 30
    assert result["after"] == result["before"]


def test_schemas_are_not_registered_where_the_extension_loads(monkeypatch):
    """Where torchvision's compiled extension loads (a matching CUDA torch, Colab), cnnlab defines nothing."""
    import torch

    from cnnlab import _compat

    monkeypatch.setattr(_compat, "_library", None)
    monkeypatch.setattr(torch.ops.torchvision, "nms", object(), raising=False)  # as the loaded extension provides
    defined = []
    monkeypatch.setattr(torch.library, "Library", lambda *a, **k: defined.append(a))
    assert _compat.patch_torchvision() == "extension"
    assert defined == [] and _compat._library is None


def test_importing_cnnlab_alone_imports_neither_torch_nor_torchvision():
    """`import cnnlab` is cheap (torch alone takes seconds to import): the torchvision patch waits for torchvision's
    import, and nothing else in the package's __init__ needs torch. Checked in a fresh process's sys.modules."""
    code = ("import sys, cnnlab; print(sorted(m for m in ('torch', 'torchvision') if m in sys.modules));"
            "print([type(f).__name__ for f in sys.meta_path][:1])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    imported, first_finder = out.stdout.strip().splitlines()[-2:]
    assert imported == "[]", f"import cnnlab imported {imported}"
    assert first_finder == "['_PatchTorchvisionFirst']"


def test_the_torchvision_finder_patches_once_then_steps_aside():
    """`from torchvision import ...` after `import cnnlab` goes through the finder, which patches and removes
    itself; importing (or reloading) cnnlab again adds no second finder once torchvision is in."""
    code = ("import sys, importlib, cnnlab\n"
            "from torchvision import models\n"
            "from cnnlab import _compat\n"
            "names = lambda: [type(f).__name__ for f in sys.meta_path].count('_PatchTorchvisionFirst')\n"
            "after_import = names()\n"
            "importlib.reload(cnnlab)\n"
            "print(_compat.torchvision_status, after_import, names(), sep='|')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    status, after_import, after_reload = out.stdout.strip().splitlines()[-1].split("|")
    assert status in {"extension", "schemas registered"}
    assert (after_import, after_reload) == ("0", "0")
