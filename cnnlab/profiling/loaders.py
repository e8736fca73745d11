"""How DataLoader settings change the time of a training and a test epoch: :func:`loader_sweep`.

Papers 003's two studies (VGG on CIFAR-10 and the IMDB LSTM) vary the DataLoader's ``num_workers`` (and the
batch size, and whether batches are pinned) and time one epoch of training and one of testing. This is that
experiment, once, with one set of column names for every study that runs it.

What is timed (:data:`TIMED`): an epoch from the moment its first batch is in hand. The DataLoader's iterator is
started and its first batch taken before the clock starts, so the worker processes' start-up (a fork and an import
per worker, every epoch of a non-persistent DataLoader) is not in the time: on a small epoch it was most of it, and
it is a fixed cost per epoch, not the loading the workers overlap with the model's work. Every batch, the first one
included, is still trained or tested inside the timed epoch.
"""

from __future__ import annotations

import copy
import itertools
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd
import torch

from cnnlab import config
from cnnlab.profiling.estimate import Work, unit_seconds
from cnnlab.profiling.sweep import sweep
from cnnlab.profiling.timing import wall_time

TIMED = ("the epoch from its first batch in hand: the DataLoader's iterator started and its first batch taken "
         "before the clock (worker start-up and the first batch's loading left out), every batch's work timed")
COLUMNS = ["batch_size", "num_workers", "pin_memory", "status", "error", "train_epoch_s", "test_epoch_s",
           "train_items", "test_items", "pin_memory_effective", "device", "cpu_threads", "data_source",
           "num_workers_cap"]


def loader_sweep(
    model: torch.nn.Module,
    train_epoch: Callable[[torch.nn.Module, Any], Any],
    test_epoch: Callable[[torch.nn.Module, Any], Any],
    train_set,
    test_set,
    *,
    batch_sizes: Sequence[int],
    num_workers: Sequence[int],
    pin_memory: Sequence[bool] = (False,),
    fraction: float = 1.0,
    device="cpu",
    store: str | Path | None = None,
    settings: Mapping[str, Any] | None = None,
    progress: bool = True,
    rounds: int | None = None,
    test_fraction: float | None = None,
    _reverse: bool = False,
) -> pd.DataFrame:
    """Time one training epoch and one test epoch for every (batch size, ``num_workers``, ``pin_memory``).

    Each point builds a DataLoader per split over ``fraction`` of it (of the test split: ``test_fraction``, default
    ``fraction``; ``cnnlab.data.make_loader``; training shuffled with seed 0), deep-copies ``model`` to ``device``,
    and times ``train_epoch(net, loader)`` and then ``test_epoch(net, loader)`` with
    :func:`cnnlab.profiling.wall_time`, each from its first batch in hand (:data:`TIMED`: the loader handed over is
    already started, worker start-up left out). ``num_workers`` above ``os.cpu_count()`` is skipped with the
    reason: more worker processes than cores only compete with the training process for them.
    ``pin_memory`` only changes host-to-GPU copies: on a CPU it does nothing (``pin_memory_effective`` False).

    Store: as :func:`cnnlab.profiling.sweep`, keyed by ``settings`` plus the model's class and size, the data
    sets' sizes and sources, ``fraction`` and ``device``. Columns: :data:`COLUMNS` (times in s, items counted).

    ``rounds``: the whole grid that many times (timing rounds: their spread is the noise of a comparison), the rows
    of every round in one frame with a ``round`` column (0, 1, ...), each round's points stored apart (``round``
    joins ``settings``), and measured in grid order in even rounds, in reverse in odd ones (no setting always runs
    first after a change of load: paired rounds, ``cnnlab.profiling.compare``); the frame lists each round in grid
    order. A stored round is read back, not measured again: more rounds only measure the new ones. None (default):
    the grid once, no ``round`` column.
    """
    if rounds is not None:
        rounds = config.positive_int(rounds, parameter="rounds")
        return pd.concat([loader_sweep(model, train_epoch, test_epoch, train_set, test_set, batch_sizes=batch_sizes,
                                       num_workers=num_workers, pin_memory=pin_memory, fraction=fraction,
                                       device=device, store=store, settings={**(settings or {}), "round": r},
                                       progress=progress, test_fraction=test_fraction, _reverse=r % 2 == 1
                                       ).assign(round=r) for r in range(rounds)], ignore_index=True)
    from cnnlab import data

    dev = config.resolve_device(device)
    cap = os.cpu_count() or 1
    test_share = fraction if test_fraction is None else test_fraction
    grid = {"batch_size": config.batch_sizes(batch_sizes),
            "num_workers": config.positive_ints(num_workers, parameter="num_workers", minimum=0, example="[0, 2]"),
            "pin_memory": [bool(p) for p in config.as_list(pin_memory)]}

    def skip(batch_size, num_workers, pin_memory):
        return f"num_workers {num_workers} > os.cpu_count() = {cap}: capped" if num_workers > cap else None

    def point(batch_size, num_workers, pin_memory):
        with warnings.catch_warnings():  # a CPU-only torch warns that there is nothing to pin to
            warnings.filterwarnings("ignore", message=".*pin_memory.*")
            train_loader, test_loader = (
                data.make_loader(split, batch_size, num_workers=num_workers, pin_memory=pin_memory,
                                 fraction=share, shuffle=split is train_set, seed=0)
                for split, share in ((train_set, fraction), (test_set, test_share)))
            net = copy.deepcopy(model).to(dev)
            started = Started(train_loader)  # the workers start here, before the clock
            train_s = wall_time(lambda: train_epoch(net, started), device=dev).seconds
            started = Started(test_loader)
            test_s = wall_time(lambda: test_epoch(net, started), device=dev).seconds
        return {"train_epoch_s": train_s, "test_epoch_s": test_s, "train_items": len(train_loader.dataset),
                "test_items": len(test_loader.dataset), "pin_memory_effective": pin_memory and dev.type == "cuda",
                "device": str(dev), "cpu_threads": torch.get_num_threads(),
                "data_source": getattr(train_set, "data_source", "unknown")}

    key = {**(settings or {}), "model": f"{type(model).__name__}, {sum(p.numel() for p in model.parameters())} "
                                        f"params", "train_items": len(train_set), "test_items": len(test_set),
           "data_source": getattr(train_set, "data_source", "unknown"), "fraction": fraction, "device": str(dev),
           "timed": "from the first batch"}
    if test_fraction is not None:
        key["test_fraction"] = test_fraction
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    df = sweep(point, points[::-1] if _reverse else points, store, settings=key, skip=skip,
               desc="DataLoader: batch size x workers", progress=progress)
    if _reverse:  # measured in reverse; listed in grid order
        df = df.iloc[::-1].reset_index(drop=True)
    df["num_workers_cap"] = cap
    skipped = df["status"] == "skipped"
    df.loc[skipped, "device"] = str(dev)
    df.loc[skipped, "data_source"] = getattr(train_set, "data_source", "unknown")
    return df[[c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]]


class Started:
    """``loader`` with its iterator already started and its first batch taken (worker start-up done): iterating it
    gives that batch, then the rest; other attributes are the loader's (``batch_size``, ``dataset``, ...). One pass
    only, as the epoch it stands for."""

    def __init__(self, loader):
        self.loader, self._it = loader, iter(loader)
        self._first = next(self._it, None)

    def __iter__(self):
        if self._first is not None:
            first, self._first = self._first, None
            yield first
            yield from self._it

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name):
        return getattr(self.loader, name)


def plan(step_at: Callable[[int], Callable[[], Any]], infer_at: Callable[[int], Callable[[], Any]], train_set,
         test_set, *, batch_sizes: Sequence[int], num_workers: Sequence[int], pin_memory: Sequence[bool] = (False,),
         fraction: float = 1.0, rounds: int | None = None, device="cpu", sizes: tuple[int, int] | None = None,
         label: str = "DataLoader sweep", test_fraction: float | None = None) -> list[Work]:
    """What :func:`loader_sweep` will do, as :class:`cnnlab.profiling.estimate.Work` for a study's estimate: per
    round, batch size, worker count (those above the cap are skipped) and pinning, a training epoch's steps
    (``step_at(b)``: one step at batch ``b``) and a test epoch's batches (``infer_at(b)``), each DataLoader's worker
    start-up (one worker started and its first batch, timed here) and, without workers, the loading of every batch
    in the training process (one batch timed here). ``sizes``: the splits' sizes in the run, where ``train_set``
    and ``test_set`` only stand in for them (:func:`cnnlab.data.stand_in`)."""
    from cnnlab import data

    cap = os.cpu_count() or 1
    workers = [w for w in num_workers if w <= cap]
    works = []
    sizes = sizes or (len(train_set), len(test_set))
    for b in batch_sizes:
        steps, batches = (-(-round(size * share) // b) for size, share in zip(sizes, (
            fraction, fraction if test_fraction is None else test_fraction)))
        n = (rounds or 1) * len(workers) * len(list(pin_memory))
        works += [Work(label, n * steps, unit_seconds(step_at(b), device)),
                  Work(label, n * batches, unit_seconds(infer_at(b), device))]
        started = data.make_loader(train_set, b, num_workers=1)
        works.append(Work(label, 2 * (rounds or 1) * len(pin_memory) * sum(w > 0 for w in workers),
                          unit_seconds(lambda loader=started: next(iter(loader)), "cpu")))
        if 0 in workers:
            inline = data.make_loader(train_set, b)
            works.append(Work(label, (rounds or 1) * len(pin_memory) * (steps + batches),
                              unit_seconds(lambda loader=inline: next(iter(loader)), "cpu")))
    return works
