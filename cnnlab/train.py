"""The one trainer: :func:`train_step` (one optimisation step), :func:`fit` (epochs of steps over a loader, timed
per epoch with ``cnnlab.profiling.wall_time``, with an epoch callback), and :func:`train` (a registry model on a
data set with a :class:`Recipe`: SGD with momentum and weight decay, a cosine or step schedule, optional AMP,
and a checkpoint cache so that a notebook trains a model once and loads it afterwards). Every study that trains
uses these; DDP adds only what DDP needs (its sampler's epoch) through ``before_epoch``.

The default recipe follows He et al. 2016, sec. 4.2 (CIFAR ResNets): SGD, momentum 0.9, weight decay
1e-4, learning rate 0.1 divided by 10 at 50% and 75% of training (there: 32k and 48k of 64k iterations),
batch 128, random-crop and flip augmentation. Presets scale the epoch budget.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any, Callable

import pandas as pd
import torch
import torch.nn.functional as F

from cnnlab import data
from cnnlab import models
from cnnlab.data.storage import DamagedFileError, data_root, read_or_explain, save_or_warn
from cnnlab.profiling import wall_time
from cnnlab.profiling.progress import Progress

SCHEDULES = ("cosine", "step", "constant")


@dataclass(frozen=True)
class Recipe:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 1e-4
    schedule: str = "step"
    amp: bool = False
    augment: bool = True
    seed: int = 0
    warmup_epochs: int = 0  # linear warm-up from lr/10 over these epochs, then the schedule (He et al. 2016 sec. 4.3)

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; valid schedules: {', '.join(SCHEDULES)}")
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError(f"epochs and batch_size must be >= 1, got {self.epochs} and {self.batch_size}")
        if not 0 <= self.warmup_epochs < self.epochs:
            raise ValueError(f"warmup_epochs must be in [0, epochs), got {self.warmup_epochs} with {self.epochs} epochs")


# Epoch budgets per preset. quick trains on `digits` (real, offline); the others on CIFAR-10 with the
# He et al. recipe scaled from its 182 epochs (64k iterations at batch 128) to the budget.
# quick: without warm-up, lr 0.1 from the first of only 69 steps overshoots (epoch-1 loss 2.5-2.7 > ln 10), and
# where the run lands then depends on last-bit rounding: 88.6-99.4% test accuracy over seeds 0-3 and the AVX-512
# and AVX2 kernel paths. One warm-up epoch and a fourth epoch: 97.2-99.7% over the same 8 runs.
RECIPES = {
    "quick": Recipe(epochs=4, batch_size=64, lr=0.1, schedule="cosine", warmup_epochs=1),
    "standard": Recipe(epochs=30, schedule="step"),
    "paper": Recipe(epochs=182, schedule="step"),
}


def _scheduler(optimizer, recipe: Recipe, steps_per_epoch: int):
    warmup = recipe.warmup_epochs * steps_per_epoch
    total = recipe.epochs * steps_per_epoch - warmup
    if recipe.schedule == "cosine":
        main = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
    elif recipe.schedule == "step":
        main = torch.optim.lr_scheduler.MultiStepLR(optimizer, [total // 2, total * 3 // 4], gamma=0.1)
    else:
        main = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    if not warmup:
        return main
    ramp = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=warmup)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [ramp, main], milestones=[warmup])


def model_code_version(model_name: str) -> str:
    """A digest (12 hex digits) of the source file that defines registry model ``model_name``.

    Each family lives in one file that imports only torch and the registry's decorator, so any change to that file
    (a layer, an init, even a comment) gives a new digest and a new checkpoint key, while other families'
    checkpoints stay valid.
    """
    # the registry has no public way from a name to its builder; _lookup also raises the "valid names" error
    module = sys.modules[models.registry._lookup(model_name).build.__module__]
    with open(module.__file__, "rb") as f:
        return hashlib.sha1(f.read()).hexdigest()[:12]


def checkpoint_path(model_name: str, dataset_name: str, recipe: Recipe, *, data_source: str, model_options=None,
                    root=None):
    """Where the checkpoint of this (model, dataset, recipe) lives: ``<data>/checkpoints/<key>.pt``, the key
    including :func:`model_code_version` so that a changed model never loads an old checkpoint."""
    key = json.dumps({"model": model_name, "options": model_options or {}, "dataset": dataset_name,
                      "data_source": data_source, "recipe": asdict(recipe),
                      "model_code": model_code_version(model_name)}, sort_keys=True)
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return data_root(root) / "checkpoints" / f"{model_name}_{dataset_name}_{data_source}_{digest}.pt"


def evaluate(model, loader, *, device="cpu", dtype: torch.dtype | None = None,
             autocast: torch.dtype | None = None, per_item: bool = False) -> dict:
    """Test accuracy (percent) and mean cross-entropy loss of ``model`` over ``loader``.

    ``dtype`` converts model and float inputs (e.g. ``torch.half``); ``autocast`` runs the forward pass
    under ``torch.autocast`` with that dtype instead. The loss is computed in float32. ``per_item``: also
    ``right``, a CPU bool tensor, True where an item was classified correctly, in the loader's order (two models
    scored on the same items are then compared item by item: ``cnnlab.profiling.accuracy.paired_exact``).
    """
    device = torch.device(device)
    model = model.to(device).eval()
    if dtype is not None:
        model = model.to(dtype)
    correct, loss_sum, count, right = 0, 0.0, 0, []
    with torch.inference_mode():
        for inputs, labels in loader:
            inputs, labels = inputs.to(device), labels.to(device)
            if dtype is not None and inputs.is_floating_point():
                inputs = inputs.to(dtype)
            with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                logits = model(inputs)
            logits = logits.float()
            loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
            hits = logits.argmax(1) == labels
            correct += hits.sum().item()
            count += len(labels)
            if per_item:
                right.append(hits.cpu())
    result = {"accuracy_pct": 100.0 * correct / count, "loss": loss_sum / count, "num_examples": count}
    return {**result, "right": torch.cat(right)} if per_item else result


def train_step(model, inputs, labels, optimizer, *, scaler: torch.amp.GradScaler | None = None,
               autocast: torch.dtype | None = None, clip_grad_norm: float | None = None):
    """One optimisation step on a batch: forward (under ``torch.autocast`` with ``autocast`` if given),
    cross-entropy loss, backward (through ``scaler`` if given: AMP's loss scaling), optional gradient-norm
    clipping, optimizer step. Returns ``(loss, logits)`` (loss as a 0-d tensor, not synchronised)."""
    device_type = inputs.device.type
    with torch.autocast(device_type, dtype=autocast or torch.float16, enabled=autocast is not None):
        logits = model(inputs)
        loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    if scaler is not None:
        scaler.scale(loss).backward()
        if clip_grad_norm is not None:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        if clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
    return loss, logits


def fit(model, loader, optimizer, *, epochs: int, device="cpu", scheduler=None, amp: bool = False,
        clip_grad_norm: float | None = None, before_epoch: Callable[[int], Any] | None = None,
        on_epoch: Callable[[Any, int], dict | None] | None = None, progress: bool = False,
        desc: str | None = None) -> pd.DataFrame:
    """Train ``model`` in place for ``epochs`` epochs over ``loader`` with ``optimizer`` (one optimizer for all
    epochs: its state, e.g. Adam's moment estimates, carries over from epoch to epoch, and across calls).

    ``scheduler`` steps after every batch. ``amp``: float16 autocast and loss scaling on CUDA (ignored on a
    CPU). ``before_epoch(epoch)`` runs before each epoch (a DistributedSampler's ``set_epoch``); ``on_epoch(model,
    epoch)`` after it, outside the timed part, and may return a dict of columns (test accuracy...). Returns one
    row per epoch: epoch (1-based), lr (at the end of the epoch), train_loss (mean cross-entropy, nats),
    train_accuracy_pct, epoch_time_s (wall time of the epoch, data loading included, synchronised on CUDA),
    then the callback's columns.
    """
    device = torch.device(device)
    model.to(device)
    amp = amp and device.type == "cuda"
    scaler = torch.amp.GradScaler("cuda") if amp else None
    rows = []
    bar = Progress(epochs, desc=desc or "training (epochs)", show=progress)
    for epoch in range(epochs):
        bar.at(f"epoch {epoch + 1}")
        if before_epoch is not None:
            before_epoch(epoch)
        model.train()
        sums = {"loss": torch.zeros((), device=device), "correct": torch.zeros((), device=device), "count": 0}

        def one_epoch():  # sums stay on the device: no host synchronisation inside the epoch
            for inputs, labels in loader:
                inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
                loss, logits = train_step(model, inputs, labels, optimizer, scaler=scaler,
                                          autocast=torch.float16 if amp else None, clip_grad_norm=clip_grad_norm)
                if scheduler is not None:
                    scheduler.step()
                sums["loss"] += loss.detach().float() * len(labels)
                sums["correct"] += (logits.argmax(1) == labels).sum()
                sums["count"] += len(labels)

        seconds = wall_time(one_epoch, device=device).seconds
        count = max(sums["count"], 1)
        loss_sum, correct = sums["loss"].item(), sums["correct"].item()
        row = {"epoch": epoch + 1, "lr": optimizer.param_groups[0]["lr"], "train_loss": loss_sum / count,
               "train_accuracy_pct": 100.0 * correct / count, "epoch_time_s": seconds}
        rows.append({**row, **((on_epoch(model, epoch + 1) or {}) if on_epoch is not None else {})})
        bar.step()
    bar.close()
    return pd.DataFrame(rows)


def train(model_name: str, dataset_name: str, *, recipe: Recipe | str = "quick", synthetic: bool = False,
          device="cpu", model_options: dict | None = None, data_options: dict | None = None,
          cache: bool = True, progress: bool = True, root=None):
    """Train registry model ``model_name`` on ``dataset_name`` and return ``(model, history)``.

    ``recipe`` is a :class:`Recipe` or a preset name. With ``cache``, a checkpoint keyed by model,
    options, dataset, data source and recipe is saved under ``<data>/checkpoints/`` and a later call loads
    it instead of training (history then comes from the checkpoint). ``history`` has one row per epoch:
    epoch, lr, train_loss, train_accuracy_pct, test_loss, test_accuracy_pct, epoch_time_s, data_source.
    """
    if isinstance(recipe, str):
        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; valid recipes: {', '.join(RECIPES)}")
        recipe = RECIPES[recipe]
    device = torch.device(device)
    data_options = data_options or {}
    train_set = data.load(dataset_name, "train", synthetic=synthetic, augment=recipe.augment, root=root,
                              **data_options)
    test_set = data.load(dataset_name, "test", synthetic=synthetic, root=root, **data_options)
    options = dict(model_options or {})
    options.setdefault("num_classes", train_set.num_classes)
    path = checkpoint_path(model_name, dataset_name, recipe, data_source=train_set.data_source,
                           model_options=options, root=root)
    torch.manual_seed(recipe.seed)
    model = models.get(model_name, **options)
    if cache and path.exists():
        remedy = "delete it (cnnlab trains the model again)"
        state = read_or_explain(path, lambda p: torch.load(p, map_location="cpu", weights_only=True), remedy=remedy)
        try:
            model.load_state_dict(state["model"])
            history = pd.DataFrame(state["history"])
        except (KeyError, TypeError, ValueError, RuntimeError) as err:  # another model's file, or not a checkpoint
            first = (str(err).splitlines() or [""])[0][:160]
            raise DamagedFileError(f"{path} is not a checkpoint of {model_name} with options {options} "
                                   f"({type(err).__name__}: {first}): {remedy}") from err
        return model.to(device), history

    model.to(device)
    train_loader = data.make_loader(train_set, recipe.batch_size, shuffle=True, seed=recipe.seed)
    test_loader = data.make_loader(test_set, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                weight_decay=recipe.weight_decay)

    def test(net, epoch):
        result = evaluate(net, test_loader, device=device)
        return {"test_loss": result["loss"], "test_accuracy_pct": result["accuracy_pct"],
                "data_source": train_set.data_source}

    history = fit(model, train_loader, optimizer, epochs=recipe.epochs, device=device,
                  scheduler=_scheduler(optimizer, recipe, len(train_loader)), amp=recipe.amp, on_epoch=test,
                  progress=progress, desc=f"train {model_name} on {dataset_name}")
    if cache:
        save_or_warn({"model": model.state_dict(), "history": history.to_dict(orient="list")}, path,
                     failure="could not save the checkpoint",
                     consequence="the trained model is returned but not cached, so the next call trains it again")
    return model, history


def plan(model_name: str, dataset_name: str, *, recipe: Recipe | str = "quick", synthetic: bool = False,
         device="cpu", model_options: dict | None = None, root=None, label: str = "training") -> list:
    """What :func:`train` will do, as :class:`cnnlab.profiling.estimate.Work` for a study's estimate: nothing where
    its checkpoint is cached, else ``recipe.epochs`` epochs of training steps and test evaluations (batches of 512),
    each unit one step or batch of ``model_name`` on random data of the data set's shape on ``device`` (sizes from
    :func:`cnnlab.data.info`: nothing is loaded or downloaded)."""
    from cnnlab.profiling.estimate import Work

    recipe = RECIPES[recipe] if isinstance(recipe, str) else recipe
    meta = data.info(dataset_name)
    options = {"num_classes": meta.num_classes, **(model_options or {})}
    path = checkpoint_path(model_name, dataset_name, recipe, data_source="synthetic" if synthetic else "real",
                           model_options=options, root=root)
    if path.exists():
        return []
    device = torch.device(device)
    model = models.get(model_name, **options).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-9)  # the step's cost, not its effect
    size = (meta.train_size // 10 if synthetic else meta.train_size)
    test_size = (meta.test_size // 10 if synthetic else meta.test_size)
    x = torch.randn(recipe.batch_size, *meta.input_shape, device=device)
    y = torch.randint(meta.num_classes, (recipe.batch_size,), device=device)
    amp = recipe.amp and device.type == "cuda"
    batch = torch.randn(min(512, test_size), *meta.input_shape, device=device)

    def step():
        model.train()
        train_step(model, x, y, optimizer, autocast=torch.float16 if amp else None)

    def infer():
        model.eval()
        with torch.inference_mode():
            model(batch)

    return [Work(label, recipe.epochs * -(-size // recipe.batch_size), step),
            Work(label, recipe.epochs * -(-test_size // 512), infer)]


__all__ = ["RECIPES", "Recipe", "checkpoint_path", "evaluate", "fit", "model_code_version", "plan", "train",
           "train_step"]
