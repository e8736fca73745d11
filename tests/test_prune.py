"""cnnlab.prune: zero fractions match the ratio; the physically smaller LSTM computes what the masked one does."""

import copy

import cnnlab  # noqa: F401
import pytest
import torch

from cnnlab import models, prune
import fakedevice
from margins import check

HIDDEN = 32


@pytest.fixture
def lstm_model():
    torch.manual_seed(0)
    return models.get("lstm_sentiment", vocab_size=300, seq_len=20, embed_dim=16, hidden_size=HIDDEN, num_layers=2)


@pytest.fixture
def tokens():
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(2, 300, (6, 20), generator=gen)
    ids[:3, 12:] = 0  # right padding on half the batch
    return ids


@pytest.mark.parametrize("method", prune.METHODS)
@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.5, 0.9])
def test_per_tensor_zero_fraction_equals_ratio(lstm_model, method, ratio):
    prune.prune_model(lstm_model, method, ratio)
    table = prune.sparsity(lstm_model).set_index("tensor")
    for name, (module, attr) in prune.targets(lstm_model).items():
        shape = getattr(module, attr).shape
        one = 1 / shape[0] if method == "ln_structured" else 1 / shape.numel()  # one row, or one element
        assert abs(table.loc[name, "zero_fraction"] - ratio) <= one + 1e-9, (name, table.loc[name, "zero_fraction"])
        if method == "ln_structured":  # whole rows are zero, the others untouched
            rows = getattr(module, attr).detach().flatten(1)
            zero_rows = (rows == 0).all(dim=1)
            assert ((rows == 0).any(dim=1) == zero_rows).all() or name == "embedding.weight"


@pytest.mark.parametrize("method", prune.METHODS)
def test_global_pruning_reaches_the_ratio_over_all_tensors(lstm_model, method):
    names = [n for n in prune.targets(lstm_model) if not n.startswith("head.")]
    prune.prune_model(lstm_model, method, 0.4, scope="global", tensors=names)
    table = prune.sparsity(lstm_model).set_index("tensor").loc[names]
    overall = table["zeros"].sum() / table["numel"].sum()
    widest_row = max(getattr(m, a).flatten(1).shape[1] for n, (m, a) in prune.targets(lstm_model).items() if n in names)
    tolerance = widest_row / table["numel"].sum() if method == "ln_structured" else 1 / table["numel"].sum()
    assert abs(overall - 0.4) <= tolerance + 1e-9
    assert table["zero_fraction"].std() > 0, "global ranking prunes tensors unevenly"


def test_make_permanent_keeps_the_function_and_drops_the_masks(lstm_model, tokens):
    prune.prune_model(lstm_model, "l1_unstructured", 0.5)
    lstm_model.eval()
    with torch.no_grad():
        before = lstm_model(tokens)
        nonzero = prune.count_parameters(lstm_model)["nonzero_params"]
        prune.make_permanent(lstm_model)
        assert not [n for n, _ in lstm_model.named_parameters() if n.endswith("_orig")]
        assert torch.equal(lstm_model(tokens), before)
    assert prune.count_parameters(lstm_model)["nonzero_params"] == nonzero


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
def test_shrunk_lstm_equals_the_masked_full_size_lstm(lstm_model, tokens, ratio):
    lstm_model.eval()
    keep = prune.select_units(lstm_model.lstm, ratio)
    small = prune.shrink_lstm(lstm_model, keep).eval()
    assert small.lstm.hidden_size == HIDDEN - round(ratio * HIDDEN)
    assert small.head.in_features == small.lstm.hidden_size
    with torch.no_grad():
        shrunk = small(tokens)
        for incoming in (False, True):  # masking the outgoing weights alone already removes the units
            masked = prune.mask_units(lstm_model, keep, incoming=incoming).eval()
            # the same sums without the zero terms: last-bit differences only
            check("unit-pruned LSTM vs masked LSTM, max |logit diff|", (shrunk - masked(tokens)).abs().max(), "<=", 1e-5)
        full = lstm_model(tokens)
    assert not torch.allclose(shrunk, full, atol=1e-5), "removing units changes the function"
    masked = prune.mask_units(lstm_model, keep)
    assert prune.count_parameters(small)["nonzero_params"] == prune.count_parameters(masked)["nonzero_params"]
    assert prune.count_parameters(small)["params"] < prune.count_parameters(lstm_model)["params"]


def test_select_units_keeps_the_strongest(lstm_model):
    keep = prune.select_units(lstm_model.lstm, 0.5)
    for layer, units in enumerate(keep):
        scores = prune.unit_scores(lstm_model.lstm, layer)
        dropped = torch.ones(HIDDEN, dtype=torch.bool)
        dropped[units] = False
        assert scores[dropped].max() <= scores[units].min()
        assert torch.equal(units, units.sort().values)


def test_shrunk_lstm_trains(lstm_model, tokens):
    small = prune.shrink_lstm(lstm_model, prune.select_units(lstm_model.lstm, 0.5)).train()
    before = copy.deepcopy(small.lstm.weight_hh_l0)
    loss = small(tokens).logsumexp(1).mean()
    loss.backward()
    torch.optim.SGD(small.parameters(), lr=0.1).step()
    assert not torch.equal(before, small.lstm.weight_hh_l0)


def test_bad_parameters_raise_with_the_valid_choices(lstm_model):
    with pytest.raises(ValueError, match="valid methods: l1_unstructured, ln_structured"):
        prune.prune_model(lstm_model, "random", 0.5)
    with pytest.raises(ValueError, match="valid scopes"):
        prune.prune_model(lstm_model, "l1_unstructured", 0.5, scope="everything")
    with pytest.raises(ValueError, match=r"amount .* \[0, 1\)"):
        prune.prune_model(lstm_model, "l1_unstructured", 1.0)
    with pytest.raises(ValueError, match="valid tensors"):
        prune.prune_model(lstm_model, "l1_unstructured", 0.5, tensors=["lstm.weight_xx"])
    with pytest.raises(ValueError, match="every one"):
        prune.select_units(lstm_model.lstm, 0.99)


# --- on a GPU: CUDA's placement rules, with cpu:0 playing the GPU (tests/fakedevice.py; issue 30) ----------------

@pytest.fixture
def rules():
    with fakedevice.cuda_rules() as mode:
        yield mode


def _misplaced(rules, model, dtype) -> list[str]:
    """Parameters and buffers (masks too) of ``model`` not on the fake GPU in ``dtype``, each with where it is."""
    return [f"{name} on {t.device} in {t.dtype}" for name, t in (*model.named_parameters(), *model.named_buffers())
            if not rules.on_device(t) or t.device != fakedevice.DEVICE or t.dtype != dtype]


@pytest.mark.parametrize("scope", prune.SCOPES)
@pytest.mark.parametrize("method", prune.METHODS)
def test_pruning_a_model_on_a_gpu_keeps_its_masks_there(rules, lstm_model, tokens, method, scope):
    """Every method and scope on a model on the device: masks beside their weights, the same masks as on the host
    (issue 30: global ln_structured indexed a host tensor with the device's row order)."""
    names = [n for n in prune.targets(lstm_model) if not n.startswith("head.")]
    host = prune.prune_model(copy.deepcopy(lstm_model), method, 0.4, scope=scope, tensors=names)
    model = prune.prune_model(lstm_model.to(fakedevice.DEVICE), method, 0.4, scope=scope, tensors=names)
    assert _misplaced(rules, model, torch.float32) == []
    assert sorted(n for n, _ in model.named_buffers()) == sorted(f"{n}_mask" for n in names)
    on_device, on_host = prune.effective_tensors(model), prune.effective_tensors(host)
    assert all(torch.equal(on_device[name].cpu(), on_host[name]) for name in on_host), "the same masks"
    with torch.no_grad():
        assert rules.on_device(model.eval()(tokens.to(fakedevice.DEVICE)))
    assert prune.count_parameters(model) == prune.count_parameters(host)
    assert _misplaced(rules, prune.make_permanent(model), torch.float32) == []


DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_mask_units_on_a_gpu_builds_its_masks_there(rules, lstm_model, tokens, dtype):
    """Issue 30: mask_units built its masks on the host, and custom_from_mask failed mixing them with the weights.
    Unit indices on either side are taken."""
    model = lstm_model.to(fakedevice.DEVICE, dtype).eval()
    keep = prune.select_units(model.lstm, 0.5)
    assert all(map(rules.on_device, keep)), "indices where the weights are"
    for units in (keep, [k.cpu() for k in keep]):
        for incoming in (False, True):
            masked = prune.mask_units(model, units, incoming=incoming)
            assert _misplaced(rules, masked, dtype) == []
            with torch.no_grad():
                assert rules.on_device(masked(tokens.to(fakedevice.DEVICE)))
    host = model.cpu()  # units selected on the device, the model back on the host
    assert not any(rules.on_device(t) for t in prune.mask_units(host, keep).buffers())


@pytest.mark.parametrize("dtype", DTYPES)
def test_shrink_lstm_on_a_gpu_is_entirely_on_the_weights_device_and_dtype(rules, lstm_model, tokens, dtype):
    """Issue 30: shrink_lstm returned an LSTM and a head on the host in float32 beside the device's embedding; the
    study's evaluate() moved it back, so nothing failed. Unit indices on either side are taken."""
    model = lstm_model.to(fakedevice.DEVICE, dtype).eval()
    keep = prune.select_units(model.lstm, 0.5)
    ids = tokens.to(fakedevice.DEVICE)
    for units in (keep, [k.cpu() for k in keep]):
        small = prune.shrink_lstm(model, units)
        misplaced = _misplaced(rules, small, dtype)
        assert not misplaced, "; ".join(misplaced)
        assert not small.training and small.lstm.hidden_size == HIDDEN // 2
        with torch.no_grad():
            check(f"unit-pruned vs masked LSTM on the device ({dtype}), max |logit diff|",
                  (small(ids) - prune.mask_units(model, units)(ids)).abs().max().cpu(), "<=", 1e-5)
    small = prune.shrink_lstm(model.cpu(), keep)  # units selected on the device, the model back on the host
    assert not any(rules.on_device(t) for t in small.parameters()) and {p.dtype for p in small.parameters()} == {dtype}
