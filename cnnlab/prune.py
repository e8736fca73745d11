"""Pruning: ``torch.nn.utils.prune`` masks (unstructured L1, structured Ln over rows; per tensor or global), and
unit-level structured pruning that builds a physically smaller LSTM.

The paper (003, "LSTM → 3") prunes with ``torch.nn.utils.prune``, comparing L2-structured and unstructured
pruning at ratios 0.1-0.9 per layer. Those prunings only multiply weights by a 0/1 mask: the tensors keep their
shapes, so the model is as big and as slow as before (slower in training: the mask is applied every
forward). To make it faster the zeros must go. For an LSTM the unit that can go is a hidden unit: its four
gate rows (input, forget, cell, output: rows ``g * hidden + u`` of ``weight_ih``, ``weight_hh`` and both
biases) and every weight that reads its output (column ``u`` of the same layer's ``weight_hh``, of the next
layer's ``weight_ih``, and of the head). :func:`shrink_lstm` removes them; :func:`mask_units` masks the same
weights in the full-size model, which computes the same function.
"""

from __future__ import annotations

import copy
import math

import pandas as pd
import torch
from torch import nn
from torch.nn.utils import prune

METHODS = ("l1_unstructured", "ln_structured")
SCOPES = ("layer", "global")
GATES = 4  # PyTorch stacks an LSTM layer's gate rows as [input, forget, cell, output], `hidden` rows each


def check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"unknown pruning method {method!r}; valid methods: {', '.join(METHODS)}")
    return method


def check_amount(amount: float) -> float:
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < 1:
        raise ValueError(f"amount (pruning ratio) must be a number in [0, 1), got {amount!r}")
    return float(amount)


def targets(model: nn.Module) -> dict[str, tuple[nn.Module, str]]:
    """Prunable weight tensors by name (``"lstm.weight_ih_l0"``): every parameter named ``weight*`` with two or
    more dimensions (embedding, LSTM input and recurrent matrices, linear and conv weights); biases are left."""
    found = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            base = name.removesuffix("_orig")
            if base.startswith("weight") and param.dim() >= 2:
                found[f"{module_name}.{base}" if module_name else base] = (module, base)
    return found


def prune_model(model: nn.Module, method: str, amount: float, *, scope: str = "layer",
                tensors: list[str] | None = None, n: float = 2) -> nn.Module:
    """Mask ``amount`` of ``model``'s weights in place with ``torch.nn.utils.prune``; returns ``model``.

    method "l1_unstructured" zeroes the smallest-magnitude elements; "ln_structured" zeroes whole rows
    (output units / channels, dim 0) of smallest L``n`` norm. scope "layer" prunes each tensor by ``amount``
    (torch rounds ``amount * size`` to the nearest element or row); "global" ranks all chosen tensors together,
    so ``amount`` of their weights go jointly and layers lose different fractions. For global structured pruning,
    which torch lacks, rows are ranked by their root-mean-square (L``n`` norm / length^(1/n)) so that rows of
    different lengths compare, and the weakest are zeroed until they hold ``amount`` of the weights (to the
    nearest row). ``tensors`` picks names from :func:`targets` (default: all).
    """
    check_method(method)
    amount = check_amount(amount)
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; valid scopes: {', '.join(SCOPES)}")
    available = targets(model)
    chosen = list(available) if tensors is None else list(tensors)
    unknown = [name for name in chosen if name not in available]
    if unknown:
        raise ValueError(f"unknown tensor(s) {unknown}; valid tensors: {', '.join(available)}")
    pairs = [available[name] for name in chosen]
    if scope == "layer":
        for module, name in pairs:
            if method == "l1_unstructured":
                prune.l1_unstructured(module, name, amount)
            else:
                prune.ln_structured(module, name, amount, n=n, dim=0)
    elif method == "l1_unstructured":
        prune.global_unstructured(pairs, pruning_method=prune.L1Unstructured, amount=amount)
    else:
        _global_ln_structured(pairs, amount, n)
    return model


def _global_ln_structured(pairs, amount: float, n: float) -> None:
    scores, widths = [], []
    for module, name in pairs:
        rows = getattr(module, name).detach().flatten(1)
        scores.append(rows.norm(p=n, dim=1) / rows.shape[1] ** (1 / n))
        widths.append(torch.full((rows.shape[0],), rows.shape[1], device=rows.device))
    flat, width = torch.cat(scores), torch.cat(widths)
    # the weakest rows, until they hold the nearest count to `amount` of all the weights
    order = torch.argsort(flat)
    taken = torch.cumsum(width[order], 0)
    target = amount * int(width.sum())
    # a Python number, not a host tensor (searchsorted wants both on one device); taken holds integers, so the rows
    # within floor(target) are those within target, compared exactly in int64
    count = int(torch.searchsorted(taken, math.floor(target), right=True))
    if count < len(order) and abs(int(taken[count]) - target) < abs((int(taken[count - 1]) if count else 0) - target):
        count += 1
    drop = torch.zeros_like(flat, dtype=torch.bool)
    drop[order[:count]] = True
    start = 0
    for (module, name), score in zip(pairs, scores):
        keep_rows = ~drop[start:start + score.numel()]
        start += score.numel()
        shape = getattr(module, name).shape
        mask = keep_rows.view(-1, *([1] * (len(shape) - 1))).expand(shape).to(getattr(module, name).dtype)
        prune.custom_from_mask(module, name, mask)


def make_permanent(model: nn.Module) -> nn.Module:
    """Fold every pruning mask into its weight (``prune.remove``), in place; returns ``model``."""
    for module in model.modules():
        for name in [k.removesuffix("_orig") for k, _ in module.named_parameters(recurse=False) if k.endswith("_orig")]:
            prune.remove(module, name)
    return model


def effective_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter as the forward pass sees it (masked where pruned), by name."""
    tensors = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            base = name.removesuffix("_orig")
            tensors[f"{module_name}.{base}" if module_name else base] = getattr(module, base) if base != name else param
    return tensors


def sparsity(model: nn.Module) -> pd.DataFrame:
    """One row per parameter: tensor, numel, zeros, zero_fraction (of the masked tensor the forward uses)."""
    rows = []
    for name, tensor in effective_tensors(model).items():
        zeros = int((tensor == 0).sum())
        rows.append({"tensor": name, "numel": tensor.numel(), "zeros": zeros, "zero_fraction": zeros / tensor.numel()})
    return pd.DataFrame(rows)


def count_parameters(model: nn.Module) -> dict[str, int]:
    """``{"params": all parameters, "nonzero_params": those not zero (masked ones count as zero)}``."""
    tensors = effective_tensors(model).values()
    return {"params": sum(t.numel() for t in tensors), "nonzero_params": sum(int((t != 0).sum()) for t in tensors)}


# --- unit-level structured pruning of an LSTM ------------------------------------------------------------

def _check_lstm(lstm: nn.LSTM) -> None:
    if not isinstance(lstm, nn.LSTM) or lstm.bidirectional or lstm.proj_size or not lstm.bias:
        raise ValueError("unit pruning supports a unidirectional nn.LSTM with biases and no projection")


def _gate_rows(units: torch.Tensor, hidden: int) -> torch.Tensor:
    return torch.cat([g * hidden + units for g in range(GATES)])


def unit_scores(lstm: nn.LSTM, layer: int, n: float = 2) -> torch.Tensor:
    """Importance of each hidden unit of ``layer``: the L``n`` norm of its four gate rows in ``weight_ih`` and
    ``weight_hh`` together (the paper's Ln-structured row criterion, grouped by unit). Shape (hidden_size,)."""
    _check_lstm(lstm)
    hidden = lstm.hidden_size
    rows = torch.cat([getattr(lstm, f"weight_ih_l{layer}"), getattr(lstm, f"weight_hh_l{layer}")], dim=1).detach()
    return rows.view(GATES, hidden, -1).permute(1, 0, 2).reshape(hidden, -1).norm(p=n, dim=1)


def select_units(lstm: nn.LSTM, amount: float, n: float = 2) -> list[torch.Tensor]:
    """Per layer, the sorted indices (on the LSTM's device) of the units to keep after dropping
    ``round(amount * hidden)`` of lowest :func:`unit_scores` (the same count in every layer: nn.LSTM has one hidden
    size)."""
    _check_lstm(lstm)
    amount = check_amount(amount)
    keep_count = lstm.hidden_size - round(amount * lstm.hidden_size)
    if keep_count < 1:
        raise ValueError(f"amount={amount} would remove every one of the {lstm.hidden_size} hidden units")
    return [torch.sort(torch.topk(unit_scores(lstm, layer, n), keep_count).indices).values
            for layer in range(lstm.num_layers)]


def _check_keep(model: nn.Module, keep: list[torch.Tensor]) -> None:
    _check_lstm(model.lstm)
    if len(keep) != model.lstm.num_layers or len({len(k) for k in keep}) != 1:
        raise ValueError(f"keep must list, for each of the {model.lstm.num_layers} layers, the same number of units")


def _alive(units: torch.Tensor, hidden: int, device: torch.device) -> torch.Tensor:
    """A boolean (hidden,) vector on ``device``, True at ``units``."""
    alive = torch.zeros(hidden, dtype=torch.bool, device=device)
    alive[units] = True
    return alive


def shrink_lstm(model: nn.Module, keep: list[torch.Tensor]) -> nn.Module:
    """A copy of ``model`` (attributes ``lstm`` and ``head``, e.g. LSTMSentiment) whose LSTM has only the units
    in ``keep`` (one index tensor per layer, see :func:`select_units`; on any device), physically: hidden_size =
    len(keep[0]). The new LSTM and head are on the old ones' device, in their dtype."""
    _check_keep(model, keep)
    old = model.lstm
    hidden, size = old.hidden_size, len(keep[0])
    weight = old.weight_ih_l0
    keep = [units.to(weight.device) for units in keep]
    small = copy.deepcopy(model)
    small.lstm = nn.LSTM(old.input_size, size, old.num_layers, batch_first=old.batch_first, dropout=old.dropout,
                         device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        for layer, units in enumerate(keep):
            rows = _gate_rows(units, hidden)
            w_ih = getattr(old, f"weight_ih_l{layer}")[rows]
            if layer > 0:  # the layer below lost units: drop the input columns that read them
                w_ih = w_ih[:, keep[layer - 1]]
            getattr(small.lstm, f"weight_ih_l{layer}").copy_(w_ih)
            getattr(small.lstm, f"weight_hh_l{layer}").copy_(getattr(old, f"weight_hh_l{layer}")[rows][:, units])
            getattr(small.lstm, f"bias_ih_l{layer}").copy_(getattr(old, f"bias_ih_l{layer}")[rows])
            getattr(small.lstm, f"bias_hh_l{layer}").copy_(getattr(old, f"bias_hh_l{layer}")[rows])
        head = model.head.weight
        small.head = nn.Linear(size, model.head.out_features, device=head.device, dtype=head.dtype)
        small.head.weight.copy_(head[:, keep[-1].to(head.device)])
        small.head.bias.copy_(model.head.bias)
    small.lstm.train(old.training)
    small.head.train(model.head.training)
    return small


def mask_units(model: nn.Module, keep: list[torch.Tensor], *, incoming: bool = True) -> nn.Module:
    """A copy of ``model`` with the units not in ``keep`` masked by ``prune.custom_from_mask``, full size.

    The masked weights are each unit's outgoing ones (its column in its layer's ``weight_hh``, in the next
    layer's ``weight_ih`` and in the head), and with ``incoming`` also its four gate rows and biases (the
    unit's state then stays exactly zero). Either way it computes what :func:`shrink_lstm` computes. Each mask is
    on its weight's device, in its dtype (``keep`` may be on any device).
    """
    _check_keep(model, keep)
    masked = copy.deepcopy(model)
    lstm, hidden = masked.lstm, masked.lstm.hidden_size
    for layer, units in enumerate(keep):
        w_hh, w_ih = getattr(lstm, f"weight_hh_l{layer}"), getattr(lstm, f"weight_ih_l{layer}")
        alive = _alive(units, hidden, w_hh.device)
        rows = alive.repeat(GATES) if incoming else torch.ones(GATES * hidden, dtype=torch.bool, device=w_hh.device)
        prune.custom_from_mask(lstm, f"weight_hh_l{layer}", (rows[:, None] & alive[None, :]).to(w_hh.dtype))
        cols = _alive(keep[layer - 1], hidden, w_ih.device) if layer > 0 else \
            torch.ones(w_ih.shape[1], dtype=torch.bool, device=w_ih.device)
        prune.custom_from_mask(lstm, f"weight_ih_l{layer}", (rows[:, None] & cols[None, :]).to(w_ih.dtype))
        if incoming:
            for bias in (f"bias_ih_l{layer}", f"bias_hh_l{layer}"):
                prune.custom_from_mask(lstm, bias, rows.to(getattr(lstm, bias).dtype))
    head = masked.head.weight
    last = _alive(keep[-1], hidden, head.device)
    prune.custom_from_mask(masked.head, "weight", last[None, :].expand_as(head).to(head.dtype))
    return masked


__all__ = ["METHODS", "SCOPES", "check_amount", "check_method", "count_parameters", "effective_tensors",
           "make_permanent", "mask_units", "prune_model", "select_units", "shrink_lstm", "sparsity", "targets",
           "unit_scores"]
