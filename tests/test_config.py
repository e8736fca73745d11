import pytest
import torch

from cnnlab import config

DEFAULTS = {"quick": {"batch_sizes": [1, 8]}, "standard": {"batch_sizes": [1, 8, 64]}, "paper": {"batch_sizes": [1]}}


@pytest.mark.gpu
def test_auto_resolves_by_device(monkeypatch):
    monkeypatch.setenv("CNNLAB_PRESET", "auto")
    assert config.resolve() == ("standard" if torch.cuda.is_available() else "quick")


def test_environment_variable_and_argument(monkeypatch):
    monkeypatch.setenv("CNNLAB_PRESET", "paper")
    assert config.resolve() == "paper"
    assert config.resolve("quick") == "quick"


def test_unknown_preset_names_valid_ones():
    with pytest.raises(ValueError, match="quick, standard, paper"):
        config.resolve("huge")


def test_configure_overrides_and_rejects_unknown_parameters():
    cfg = config.configure("quick", DEFAULTS, batch_sizes=[4])
    assert cfg.batch_sizes == [4] and cfg.preset == "quick"
    assert config.configure("standard", DEFAULTS, batch_sizes=None).batch_sizes == [1, 8, 64]
    with pytest.raises(ValueError, match="batch_size.*valid parameters: batch_sizes"):
        config.configure("quick", DEFAULTS, batch_size=4)


@pytest.mark.gpu
def test_resolve_device():
    assert config.resolve_device("cpu").type == "cpu"
    assert config.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert config.resolve_device(None) == config.resolve_device("auto")
    with pytest.raises(ValueError, match="device='tpu' is not a device; valid here: auto, cpu"):
        config.resolve_device("tpu")
    with pytest.raises(ValueError, match="only cpu and cuda"):
        config.resolve_device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            config.resolve_device("cuda")


def test_list_parameters_accept_text_lone_values_and_name_the_parameter():
    assert config.batch_sizes("[4, 1, 4]") == [1, 4]
    assert config.batch_sizes(8) == [8]
    with pytest.raises(ValueError, match="batch_sizes: 0 is not valid; valid: integers >= 1"):
        config.batch_sizes([1, 0])
    with pytest.raises(ValueError, match="num_workers: -1 is not valid; valid: integers >= 0"):
        config.positive_ints([0, -1], parameter="num_workers", minimum=0)
    with pytest.raises(ValueError, match="batch_sizes is empty"):
        config.batch_sizes([])
    assert config.models_list("resnet20") == ["resnet20"]
    with pytest.raises(ValueError, match="models: 'resnet21' is not a known model here; valid models: .*resnet20"):
        config.models_list(["resnet21"])
    assert config.threads(None) is None and config.threads(2) == 2
    with pytest.raises(ValueError, match="threads=0 must be an integer >= 1"):
        config.threads(0)


def test_backend_switches_restore_the_previous_state():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    with config.tf32(not before[0]):
        assert torch.backends.cuda.matmul.allow_tf32 == (not before[0]) == torch.backends.cudnn.allow_tf32
    with pytest.raises(RuntimeError):
        with config.cudnn_benchmark(not before[2]):
            assert torch.backends.cudnn.benchmark == (not before[2])
            raise RuntimeError("restored even on error")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.benchmark) == before


def test_relative_error_and_output_tolerance():
    import torch

    ref = torch.tensor([10.0, -20.0, 5.0])
    assert config.relative_error(ref, ref) == 0.0
    assert abs(config.relative_error(ref + torch.tensor([0.0, 0.2, 0.0]), ref) - 0.01) < 1e-6
    assert config.output_tolerance("cpu") == 1e-3


def test_tf32_works_whichever_api_the_caller_used():
    """torch 2.9+ has a second TF32 API (fp32_precision); once a caller sets it, reading the legacy allow_tf32 flags
    raises. cnnlab reads TF32 through the API this torch has, sets it so both agree, and restores the caller's."""
    import torch

    from cnnlab import config

    leaves = [config.tf32_leaf(kind) for kind in config.TF32_API]
    if any(leaf is None for leaf in leaves):  # torch 2.8: only the legacy flags
        before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        with config.tf32(True):
            assert config.tf32_enabled("matmul") and config.tf32_enabled("conv")
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
        return
    saved = config.tf32_state()
    try:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision = "tf32", "ieee"
        rnn = torch.backends.cudnn.rnn.fp32_precision
        assert config.tf32_enabled("matmul") and not config.tf32_enabled("conv")
        with config.tf32(False):
            assert not config.tf32_enabled("matmul") and not config.tf32_enabled("conv")
        with config.tf32(True):
            assert config.tf32_enabled("conv")
        assert config.tf32_enabled("matmul") and not config.tf32_enabled("conv")  # the caller's setting again
        assert torch.backends.cudnn.rnn.fp32_precision == rnn  # the caller's RNN setting untouched, not the conv's
        with config.tf32(False):  # set through the legacy setters: reading a legacy flag inside does not raise
            assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        config.restore_tf32(saved)
    # after the test, torch's own readers (torch.export reads cuDNN's legacy flag) still work
    assert isinstance(torch.backends.cudnn.allow_tf32, bool)


@pytest.mark.parametrize("bad", [True, False, 2.0, float("nan"), float("inf"), "4", None, 0, 1_000_001])
def test_positive_int_rejects_bools_floats_and_out_of_range_naming_the_parameter_and_the_range(bad):
    with pytest.raises(ValueError, match=rf"repeats={bad!r} must be an integer >= 1 and <= 1000000".replace("(", r"\(")):
        config.positive_int(bad, parameter="repeats")
    assert config.positive_int(7, parameter="repeats") == 7 and config.positive_int(10**6, parameter="r") == 10**6


def test_number_accepts_finite_values_in_range_only():
    assert config.number(0.1, parameter="lr", low=0, high=10) == 0.1 and config.number(1, parameter="f", low=0,
                                                                                       high=1) == 1.0
    for bad in (float("inf"), float("nan"), True, 0, 0.0, -1e-3, 10.5, "0.1", None):
        with pytest.raises(ValueError, match=r"lr=.* is not valid; valid: a finite number in \(0, 10\]"):
            config.number(bad, parameter="lr", low=0, high=10)
    with pytest.raises(ValueError, match=r"valid: a finite number in \[0, 1\)"):
        config.number(1.0, parameter="ratio", low=0, high=1, low_open=False, high_open=True)
    assert config.number(0, parameter="ratio", low=0, high=1, low_open=False, high_open=True) == 0.0


def test_number_refuses_a_value_that_is_an_open_end_in_all_but_name():
    # issue 44: timeout_s=1e-300 and fractions of 1e-300 (none of the data) were accepted as "above 0"
    for bad, valid in ((1e-300, r"\(0, 1\]"), (1 - 1e-12, r"\[0, 1\)")):
        with pytest.raises(ValueError, match=rf"ratio={bad!r} is not valid; valid: a finite number in {valid}, at "
                                             r"least 1e-09 from its open end"):
            config.number(bad, parameter="ratio", low=0, high=1, low_open=bad < 0.5, high_open=bad > 0.5)
    assert config.number(1e-9, parameter="lr", low=0, high=1) == 1e-9  # a billionth of the range: still a value
    assert config.number(1e-300, parameter="min_time_s", low=0, high=1, low_open=False) == 1e-300  # 0 is valid


def test_one_of_refuses_lists_and_dicts_naming_the_parameter():
    # issue 44: a list or a dict looked up in a dict of names raised "TypeError: unhashable type", naming nothing
    for bad in ([], [[1]], {"a": 1}, ["a"]):
        with pytest.raises(ValueError, match=r"recipe=.* is not valid; valid: a, b"):
            config.one_of(bad, {"a": 1, "b": 2}, parameter="recipe")
    with pytest.raises(ValueError, match=r"networks=\{'a': 1\} is not valid; valid: a, b"):
        config.names_list({"a": 1}, "networks", valid={"a": 1, "b": 2})


def test_counts_batch_sizes_workers_and_threads_have_upper_bounds():
    assert config.batch_sizes([1, 65536]) == [1, 65536] and config.batch_size(2048) == 2048
    with pytest.raises(ValueError, match="batch_sizes: 65537 is not valid; valid: integers >= 1 and <= 65536"):
        config.batch_sizes([8, 65537])
    with pytest.raises(ValueError, match="batch_sizes: True is not valid"):
        config.batch_sizes([True])
    with pytest.raises(ValueError, match=r"batch_size=100000 must be an integer >= 1 and <= 65536"):
        config.batch_size(100_000)
    assert config.num_workers("[0, 4]") == [0, 4]
    with pytest.raises(ValueError, match="num_workers: 129 is not valid; valid: integers >= 0 and <= 128"):
        config.num_workers([0, 129])
    cores = config.cores()
    assert cores >= 1 and config.threads(cores) == cores
    with pytest.raises(ValueError, match=rf"threads={cores + 1} must be an integer >= 1 and <= {cores} "
                                         r"\(the CPU cores present\)"):
        config.threads(cores + 1)


def test_one_model_and_names_list_name_the_parameter_and_the_valid_values():
    assert config.one_model("resnet20") == "resnet20" and config.one_model(["resnet20"]) == "resnet20"
    with pytest.raises(ValueError, match=r"model_name=\['resnet20', 'resnet32'\]: give one model; valid: .*resnet20"):
        config.one_model(["resnet20", "resnet32"], "model_name")
    with pytest.raises(ValueError, match="model: 'resnet21' is not a known model here"):
        config.one_model("resnet21")
    assert config.names_list(["b", "a", "b"], "methods", valid=("a", "b")) == ["b", "a"]  # given order, once each
    assert config.names_list("[\"a\"]", "methods", valid=("a", "b")) == ["a"]
    with pytest.raises(ValueError, match=r"methods='c' is not valid; valid: a, b"):
        config.names_list(["a", "c"], "methods", valid=("a", "b"))
    with pytest.raises(ValueError, match=r"^methods is empty; valid: a, b \(and more\)$"):
        config.names_list([], "methods", valid=("a", "b"), hint="(and more)")
    with pytest.raises(ValueError, match=r"^variants=\['b'\] must include 'a' \(the baseline\); valid: a, b$"):
        config.names_list(["b"], "variants", valid=("a", "b"), required="a")


def test_number_list_and_image_size_check_every_value_and_name_the_parameter():
    fractions = dict(parameter="data_fractions", low=0, high=1, valid="fractions in (0, 1]")
    assert config.number_list([1.0, 0.1, 1.0], **fractions) == [1.0, 0.1]  # given order, once each
    assert config.number_list("[0.9, 0.1]", **fractions, sort=True) == [0.1, 0.9]
    with pytest.raises(ValueError, match=r"^data_fractions is empty; valid: fractions in \(0, 1\]$"):
        config.number_list([], **fractions)
    with pytest.raises(ValueError, match=r"data_fractions=0 is not valid; valid: a finite number in \(0, 1\]"):
        config.number_list([0.5, 0], **fractions)
    with pytest.raises(ValueError, match=r"ratios=1.0 is not valid; valid: a finite number in \(0, 1\)"):
        config.number_list([1.0], parameter="ratios", low=0, high=1, high_open=True, valid="ratios")
    assert config.image_size(224) == 224 and config.image_size(8, minimum=8) == 8
    with pytest.raises(ValueError, match=r"image_size=16 must be an integer >= 32 and <= 2048"):
        config.image_size(16)
    with pytest.raises(ValueError, match=r"vgg_image_size=4096 must be an integer >= 32 and <= 2048"):
        config.image_size(4096, "vgg_image_size")
