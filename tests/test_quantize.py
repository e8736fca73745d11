"""cnnlab.quantize: PT2E int8 VGG-11 is at most 30% of the fp32 size and agrees with it on held-out images."""

import cnnlab  # noqa: F401  (first: makes torchvision importable)
import pytest
import torch
import torch.nn.functional as F

from cnnlab import data, models, quantize


@pytest.fixture(scope="module")
def trained():
    """VGG-11 after 12 SGD steps on real digits (seconds; enough for logits with real margins), quantized."""
    torch.manual_seed(0)
    model = models.get("vgg11")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train_set = data.load("digits", "train")
    batches = iter(data.make_loader(train_set, 32, shuffle=True, seed=0))
    for _ in range(12):
        inputs, labels = next(batches)
        loss = F.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # After so few steps batch norm's running statistics (momentum 0.1) still lag the weights: re-estimate them
    # as a plain average over 4 batches so that eval mode reflects what was learned.
    for bn in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        bn.reset_running_stats()
        bn.momentum = None
    with torch.no_grad():
        for _ in range(4):
            model(next(batches)[0])
    model.eval()
    calibration = [batch for _, batch in zip(range(2), data.make_loader(train_set, 32, shuffle=True, seed=1))]
    example = (calibration[0][0],)
    quantized = quantize.quantize_int8(model, calibration, example)
    return model, quantized, quantize.lower_for_cpu(quantized, example), example


@pytest.fixture(scope="module")
def test_batch():
    """128 test-split images: never seen in calibration (which uses the train split)."""
    inputs, labels = next(iter(data.make_loader(data.load("digits", "test"), 128)))
    return inputs, labels


def test_int8_serialized_size_at_most_30_percent(trained):
    model, quantized, _, example = trained
    fp32_bytes, int8_bytes = quantize.export_bytes(model, example), quantize.export_bytes(quantized, example)
    assert int8_bytes <= 0.30 * fp32_bytes, (fp32_bytes, int8_bytes)
    assert quantize.state_dict_bytes(quantized) <= 0.30 * quantize.state_dict_bytes(model)
    # the int8 weights are really there: one byte per conv/linear weight
    weights = sum(p.numel() for name, p in model.named_parameters() if name.endswith("weight") and p.dim() > 1)
    assert quantize.bytes_by_dtype(quantized)["torch.int8"] == weights


def test_int8_logits_agree_with_fp32_on_held_out_batch(trained, test_batch):
    model, quantized, lowered, _ = trained
    inputs, labels = test_batch
    with torch.inference_mode():
        reference = model(inputs)
        for int8 in (quantized, lowered):
            logits = int8(inputs)
            agreement = (logits.argmax(1) == reference.argmax(1)).float().mean().item()
            assert agreement > 0.95, agreement
    assert (reference.argmax(1) == labels).float().mean() > 0.3, "the fixture's model learned something"


def test_lowered_graph_runs_onednn_int8_kernels_at_any_batch_size(trained):
    _, quantized, lowered, _ = trained
    targets = {str(node.target) for node in lowered.graph.nodes if node.op == "call_function"}
    assert "onednn.qconv_pointwise.default" in targets and "onednn.qlinear_pointwise.default" in targets
    with torch.inference_mode():
        for batch in (1, 5):
            x = torch.randn(batch, 3, 32, 32)
            fused, reference = lowered(x), quantized(x)  # the q/dq reference rounds a few values differently
            torch.testing.assert_close(fused, reference, atol=0.05, rtol=0)
            assert torch.equal(fused.argmax(1), reference.argmax(1))


def test_graph_runner_ignores_eval_and_to(trained):
    _, _, lowered, example = trained
    runner = quantize.GraphRunner(lowered, "int8")
    assert runner.eval().to("cpu") is runner
    with torch.inference_mode():
        assert runner(*example).shape == (len(example[0]), 10)


def test_calibration_without_batches_raises():
    model = models.get("lenet5").eval()
    with pytest.raises(ValueError, match="calibration"):
        quantize.quantize_int8(model, [], (torch.randn(2, 3, 32, 32),))
