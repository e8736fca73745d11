"""Tests for cnnlab.models: registry contract, published parameter counts, shapes, errors."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
import sys

import pytest
import torch
from torch import nn

import cnnlab  # noqa: F401  (first: makes torchvision importable on this CPU torch)
import cnnlab.models as models
from cnnlab.models import registry
from cnnlab.models.resnet_cifar import PadShortcut

ALL_NAMES = [
    "lenet5",
    "alexnet",
    "alexnet_imagenet",
    "zfnet",
    "convnet_cifar",
    "resnet20",
    "resnet32",
    "resnet44",
    "resnet56",
    "resnet110",
    "resnet152",
    "vgg11",
    "vgg13",
    "vgg16",
    "vgg19",
    "lstm_sentiment",
]


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def conv(c_in: int, c_out: int, k: int, bias: bool = True) -> int:
    return c_in * c_out * k * k + (c_out if bias else 0)


def fc(n_in: int, n_out: int) -> int:
    return n_in * n_out + n_out


# Counts published by the reference implementations (akamaster/pytorch_resnet_cifar10 for the CIFAR ResNets,
# whose rounded values are He et al. 2016 Table 6; torchvision for AlexNet and ResNet-152; kuangliu for VGG-11).
PUBLISHED = [
    ("resnet20", {}, 269_722),
    ("resnet32", {}, 464_154),
    ("resnet44", {}, 658_586),
    ("resnet56", {}, 853_018),
    ("resnet110", {}, 1_727_962),
    ("vgg11", {}, 9_231_114),
    ("alexnet_imagenet", {}, 61_100_840),
    ("alexnet", {"variant": "imagenet"}, 61_100_840),
    ("resnet152", {"num_classes": 1000, "stem": "imagenet"}, 60_192_808),
]

# Counts derived here from the layer tables the modules cite, so a change of architecture shows up.
DERIVED = [
    # LeNet-5 on 3-channel 32x32: C1, C3, C5, F6, output.
    ("lenet5", {}, conv(3, 6, 5) + conv(6, 16, 5) + fc(400, 120) + fc(120, 84) + fc(84, 10)),
    ("lenet5", {"in_channels": 1}, conv(1, 6, 5) + conv(6, 16, 5) + fc(400, 120) + fc(120, 84) + fc(84, 10)),
    # bearpaw's CIFAR AlexNet: five convs on a 1x1x256 output, one linear head (2.47M in its README).
    (
        "alexnet",
        {},
        conv(3, 64, 11) + conv(64, 192, 5) + conv(192, 384, 3) + conv(384, 256, 3) + conv(256, 256, 3) + fc(256, 10),
    ),
    # Zeiler & Fergus 2013 Fig. 3.
    (
        "zfnet",
        {},
        conv(3, 96, 7)
        + conv(96, 256, 5)
        + conv(256, 384, 3)
        + conv(384, 384, 3)
        + conv(384, 256, 3)
        + fc(256 * 6 * 6, 4096)
        + fc(4096, 4096)
        + fc(4096, 1000),
    ),
    # cuda-convnet layers-80sec / Caffe cifar10_quick.
    ("convnet_cifar", {}, conv(3, 32, 5) + conv(32, 32, 5) + conv(32, 64, 5) + fc(64 * 4 * 4, 64) + fc(64, 10)),
    # ResNet-152 with 100 classes (the default: the ImageNet stem) = torchvision's count - fc(1000) + fc(100); with
    # the 3x3 CIFAR stem also - 7x7 stem + 3x3 stem.
    ("resnet152", {}, 60_192_808 - fc(2048, 1000) + fc(2048, 100)),
    ("resnet152", {"stem": "cifar"},
     60_192_808 - conv(3, 64, 7, False) + conv(3, 64, 3, False) - fc(2048, 1000) + fc(2048, 100)),
    # Embedding + two LSTM layers (4 gates, two bias vectors each) + head, with the documented defaults.
    (
        "lstm_sentiment",
        {},
        20000 * 128 + 4 * 256 * (128 + 256 + 2) + 4 * 256 * (256 + 256 + 2) + fc(256, 2),
    ),
]


@pytest.mark.parametrize(
    "name,opts,expected",
    PUBLISHED + DERIVED,
    ids=[name + "".join(f"-{k}={v}" for k, v in opts.items()) for name, opts, _ in PUBLISHED + DERIVED],
)
def test_parameter_count(name, opts, expected):
    with torch.device("meta"):  # counts need shapes only: skip allocating and initialising weights
        model = models.get(name, **opts)
    assert count_params(model) == expected


def test_names_lists_every_model_once():
    assert models.names() == ALL_NAMES


def test_every_model_is_registered_in_its_family_module():
    for name in ALL_NAMES:
        builder = registry._lookup(name).build
        assert builder.__name__ == name
        assert builder.__module__ == f"cnnlab.models.{models.spec(name).family}"


def test_registering_a_taken_name_fails_naming_both_builders(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # whatever this test registers goes again

    def vgg11(num_classes: int = 10) -> nn.Module:
        return nn.Linear(1, num_classes)

    taken = r"model name 'vgg11' is already registered by cnnlab\.models\.vgg\.vgg11; cannot register "
    with pytest.raises(ValueError, match=taken + r"\S+\.<locals>\.vgg11 under the same name"):
        models.register_model(input_shape=(3, 32, 32), num_classes=10)(vgg11)
    assert registry._lookup("vgg11").build is models.vgg.vgg11
    # the same builder registered again (what reloading its module does) replaces its own entry in place
    models.register_model(input_shape=(3, 32, 32), num_classes=10)(models.vgg.vgg11)
    assert models.names() == ALL_NAMES
    with pytest.raises(ValueError, match=r"input_kind must be one of \['image', 'tokens'\], got 'audio'"):
        models.register_model(input_shape=(16000,), num_classes=10, input_kind="audio")


# A family module outside cnnlab: one decorated builder is all a new model needs.
NEW_FAMILY = """
from torch import nn

from cnnlab.models.registry import register_model


@register_model(input_shape=(3, 8, 8), num_classes=4)
def tiny_net(num_classes: int = 4, *, width: int = 2) -> nn.Module:
    model = nn.Sequential(nn.Conv2d(3, width, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes))
    model.input_shape, model.num_classes = (3, 8, 8), num_classes
    return model
"""


def test_a_model_registered_in_a_new_module_is_listed_built_and_specified(tmp_path, monkeypatch):
    (tmp_path / "tiny_family.py").write_text(NEW_FAMILY)
    with monkeypatch.context() as patch:
        patch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # restored on leaving: tiny_net goes again
        patch.syspath_prepend(str(tmp_path))
        try:
            importlib.import_module("tiny_family")
            assert models.names() == [*ALL_NAMES, "tiny_net"]
            assert models.spec("tiny_net") == models.ModelSpec("tiny_net", "tiny_family", (3, 8, 8), 4, "image")
            assert models.spec("tiny_net", num_classes=3).num_classes == 3
            assert models.options("tiny_net") == {"width": 2}
            model = models.get("tiny_net", num_classes=3, width=5)
            assert model(models.example_input(model, batch_size=2)).shape == (2, 3)
        finally:
            sys.modules.pop("tiny_family", None)
    assert models.names() == ALL_NAMES
    with pytest.raises(ValueError, match="unknown model name 'tiny_net'"):
        models.get("tiny_net")


@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_model_builds_and_matches_its_spec(name):
    model_spec = models.spec(name)
    model = models.get(name).eval()
    assert model_spec.name == name
    assert model.input_shape == model_spec.input_shape
    assert model.num_classes == model_spec.num_classes
    x = models.example_input(model, batch_size=2)
    if model_spec.input_kind == "tokens":
        assert x.dtype == torch.int64 and x.shape == (2, *model_spec.input_shape)
        # Any length works; 32 steps keep the sequential LSTM loop fast on a busy 2-core CI machine.
        x = x[:, :32]
    else:
        assert model_spec.input_kind == "image" and x.dtype == torch.float32
    with torch.no_grad():
        y = model(x)
    assert y.shape == (2, model_spec.num_classes)
    assert torch.isfinite(y).all()


def test_default_num_classes():
    expected = {"alexnet_imagenet": 1000, "zfnet": 1000, "resnet152": 100, "lstm_sentiment": 2}
    for name in ALL_NAMES:
        assert models.spec(name).num_classes == expected.get(name, 10), name


# Extra input sizes the studies use: the tiling study runs ResNet-20 at 224x224 (Mini-ImageNet).
@pytest.mark.parametrize(
    "name,size",
    [("resnet20", 224), ("resnet56", 64), ("vgg11", 64), ("alexnet", 64)],
)
def test_adaptive_pooling_models_accept_larger_inputs(name, size):
    model = models.get(name, num_classes=7).eval()
    with torch.no_grad():
        y = model(torch.randn(2, 3, size, size))
    assert y.shape == (2, 7)


def test_num_classes_override():
    for name, opts in [("lenet5", {}), ("convnet_cifar", {}), ("resnet20", {}), ("lstm_sentiment", {"seq_len": 32})]:
        model = models.get(name, num_classes=3, **opts).eval()
        with torch.no_grad():
            assert model(models.example_input(model, 2)).shape == (2, 3), name
        assert model.num_classes == 3


def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError) as info:
        models.get("resnet21")
    message = str(info.value)
    assert "resnet21" in message
    for name in ALL_NAMES:
        assert name in message
    with pytest.raises(ValueError, match="resnet21"):
        models.spec("resnet21")


def test_unknown_option_is_named_with_valid_ones():
    with pytest.raises(ValueError, match="width") as info:
        models.get("lstm_sentiment", width=3)
    assert "hidden_size" in str(info.value) and "seq_len" in str(info.value)
    with pytest.raises(ValueError, match="depth"):
        models.get("resnet20", depth=32)  # depth is fixed by the name
    with pytest.raises(ValueError, match="variant"):
        models.get("alexnet_imagenet", variant="cifar")  # the name already fixes the variant


@pytest.mark.parametrize(
    "name,opts,parameter",
    [
        ("alexnet", {"variant": "tiny"}, "variant"),
        ("resnet20", {"num_classes": 0}, "num_classes"),
        ("lenet5", {"in_channels": 0}, "in_channels"),
        ("resnet152", {"stem": "tiny"}, "stem"),
        ("resnet152", {"image_size": 0}, "image_size"),
        ("lstm_sentiment", {"hidden_size": -1}, "hidden_size"),
        ("lstm_sentiment", {"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_option_values_name_the_parameter(name, opts, parameter):
    with pytest.raises(ValueError, match=parameter):
        models.get(name, **opts)


def test_alexnet_variant_error_lists_choices():
    with pytest.raises(ValueError, match="imagenet") as info:
        models.get("alexnet", variant="tiny")
    assert "cifar" in str(info.value)


def test_spec_is_frozen_and_follows_options():
    s = models.spec("resnet20")
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.num_classes = 100  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(models.ModelSpec)] == [
        "name",
        "family",
        "input_shape",
        "num_classes",
        "input_kind",
    ]
    assert models.spec("lstm_sentiment", seq_len=64).input_shape == (64,)
    assert models.get("lstm_sentiment", seq_len=64).input_shape == (64,)
    imagenet = models.spec("alexnet", variant="imagenet")
    assert (imagenet.input_shape, imagenet.num_classes) == ((3, 224, 224), 1000)
    assert models.spec("resnet152").input_shape == (3, 32, 32)
    assert models.spec("resnet152", image_size=224).input_shape == (3, 224, 224)
    assert models.spec("vgg16", num_classes=100).num_classes == 100
    assert models.spec("alexnet").family == models.spec("alexnet_imagenet").family == "alexnet"


def test_options_lists_defaults():
    assert models.options("resnet20") == {}
    assert models.options("alexnet") == {"variant": "cifar"}
    assert models.options("lstm_sentiment")["vocab_size"] == 20000


def test_resnet152_matches_torchvision_layout():
    import torchvision

    with torch.device("meta"):
        ours = models.get("resnet152", num_classes=1000, stem="imagenet")
        reference = torchvision.models.resnet152()
    ours_shapes = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    reference_shapes = {k: tuple(v.shape) for k, v in reference.state_dict().items()}
    assert ours_shapes == reference_shapes  # so torchvision checkpoints load unchanged


def test_resnet152_stems():
    with torch.device("meta"):
        default = models.get("resnet152")
        cifar = models.get("resnet152", stem="cifar")
    assert default.stem == "imagenet"  # torchvision's layout: what paper 002 trained on CIFAR-100
    assert default.conv1.kernel_size == (7, 7) and isinstance(default.maxpool, nn.MaxPool2d)
    assert cifar.conv1.kernel_size == (3, 3) and cifar.conv1.stride == (1, 1) and isinstance(cifar.maxpool, nn.Identity)


def test_resnet152_flops_per_32x32_image_with_each_stem():
    import torchvision

    from cnnlab.profiling import cost_model

    with torch.device("meta"):
        imagenet, cifar = models.get("resnet152", stem="imagenet"), models.get("resnet152", stem="cifar")
        reference = torchvision.models.resnet152(num_classes=100)
        reference_224 = torchvision.models.resnet152()
    cost = {name: cost_model(m, (3, 32, 32)) for name, m in [("imagenet", imagenet), ("cifar", cifar),
                                                              ("torchvision", reference)]}
    assert cost["imagenet"]["flops"] == cost["torchvision"]["flops"]  # the same network, FLOP for FLOP
    # torchvision's table gives ResNet-152 11.51 GFLOPS (multiply-adds) at 224x224; cost_model counts 2 per MAC.
    assert cost_model(reference_224, (3, 224, 224))["flops"] / 2e9 == pytest.approx(11.51, abs=0.01)
    # 224 -> 32 pixels divides every feature map's side by 7: 49x fewer FLOPs in every layer but the classifier.
    fc_flops = 2 * 2048 * 100
    assert (cost_model(reference, (3, 224, 224))["flops"] - fc_flops) == 49 * (cost["imagenet"]["flops"] - fc_flops)
    # The 3x3 stem keeps 32x32 into layer1, where the ImageNet stem leaves 8x8: 16x the pixels in every block.
    assert 15.5 < cost["cifar"]["flops"] / cost["imagenet"]["flops"] < 16.0
    assert 15.0 < cost["cifar"]["activation_bytes"] / cost["imagenet"]["activation_bytes"] < 16.5


def test_alexnet_imagenet_matches_torchvision_layout():
    import torchvision

    with torch.device("meta"):
        ours = models.get("alexnet_imagenet")
        reference = torchvision.models.alexnet()
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == {
        k: tuple(v.shape) for k, v in reference.state_dict().items()
    }


def feature_map_sizes(features: nn.Sequential, x: torch.Tensor) -> list[int]:
    sizes = []
    with torch.no_grad():
        for layer in features:
            x = layer(x)
            if isinstance(layer, (nn.MaxPool2d, nn.AvgPool2d)) or (
                isinstance(layer, nn.Conv2d) and layer.stride != (1, 1)
            ):
                sizes.append(x.shape[-1])
    return sizes


def test_zfnet_feature_maps_follow_paper_figure_3():
    model = models.get("zfnet").eval()
    # conv1 110, pool1 55, conv2 26, pool2 13, pool3 6 (Zeiler & Fergus 2013, Fig. 3)
    assert feature_map_sizes(model.features, torch.randn(1, 3, 224, 224)) == [110, 55, 26, 13, 6]
    assert model.features[0].kernel_size == (7, 7) and model.features[0].stride == (2, 2)


def test_convnet_cifar_pools_halve_like_caffe():
    model = models.get("convnet_cifar").eval()
    assert feature_map_sizes(model.features, torch.randn(1, 3, 32, 32)) == [16, 8, 4]
    kernels = [m.kernel_size for m in model.features if isinstance(m, nn.Conv2d)]
    widths = [m.out_channels for m in model.features if isinstance(m, nn.Conv2d)]
    assert kernels == [(5, 5)] * 3 and widths == [32, 32, 64]


def test_resnet_option_a_shortcuts_are_parameter_free():
    model = models.get("resnet20")
    shortcuts = [m for m in model.modules() if isinstance(m, PadShortcut)]
    assert len(shortcuts) == 2  # entering stage 2 and stage 3
    assert all(count_params(m) == 0 for m in shortcuts)
    x = torch.randn(2, 16, 32, 32)
    y = shortcuts[0](x)
    assert y.shape == (2, 32, 16, 16)
    assert torch.equal(y[:, 8:24], x[:, :, ::2, ::2])  # original channels in the middle, zeros around
    assert y[:, :8].abs().sum() == 0 and y[:, 24:].abs().sum() == 0
    blocks = [(name, sum(1 for _ in getattr(model, name))) for name in ("layer1", "layer2", "layer3")]
    assert blocks == [("layer1", 3), ("layer2", 3), ("layer3", 3)]


def test_resnet_can_be_copied_and_pickled():
    model = models.get("resnet20").eval()
    x = torch.randn(1, 3, 32, 32)
    clone = pickle.loads(pickle.dumps(copy.deepcopy(model)))
    with torch.no_grad():
        assert torch.equal(model(x), clone(x))


def test_lstm_layers_are_plain_named_modules():
    model = models.get("lstm_sentiment")
    assert type(model.embedding) is nn.Embedding and model.embedding.padding_idx == 0
    assert type(model.lstm) is nn.LSTM and model.lstm.batch_first and model.lstm.num_layers == 2
    assert (model.lstm.input_size, model.lstm.hidden_size) == (128, 256)
    assert type(model.head) is nn.Linear and model.head.in_features == 256
    assert model.embedding.weight[0].abs().sum() == 0


def test_lstm_reads_the_last_real_token():
    torch.manual_seed(0)
    model = models.get("lstm_sentiment", vocab_size=50, embed_dim=8, hidden_size=16, seq_len=12).eval()
    tokens = torch.randint(1, 50, (3, 12))
    lengths = torch.tensor([12, 7, 3])
    padded = tokens.clone()
    for row, length in enumerate(lengths):
        padded[row, length:] = 0
    left_padded = torch.zeros_like(tokens)
    for row, length in enumerate(lengths):
        left_padded[row, 12 - length :] = tokens[row, :length]
    with torch.no_grad():
        one_by_one = torch.cat([model(tokens[row : row + 1, :length]) for row, length in enumerate(lengths)])
        packed = model(padded, lengths)
        right = model(padded)  # no lengths: read at the last non-padding token
        left = model(left_padded)
        reads_padding = model.head(model.lstm(model.embedding(padded))[1][0][-1])  # final state, padding included
    torch.testing.assert_close(packed, one_by_one)
    torch.testing.assert_close(right, one_by_one)
    assert not torch.allclose(reads_padding[1:], one_by_one[1:])  # so the read position matters
    torch.testing.assert_close(left[0], one_by_one[0])  # a full-length row has no padding either way
    assert torch.isfinite(left).all()


def test_example_input_from_name():
    tokens = models.example_input("lstm_sentiment", 4)
    assert tokens.shape == (4, 256) and tokens.dtype == torch.int64
    assert tokens.min() >= 1 and tokens.max() < 20000
    image = models.example_input("zfnet", 1, dtype=torch.float64)
    assert image.shape == (1, 3, 224, 224) and image.dtype == torch.float64
