import pytest
import torch

from cnnlab import presets

DEFAULTS = {"quick": {"batch_sizes": [1, 8]}, "standard": {"batch_sizes": [1, 8, 64]}, "paper": {"batch_sizes": [1]}}


def test_auto_resolves_by_device(monkeypatch):
    monkeypatch.setenv("CNNLAB_PRESET", "auto")
    assert presets.resolve() == ("standard" if torch.cuda.is_available() else "quick")


def test_environment_variable_and_argument(monkeypatch):
    monkeypatch.setenv("CNNLAB_PRESET", "paper")
    assert presets.resolve() == "paper"
    assert presets.resolve("quick") == "quick"


def test_unknown_preset_names_valid_ones():
    with pytest.raises(ValueError, match="quick, standard, paper"):
        presets.resolve("huge")


def test_configure_overrides_and_rejects_unknown_parameters():
    cfg = presets.configure("quick", DEFAULTS, batch_sizes=[4])
    assert cfg.batch_sizes == [4] and cfg.preset == "quick"
    assert presets.configure("standard", DEFAULTS, batch_sizes=None).batch_sizes == [1, 8, 64]
    with pytest.raises(ValueError, match="batch_size.*valid parameters: batch_sizes"):
        presets.configure("quick", DEFAULTS, batch_size=4)


def test_choose_device():
    assert presets.choose_device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="valid devices"):
        presets.choose_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            presets.choose_device("cuda")
