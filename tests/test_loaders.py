"""cnnlab.profiling.loaders: loader_sweep times epochs per DataLoader setting and skips too many workers."""

from __future__ import annotations

import os

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import torch
from torch import nn


def test_loader_sweep_times_epochs_per_setting_and_skips_too_many_workers(tmp_path, monkeypatch):
    from torch.utils.data import TensorDataset

    from cnnlab.profiling import loader_sweep

    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    train_set = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    test_set = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    for split in (train_set, test_set):  # what cnnlab.data's data sets carry
        split.data_source, split.name, split.num_classes, split.input_shape = "synthetic", "toy", 2, (4,)
    seen = []

    def train_epoch(net, loader):
        seen.append(("train", loader.batch_size, loader.num_workers))
        for x, _ in loader:
            net(x)

    def test_epoch(net, loader):
        seen.append(("test", loader.batch_size))
        for x, _ in loader:
            net(x)

    kwargs = dict(batch_sizes=[8, 16], num_workers=[0, 2], fraction=0.5, device="cpu", store=tmp_path / "l.csv",
                  settings={"study": "test"}, progress=False)
    df = loader_sweep(nn.Linear(4, 2), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert list(zip(df["batch_size"], df["num_workers"])) == [(8, 0), (8, 2), (16, 0), (16, 2)]
    assert list(df["status"]) == ["ok", "skipped", "ok", "skipped"]
    assert df.loc[df["status"] == "skipped", "error"].str.contains("os.cpu_count").all()
    ok = df[df["status"] == "ok"]
    assert (ok["train_epoch_s"] > 0).all() and (ok["test_epoch_s"] > 0).all()
    assert (ok["train_items"] == 32).all() and (ok["test_items"] == 16).all()
    assert not ok["pin_memory_effective"].any() and (df["num_workers_cap"] == 1).all()
    assert ("train", 8, 0) in seen and ("train", 8, 2) not in seen
    seen.clear()
    again = loader_sweep(nn.Linear(4, 2), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert seen == [] and list(again["train_epoch_s"].fillna(-1)) == list(df["train_epoch_s"].fillna(-1))
    wider = loader_sweep(nn.Linear(4, 3), train_epoch, test_epoch, train_set, test_set, **kwargs)
    assert len(seen) == 4 and wider.attrs.get("store") != df.attrs.get("store")  # another model: measured again


def test_loader_sweep_rounds_repeats_the_grid_and_keys_each_round(tmp_path):
    from torch.utils.data import TensorDataset

    from cnnlab.profiling import loader_sweep

    train_set = TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,)))
    test_set = TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))
    calls = []

    def epoch(net, loader):
        calls.append(loader.batch_size)

    kwargs = dict(batch_sizes=[4, 8], num_workers=[0], device="cpu", store=tmp_path / "l.csv", progress=False)
    df = loader_sweep(nn.Linear(4, 2), epoch, epoch, train_set, test_set, rounds=3, **kwargs)
    assert list(df["round"]) == [0, 0, 1, 1, 2, 2] and list(df["batch_size"]) == [4, 8] * 3
    assert len(calls) == 12  # 3 rounds x 2 batch sizes x (train, test): every round measured, none read back
    calls.clear()
    again = loader_sweep(nn.Linear(4, 2), epoch, epoch, train_set, test_set, rounds=4, **kwargs)
    assert len(calls) == 4 and list(again["round"]) == [0, 0, 1, 1, 2, 2, 3, 3]  # only round 3 is new
    assert list(again["train_epoch_s"][:6]) == list(df["train_epoch_s"])
    assert "round" not in loader_sweep(nn.Linear(4, 2), epoch, epoch, train_set, test_set, **kwargs).columns


def test_plan_counts_each_epochs_steps_worker_starts_and_inline_loading():
    from cnnlab.profiling import loaders

    train_set = torch.utils.data.TensorDataset(torch.randn(100, 4), torch.zeros(100, dtype=torch.long))
    test_set = torch.utils.data.TensorDataset(torch.randn(40, 4), torch.zeros(40, dtype=torch.long))
    step, infer = (lambda b: (lambda: None)), (lambda b: (lambda: None))
    cap = os.cpu_count() or 1
    works = loaders.plan(step, infer, train_set, test_set, batch_sizes=[10], num_workers=[0, 1, cap + 1],
                         fraction=0.5, rounds=3)
    counts = [w.count for w in works]
    # per round and worker count kept (0 and 1): 5 steps and 2 test batches; 2 worker starts per round with workers;
    # without workers each batch is loaded in the training process
    assert counts == [3 * 2 * 5, 3 * 2 * 2, 2 * 3 * 1, 3 * (5 + 2)]
    assert all(isinstance(w.unit, float) and w.unit >= 0 for w in works)
    sized = loaders.plan(step, infer, train_set, test_set, batch_sizes=[10], num_workers=[1], sizes=(1000, 400))
    assert [w.count for w in sized][:2] == [100, 40]  # the run's sizes, where the sets only stand in for them


class _SlowFirst(torch.utils.data.Dataset):
    """Item 0 takes ``SLOW_S`` to load: the stand-in for a DataLoader's start-up before its first batch."""

    SLOW_S = 0.4

    def __init__(self, n):
        self.x, self.y = torch.randn(n, 4), torch.zeros(n, dtype=torch.long)
        self.data_source = "synthetic"

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        if i == 0:
            import time
            time.sleep(self.SLOW_S)
        return self.x[i], self.y[i]


def test_the_timed_epoch_starts_with_its_first_batch_in_hand(tmp_path):
    """Issue 43 item 6: worker start-up (here: a slow first batch) was inside the timed epoch; now the loader is
    started and its first batch taken before the clock, and that batch is still part of the epoch's work."""
    from cnnlab.profiling import loader_sweep, loaders

    seen = []

    def epoch(net, loader):
        seen.append(sum(len(x) for x, _ in loader))

    df = loader_sweep(nn.Linear(4, 2), epoch, epoch, _SlowFirst(16), _SlowFirst(16), batch_sizes=[4],
                      num_workers=[0], device="cpu", store=tmp_path / "l.csv", progress=False)
    assert seen == [16, 16], "every batch, the first included, is handed to the epoch"
    assert df["test_epoch_s"].iloc[0] < _SlowFirst.SLOW_S / 2, "the first batch's loading is not timed"
    assert "first batch" in loaders.TIMED
    started = loaders.Started(torch.utils.data.DataLoader(_SlowFirst(1), batch_size=1))
    assert len(started) == 1 and started.batch_size == 1 and len(list(started)) == 1 and list(started) == []


def test_odd_rounds_run_the_grid_in_reverse_and_list_it_in_grid_order(tmp_path):
    from torch.utils.data import TensorDataset

    from cnnlab.profiling import loader_sweep

    data = TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long))
    order = []

    def epoch(net, loader):
        order.append(loader.batch_size)

    df = loader_sweep(nn.Linear(4, 2), epoch, lambda net, loader: None, data, data, batch_sizes=[2, 4, 8],
                      num_workers=[0], device="cpu", store=tmp_path / "l.csv", progress=False, rounds=2)
    assert order == [2, 4, 8, 8, 4, 2], "round 1 runs the grid backwards: no setting always runs first"
    assert list(df["batch_size"]) == [2, 4, 8, 2, 4, 8] and list(df["round"]) == [0, 0, 0, 1, 1, 1]
