"""cnnlab.quantize: PT2E int8 VGG-11 is at most 30% of the fp32 size and agrees with it on held-out images."""

import cnnlab  # noqa: F401  (first: makes torchvision importable)
import pytest
import torch
import torch.nn.functional as F

from cnnlab import data, models, quantize
from margins import check


# torchao's PT2E flow is an extra (Colab's torchao 0.10 lacks it): without it these tests say why and skip.
needs_int8 = pytest.mark.skipif(quantize.int8_unavailable() is not None, reason=str(quantize.int8_unavailable()))


@pytest.fixture(scope="module")
def trained():
    """VGG-11 after 12 SGD steps on real digits (seconds; enough for logits with real margins), quantized."""
    if quantize.int8_unavailable() is not None:
        pytest.skip(quantize.int8_unavailable())
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
    # int8 weights are a quarter of fp32's; 30% leaves room for scales, zero points and the graph (measured: 26%,
    # the same on every CPU path: sizes do not depend on rounding).
    check("int8 export size / fp32", int8_bytes / fp32_bytes, "<=", 0.30)
    check("int8 state dict / fp32", quantize.state_dict_bytes(quantized) / quantize.state_dict_bytes(model), "<=", 0.30)
    # the int8 weights are really there: one byte per conv/linear weight
    weights = sum(p.numel() for name, p in model.named_parameters() if name.endswith("weight") and p.dim() > 1)
    assert quantize.bytes_by_dtype(quantized)["torch.int8"] == weights


def _agreement(a, b) -> float:
    return (a.argmax(1) == b.argmax(1)).float().mean().item()


def test_int8_logits_agree_with_fp32_on_held_out_batch(trained, test_batch):
    """int8 predicts what fp32 does on 128 held-out images, judged over the set (never one sample's argmax): a
    handful of images whose two top logits are closer than the int8 rounding may flip on some CPU, not 6%."""
    model, quantized, lowered, _ = trained
    inputs, labels = test_batch
    with torch.inference_mode():
        reference = model(inputs)
        for name, int8 in (("q/dq reference", quantized), ("oneDNN lowering", lowered)):
            check(f"int8 ({name}) top-1 agreement with fp32", _agreement(int8(inputs), reference), ">", 0.94)
    check("fixture fp32 accuracy on held-out digits", (reference.argmax(1) == labels).float().mean(), ">", 0.3)


def test_lowered_graph_runs_onednn_int8_kernels_at_any_batch_size(trained, test_batch):
    """The fused oneDNN graph gives the same logits at batch 1, 5 and 128 (its batch dimension is dynamic), and
    computes what the q/dq graph does within int8 rounding, judged over 128 held-out images."""
    _, quantized, lowered, _ = trained
    targets = {str(node.target) for node in lowered.graph.nodes if node.op == "call_function"}
    assert "onednn.qconv_pointwise.default" in targets and "onednn.qlinear_pointwise.default" in targets
    inputs, _ = test_batch
    with torch.inference_mode():
        reference = quantized(inputs)
        spread = (reference.max() - reference.min()).item()
        whole = lowered(inputs)
        for batch in (1, 5):
            fused = torch.cat([lowered(chunk) for chunk in inputs.split(batch)])
            # Same kernels on fewer rows: at most an output quantization step apart (measured: identical).
            check(f"int8 fused batch {batch} vs batch 128, max |logit diff| / spread",
                  (fused - whole).abs().max() / spread, "<", 0.02)
        # The fused kernels requantize where q/dq does not, and without VNNI (AVX2) oneDNN's u8 x s8 products
        # saturate in 16-bit pairs, so logits move by a few output steps. Measured (max / mean of |diff| / spread,
        # agreement): AVX-512 0.001 / 0.0001, 100%; AVX2 0.077 / 0.016, 97.7%. Limits sit 2x above AVX2's.
        diff = (whole - reference).abs() / spread
        check("int8 fused vs q/dq max |logit diff| / spread", diff.max(), "<", 0.15)
        check("int8 fused vs q/dq mean |logit diff| / spread", diff.mean(), "<", 0.04)
        check("int8 fused vs q/dq top-1 agreement", _agreement(whole, reference), ">", 0.94)


def test_graph_runner_ignores_eval_and_to(trained):
    _, _, lowered, example = trained
    runner = quantize.GraphRunner(lowered, "int8")
    assert runner.eval().to("cpu") is runner
    with torch.inference_mode():
        assert runner(*example).shape == (len(example[0]), 10)


@needs_int8
def test_calibration_without_batches_raises():
    model = models.get("lenet5").eval()
    with pytest.raises(ValueError, match="calibration"):
        quantize.quantize_int8(model, [], (torch.randn(2, 3, 32, 32),))


def test_quantizable_layers_visible_reads_the_export_metadata():
    """True for a strict export (Dynamo records source_fn_stack on every torch); False once the metadata PT2E
    quantizers match on is gone, which is what torch 2.11's non-strict export looked like to them."""
    model, example = models.get("lenet5").eval(), (torch.randn(2, 3, 32, 32),)
    graph = quantize.export(model, example, strict=True).module()
    assert quantize.quantizable_layers_visible(graph)
    for node in graph.graph.nodes:
        node.meta.pop("source_fn_stack", None)
        node.meta.pop("torch_fn", None)
        node.meta.pop("nn_module_stack", None)  # newer torch also matches on the module stack
    assert not quantize.quantizable_layers_visible(graph)
    no_layers = quantize.export(torch.nn.ReLU(), example).module()
    assert quantize.quantizable_layers_visible(no_layers)  # nothing to find is not a failure to find it


@needs_int8
def test_using_torchao_leaves_torch_compile_alone():
    """Importing torchao's x86 quantizer installs an Inductor pre-grad pass for every later torch.compile of the
    process; cnnlab puts the previous value back, so quantizing does not change how the user's models compile."""
    import torch._inductor.config as inductor_config

    before = inductor_config.pre_grad_custom_pass  # a private API: if it goes away, cnnlab.quantize must change
    quantize._torchao()
    assert inductor_config.pre_grad_custom_pass is before


def test_private_inductor_functions_are_where_lower_for_cpu_expects_them():
    is_cia_op, constant_fold, freezing_passes = quantize._inductor_internals()
    assert all(callable(f) for f in (is_cia_op, constant_fold, freezing_passes))
    assert is_cia_op(torch.ops.aten.linear.default) and not is_cia_op(torch.ops.aten.mm.default)


def test_int8_unavailable_names_the_missing_or_too_old_torchao(monkeypatch):
    """Colab ships torchao 0.10, which has no torchao.quantization.pt2e: int8 is skipped with a reason that names
    the version and how to upgrade; without torchao the reason says which extra installs it; else None."""
    from importlib import metadata

    from cnnlab import quantize

    if quantize._torchao_version_has_pt2e():
        assert quantize.int8_unavailable() is None  # the locked torchao, and the oldest supported, have it

    def no_pt2e():
        raise ImportError("No module named 'torchao.quantization.pt2e'")

    monkeypatch.setattr(quantize, "_torchao", no_pt2e)
    monkeypatch.setattr(metadata, "version", lambda name: "0.10.0")
    reason = quantize.int8_unavailable()
    assert "torchao 0.10.0" in reason and "upgrade=('torchao',)" in reason

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", absent)
    assert "cnnlab[int8]" in quantize.int8_unavailable()
