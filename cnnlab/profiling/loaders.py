"""How DataLoader settings change the time of a training and a test epoch: :func:`loader_sweep`.

Papers 003's two studies (VGG on CIFAR-10 and the IMDB LSTM) vary the DataLoader's ``num_workers`` (and the
batch size, and whether batches are pinned) and time one epoch of training and one of testing. This is that
experiment, once, with one set of column names for every study that runs it.
"""

from __future__ import annotations

import copy
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
) -> pd.DataFrame:
    """Time one training epoch and one test epoch for every (batch size, ``num_workers``, ``pin_memory``).

    Each point builds a DataLoader per split over ``fraction`` of it (``cnnlab.data.make_loader``; training
    shuffled with seed 0), deep-copies ``model`` to ``device``, and times ``train_epoch(net, loader)`` and then
    ``test_epoch(net, loader)`` with :func:`cnnlab.profiling.wall_time` (worker start-up is inside the epoch,
    as it is for a non-persistent DataLoader). ``num_workers`` above ``os.cpu_count()`` is skipped with the
    reason: more worker processes than cores only compete with the training process for them.
    ``pin_memory`` only changes host-to-GPU copies: on a CPU it does nothing (``pin_memory_effective`` False).

    Store: as :func:`cnnlab.profiling.sweep`, keyed by ``settings`` plus the model's class and size, the data
    sets' sizes and sources, ``fraction`` and ``device``. Columns: :data:`COLUMNS` (times in s, items counted).

    ``rounds``: the whole grid that many times (timing rounds: their spread is the noise of a comparison), the rows
    of every round in one frame with a ``round`` column (0, 1, ...), each round's points stored apart (``round``
    joins ``settings``). None (default): the grid once, no ``round`` column.
    """
    if rounds is not None:
        rounds = config.positive_int(rounds, parameter="rounds")
        return pd.concat([loader_sweep(model, train_epoch, test_epoch, train_set, test_set, batch_sizes=batch_sizes,
                                       num_workers=num_workers, pin_memory=pin_memory, fraction=fraction,
                                       device=device, store=store, settings={**(settings or {}), "round": r},
                                       progress=progress).assign(round=r) for r in range(rounds)], ignore_index=True)
    from cnnlab import data

    dev = config.resolve_device(device)
    cap = os.cpu_count() or 1
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
                                 fraction=fraction, shuffle=split is train_set, seed=0)
                for split in (train_set, test_set))
            net = copy.deepcopy(model).to(dev)
            train_s = wall_time(lambda: train_epoch(net, train_loader), device=dev).seconds
            test_s = wall_time(lambda: test_epoch(net, test_loader), device=dev).seconds
        return {"train_epoch_s": train_s, "test_epoch_s": test_s, "train_items": len(train_loader.dataset),
                "test_items": len(test_loader.dataset), "pin_memory_effective": pin_memory and dev.type == "cuda",
                "device": str(dev), "cpu_threads": torch.get_num_threads(),
                "data_source": getattr(train_set, "data_source", "unknown")}

    key = {**(settings or {}), "model": f"{type(model).__name__}, {sum(p.numel() for p in model.parameters())} "
                                        f"params", "train_items": len(train_set), "test_items": len(test_set),
           "data_source": getattr(train_set, "data_source", "unknown"), "fraction": fraction, "device": str(dev)}
    df = sweep(point, grid, store, settings=key, skip=skip, desc="DataLoader: batch size x workers",
               progress=progress)
    df["num_workers_cap"] = cap
    skipped = df["status"] == "skipped"
    df.loc[skipped, "device"] = str(dev)
    df.loc[skipped, "data_source"] = getattr(train_set, "data_source", "unknown")
    return df[[c for c in COLUMNS if c in df.columns] + [c for c in df.columns if c not in COLUMNS]]


def plan(step_at: Callable[[int], Callable[[], Any]], infer_at: Callable[[int], Callable[[], Any]], train_set,
         test_set, *, batch_sizes: Sequence[int], num_workers: Sequence[int], pin_memory: Sequence[bool] = (False,),
         fraction: float = 1.0, rounds: int | None = None, device="cpu", sizes: tuple[int, int] | None = None,
         label: str = "DataLoader sweep") -> list[Work]:
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
        steps, batches = (-(-round(size * fraction) // b) for size in sizes)
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
