"""Post-training static int8 quantization with torchao's PT2E flow and the x86 Inductor quantizer.

torch.ao.quantization is deprecated in torch 2.13; its successor is torchao's PT2E flow:
``torch.export`` captures the model as an ATen graph, :func:`prepare_pt2e` inserts observers where
``X86InductorQuantizer`` annotates (per-channel symmetric int8 weights, per-tensor uint8 activations,
batch norm folded into the convolutions), calibration runs training images through it, and
:func:`convert_pt2e` turns observers into quantize/dequantize pairs around int8 weights.

That converted graph is the portable artifact (what :func:`export_bytes` measures), but run as is it only
simulates int8 in float32 and is slower than the float model. :func:`lower_for_cpu` (after torchao's
``lower_pt2e_quantized_to_x86``) applies Inductor's freezing passes, which fuse each q/dq pattern into a
oneDNN int8 kernel (``onednn.qconv_pointwise``, ``onednn.qlinear_pointwise``) without compiling C++;
``torch.compile`` of the converted graph reaches the same kernels through Inductor. Either way the
quantized model runs on the CPU only: PyTorch has no CUDA backend for these int8 operators (the paper
met the same limit: "Cannot run quantized models on GPU").
"""

from __future__ import annotations

import io
import logging
import warnings
from collections import Counter
from collections.abc import Iterable
from contextlib import contextmanager

import torch


@contextmanager
def _quiet(*loggers: str):
    """Raise these loggers to ERROR inside the block (restored afterwards)."""
    saved = [(logging.getLogger(name), logging.getLogger(name).level) for name in loggers]
    for logger, _ in saved:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in saved:
            logger.setLevel(level)


def int8_unavailable() -> str | None:
    """Why int8 quantization cannot run here (torchao missing, or too old to have the PT2E flow), or None."""
    try:
        _torchao()
    except ImportError as exc:
        from importlib import metadata

        try:
            version = metadata.version("torchao")
        except metadata.PackageNotFoundError:
            return "torchao is not installed: int8 needs pip install 'cnnlab[int8]' (torchao>=0.13)"
        return (f"torchao {version} has no PT2E flow (torchao.quantization.pt2e, from torchao 0.13; {exc}): "
                "upgrade it knowingly, e.g. cnnlab.install.dependencies(extras=('int8',), upgrade=('torchao',))")
    return None


def _torchao_version_has_pt2e() -> bool:
    """Whether the installed torchao is one with the PT2E flow (0.13 and newer); False without torchao."""
    from importlib import metadata

    try:
        major, minor = (int(p) for p in metadata.version("torchao").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) >= (0, 13)


def _torchao():
    # A CPU torch cannot load torchao's CUDA-only extensions, torchao registers an Enum with torch's
    # pytree and defines TorchScript methods, both deprecated in 2.13: only warnings at import, silenced.
    with _quiet("torchao", "torch.utils._pytree"), warnings.catch_warnings(), _inductor_hooks_kept():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
        from torchao.quantization.pt2e import quantize_pt2e
        from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86
    return quantize_pt2e, x86


@contextmanager
def _inductor_hooks_kept():
    """Undo the process-wide Inductor hook that importing torchao's x86 quantizer installs.

    The import sets ``torch._inductor.config.pre_grad_custom_pass`` to torchao's ``QuantLiftUp``, which then runs in
    every later ``torch.compile`` of the process, the user's fp32 models included. cnnlab lowers int8 graphs itself
    (:func:`lower_for_cpu`) and never needs it, and quantizing with cnnlab must not change how the rest of a
    notebook compiles. Private API (no public setter for Inductor's custom passes exists): if the attribute goes
    away, tests/test_quantize.py says so.
    """
    import torch._inductor.config as inductor_config

    before = inductor_config.pre_grad_custom_pass
    try:
        yield
    finally:
        inductor_config.pre_grad_custom_pass = before


def batch_dims(example_inputs: tuple) -> tuple:
    """``dynamic_shapes`` for ``torch.export`` making dim 0 (the batch) of every input dynamic."""
    batch = torch.export.Dim("batch", min=1, max=65536)
    return tuple({0: batch} for _ in example_inputs)


def export(model: torch.nn.Module, example_inputs: tuple, *, dynamic_batch: bool = True,
           strict: bool = False) -> torch.export.ExportedProgram:
    """``torch.export.export`` of ``model`` in eval mode (batch norm uses its running statistics); with
    ``dynamic_batch`` the program accepts any batch size, not just the example's. ``strict`` traces with
    TorchDynamo instead of the default non-strict tracer."""
    try:
        model.eval()
    except NotImplementedError:  # exported and PT2E graphs refuse train()/eval(); they are already traced for eval
        pass
    example_inputs = tuple(example_inputs)
    dynamic = batch_dims(example_inputs) if dynamic_batch else None
    return torch.export.export(model, example_inputs, dynamic_shapes=dynamic, strict=strict)


def quantizable_layers_visible(graph_module: torch.fx.GraphModule) -> bool:
    """Whether PT2E quantizers can find the graph's convolutions and linear layers.

    Quantizers match layers with ``get_source_partitions``, which reads the node metadata that export records.
    torch 2.11's version reads only ``source_fn_stack``, which non-strict export does not record (its
    ``torch_fn`` fallback compares names with classes and never matches; fixed by 2.13), so there the quantizer
    annotates nothing and the "int8" model stays fp32. False means: export again with ``strict=True``.
    """
    from torch.fx.passes.utils.source_matcher_utils import get_source_partitions

    wanted = (torch.ops.aten.conv2d.default, torch.ops.aten.linear.default)
    if not any(node.target in wanted for node in graph_module.graph.nodes):
        return True
    layers = [torch.nn.Conv2d, torch.nn.functional.conv2d, torch.nn.Linear, torch.nn.functional.linear]
    return bool(get_source_partitions(graph_module.graph, layers))


def quantize_int8(model: torch.nn.Module, calibration: Iterable, example_inputs: tuple,
                  *, max_batches: int | None = None) -> torch.fx.GraphModule:
    """The PT2E static int8 version of ``model``: a GraphModule with int8 weights and q/dq activations.

    calibration: batches of inputs (a tensor, or a tuple/list whose first item is the input, as a
    DataLoader yields) used to set the activation ranges; ``max_batches`` stops early. The float weights
    that convert_pt2e leaves behind unused are dropped, so the module holds only what the graph reads.
    """
    quantize_pt2e, x86 = _torchao()
    quantizer = x86.X86InductorQuantizer().set_global(x86.get_default_x86_inductor_quantization_config())
    graph = export(model, example_inputs).module()
    if not quantizable_layers_visible(graph):
        graph = export(model, example_inputs, strict=True).module()
    prepared = quantize_pt2e.prepare_pt2e(graph, quantizer)
    seen = 0
    with torch.no_grad():
        for batch in calibration:
            if max_batches is not None and seen >= max_batches:
                break
            prepared(batch[0] if isinstance(batch, (tuple, list)) else batch)
            seen += 1
    if seen == 0:
        raise ValueError("calibration gave no batches: int8 activation ranges need at least one")
    return drop_unused_attributes(quantize_pt2e.convert_pt2e(prepared))


def drop_unused_attributes(graph_module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Delete parameters and buffers no ``get_attr`` node reads (in place); returns the module."""
    used = {node.target for node in graph_module.graph.nodes if node.op == "get_attr"}
    names = [name for name, _ in graph_module.named_parameters()] + [name for name, _ in graph_module.named_buffers()]
    for name in names:
        if name not in used:
            owner, _, attr = name.rpartition(".")
            delattr(graph_module.get_submodule(owner) if owner else graph_module, attr)
    graph_module.delete_all_unused_submodules()
    graph_module.recompile()
    return graph_module


def _inductor_internals():
    """``(is_cia_op, constant_fold, freezing_passes)``: the three private torch functions :func:`lower_for_cpu`
    needs (the same ones torchao's ``lower_pt2e_quantized_to_x86`` calls).

    Private API: the public replacements are torchao's ``lower_pt2e_quantized_to_x86`` (which pins the example's
    batch size) and ``torch.compile`` of the converted graph (which compiles C++). If torch moves them, the error
    names what moved, and tests/test_quantize.py fails first.
    """
    try:
        from torch._export.utils import _is_cia_op
        from torch._inductor.constant_folding import constant_fold
        from torch._inductor.fx_passes.freezing_patterns import freezing_passes
    except ImportError as exc:
        raise RuntimeError(f"torch {torch.__version__} moved a private function cnnlab.quantize.lower_for_cpu needs "
                           f"({exc}); use torchao's lower_pt2e_quantized_to_x86 or torch.compile instead") from exc
    return _is_cia_op, constant_fold, freezing_passes


def lower_for_cpu(quantized: torch.fx.GraphModule, example_inputs: tuple) -> torch.fx.GraphModule:
    """``quantized`` with its q/dq patterns fused into oneDNN int8 kernels (CPU only), any batch size.

    The steps of torchao's ``lower_pt2e_quantized_to_x86`` (re-export, keep only composite-op
    decompositions, ``aten.t`` -> ``permute``, Inductor's freezing passes and constant folding), except that
    the re-export keeps the batch dimension dynamic: torchao's version pins the example's batch size.
    """
    _is_cia_op, constant_fold, freezing_passes = _inductor_internals()
    example_inputs = tuple(example_inputs)
    # Post-autograd the graph must keep its prim ops; only composite-implicit ops are decomposed.
    table = {op: fn for op, fn in torch.export.default_decompositions().items() if _is_cia_op(op)}
    with torch.no_grad(), warnings.catch_warnings():
        # torch's own pytree code still uses a LeafSpec check that 2.13 deprecates; nothing for us to change
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        program = torch.export.export(quantized, example_inputs, strict=True, dynamic_shapes=batch_dims(example_inputs))
        lowered = program.run_decompositions(table).module()
        graph = lowered.graph
        for node in list(graph.nodes):
            if node.target == torch.ops.aten.t.default:  # the freezing patterns match permute, not t
                with graph.inserting_before(node):
                    permuted = graph.call_function(torch.ops.aten.permute.default, args=(node.args[0], [1, 0]))
                node.replace_all_uses_with(permuted)
                graph.erase_node(node)
        graph.lint()
        lowered.recompile()
        inputs = {node.name: node.meta.get("val") for node in graph.nodes if node.op == "placeholder"}
        freezing_passes(lowered, example_inputs)
        constant_fold(lowered)
        # torch 2.8's freezing passes propagate the example's shapes into the inputs' metadata, from which the
        # module's input check reads them: the batch would be pinned to the example's. Keep the symbolic ones.
        for node in lowered.graph.nodes:
            if node.op == "placeholder" and inputs.get(node.name) is not None:
                node.meta["val"] = inputs[node.name]
    return lowered


class GraphRunner(torch.nn.Module):
    """An ``nn.Module`` face for an exported or quantized graph, so code written for modules (``evaluate``,
    ``benchmark``: ``.to()``, ``.eval()``) runs it. Such graphs refuse ``train()``/``eval()`` (they were traced in
    eval mode) and live on the CPU, so the graph is held outside the module tree and those calls do nothing."""

    def __init__(self, graph, name: str = "graph"):
        super().__init__()
        object.__setattr__(self, "fn", graph)  # not a child module: .eval()/.to() must not reach it
        self.name = name

    def forward(self, *inputs):
        return self.fn(*inputs)

    def extra_repr(self) -> str:
        return self.name


def export_bytes(model: torch.nn.Module, example_inputs: tuple) -> int:
    """Bytes of ``torch.export.save`` of ``model`` exported with ``example_inputs`` (graph + weights)."""
    buffer = io.BytesIO()
    program = model if isinstance(model, torch.export.ExportedProgram) else export(model, example_inputs)
    torch.export.save(program, buffer)
    return len(buffer.getvalue())


def state_dict_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``torch.save(model.state_dict())``: the usual "model size" (the paper's 36.97 MB)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return len(buffer.getvalue())


def bytes_by_dtype(model: torch.nn.Module) -> dict[str, int]:
    """Tensor bytes of ``model``'s state dict per dtype, e.g. ``{"torch.int8": 9222848, ...}``."""
    counts: Counter = Counter()
    for tensor in model.state_dict().values():
        counts[str(tensor.dtype)] += tensor.numel() * tensor.element_size()
    return dict(counts)


__all__ = ["GraphRunner", "batch_dims", "bytes_by_dtype", "drop_unused_attributes", "export", "export_bytes",
           "quantizable_layers_visible",
           "lower_for_cpu", "quantize_int8", "state_dict_bytes"]
