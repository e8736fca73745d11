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
