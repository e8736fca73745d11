"""tests/fakedevice.py: each of CUDA's placement rules fires on a minimal example under cuda_rules(), the same code
runs without it (so the harness is what refuses it), and correct device code passes."""

import copy
import multiprocessing
import re

import cnnlab  # noqa: F401
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import fakedevice
from fakedevice import DEVICE, INDICES, MIXED, NUMPY


@pytest.fixture
def rules():
    with fakedevice.cuda_rules() as mode:
        yield mode


def test_to_the_device_by_position_keyword_or_tensor_and_back(rules):
    x = torch.ones(3)
    assert not rules.on_device(x) and x.device == torch.device("cpu")
    on = [x.to("cpu:0"), x.to(device="cpu:0"), x.to(DEVICE), x.to(DEVICE, torch.float64), x.to(x.to(DEVICE))]
    assert all(rules.on_device(t) and t.device == DEVICE for t in on)
    assert all(t is not x for t in on) and not rules.on_device(x), "a copy goes to the device; x stays"
    y = on[0]
    assert y.to(torch.float64).device == DEVICE, "a dtype alone leaves the tensor where it is"
    for back in (y.cpu(), y.to("cpu"), y.to(torch.device("cpu")), y.to(torch.ones(1))):
        assert back is not y and not rules.on_device(back) and back.device == torch.device("cpu")
    assert rules.on_device(y), "taking a copy off leaves the original on the device"
    assert torch.equal(y.cpu(), x), "it really computes"


def test_factories_given_the_device_and_like_and_new_follow_it(rules):
    w = torch.randn(4, 2).to(DEVICE)
    made = [torch.zeros(3, device="cpu:0"), torch.ones(3, device=DEVICE), torch.full((2,), 7, device=w.device),
            torch.tensor([1, 2], device=w.device), torch.arange(3, device=w.device), torch.empty(2, device=w.device),
            torch.zeros_like(torch.ones(2), device=DEVICE), torch.zeros_like(w), torch.ones_like(w), w.new_zeros(3),
            w.new_full((2,), 1.0), w.new_tensor([1.0])]
    assert all(rules.on_device(t) for t in made)
    assert not any(rules.on_device(t) for t in (torch.zeros(3), torch.zeros_like(w, device="cpu"),
                                                 w.new_zeros(3, device="cpu"), torch.ones(2).new_ones(2)))


def test_a_module_moves_its_parameters_and_back(rules):
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    same = net.to("cpu:0")
    assert same is net
    tensors = [*net.parameters(), *net.buffers()]
    assert all(rules.on_device(t) and t.device == DEVICE for t in tensors)
    assert all(isinstance(p, nn.Parameter) for p in net.parameters())
    copied = copy.deepcopy(net)
    assert all(rules.on_device(t) for t in (*copied.parameters(), *copied.buffers()))
    net.cpu()
    assert not any(rules.on_device(t) for t in (*net.parameters(), *net.buffers()))


def test_outputs_of_a_call_with_a_device_input_are_on_the_device(rules):
    x = torch.randn(2, 3).to(DEVICE)
    assert rules.on_device(x + 1) and rules.on_device(x.sum()) and rules.on_device(x[0])
    assert rules.on_device(torch.cat([x, x])), "inputs inside a list count"
    values, indices = torch.topk(x, 2)
    assert rules.on_device(values) and rules.on_device(indices), "every output of a tuple"
    assert rules.on_device(nn.Parameter(x)) and not rules.on_device(nn.Parameter(torch.ones(2)))
    w = nn.Parameter(torch.randn(3, 3).to(DEVICE))
    (x @ w).sum().backward()
    assert rules.on_device(w.grad), "gradients are where their parameter is"
    w.grad = torch.zeros(3, 3, device=w.device)
    with pytest.raises(RuntimeError, match="assigned grad has data of a different type"):
        w.grad = torch.zeros(3, 3)


def test_mixing_device_and_host_tensors_fails_as_on_cuda(rules):
    x, host = torch.randn(2, 3).to(DEVICE), torch.randn(2, 3)
    for call in (lambda: x * host, lambda: host + x, lambda: torch.cat([x, host]), lambda: F.linear(host, x),
                 lambda: torch.where(x > 0, x, host), lambda: host * x.sum()):  # a device scalar is no CPU scalar
        with pytest.raises(RuntimeError, match=re.escape(MIXED)):
            call()
    # CPU scalars (0-dim host tensors) are allowed in element-wise calls, as CUDA's kernels take them
    assert rules.on_device(x * torch.tensor(2.0)) and rules.on_device(torch.clamp(x, max=torch.tensor(1.0)))


def test_a_module_on_the_device_refuses_host_inputs(rules):
    lstm = nn.LSTM(3, 4, batch_first=True).to(DEVICE)
    tokens = torch.randn(2, 5, 3)
    with pytest.raises(RuntimeError, match=re.escape(MIXED)):
        lstm(tokens)
    out, (h, c) = lstm(tokens.to(DEVICE))
    assert all(map(rules.on_device, (out, h, c)))
    emb = nn.Embedding(10, 3).to(DEVICE)
    with pytest.raises(RuntimeError, match=re.escape(MIXED)):
        emb(torch.tensor([1, 2]))


def test_a_host_mask_on_a_device_weight_fails_in_custom_from_mask(rules):
    """Issue 30's first failure: prune.custom_from_mask(default_mask * self.mask) with a mask built on the host."""
    from torch.nn.utils import prune

    layer = nn.Linear(3, 2).to(DEVICE)
    with pytest.raises(RuntimeError, match=re.escape(MIXED)):
        prune.custom_from_mask(layer, "weight", torch.ones(2, 3))
    prune.custom_from_mask(layer, "weight", torch.ones(2, 3, device=layer.weight.device))
    assert rules.on_device(layer.weight_mask) and rules.on_device(layer.weight)


def test_copies_cross_devices(rules):
    x, host = torch.zeros(3).to(DEVICE), torch.arange(3.0)
    x.copy_(host)
    host.copy_(x + 1)
    assert rules.on_device(x) and not rules.on_device(host) and host.tolist() == [1.0, 2.0, 3.0]


def test_indexing_device_by_host_is_allowed_host_by_device_fails(rules):
    """Issue 30's second failure: a host tensor (torch.full on the CPU) indexed by device indices (argsort's)."""
    x, host = torch.arange(5.0).to(DEVICE), torch.arange(5.0)
    idx, mask = torch.tensor([0, 3]), torch.tensor([True, False, True, False, False])
    assert rules.on_device(x[idx]) and rules.on_device(x[mask]) and rules.on_device(x[:, None][idx, 0])
    for index in (idx.to(DEVICE), mask.to(DEVICE), (idx.to(DEVICE),)):
        with pytest.raises(RuntimeError, match=re.escape(INDICES)):
            host[index]
    assert host[torch.tensor(2).to(DEVICE)] == 2, "a 0-dim integer index is read as a Python int"
    # t[i] = v moves the indices to t's device, either way; values must be on t's device or 0-dim
    host[idx.to(DEVICE)] = 1.0
    x[idx] = torch.tensor(-1.0)
    x[idx.to(DEVICE)] = torch.tensor([7.0, 8.0]).to(DEVICE)
    assert host.tolist() == [1.0, 1.0, 2.0, 1.0, 4.0] and x.cpu().tolist() == [7.0, 1.0, 2.0, 8.0, 4.0]
    with pytest.raises(RuntimeError, match=re.escape(MIXED)):
        x[idx] = torch.tensor([5.0, 6.0])


def test_searchsorted_takes_no_host_scalar(rules):
    taken = torch.tensor([1, 3, 6]).to(DEVICE)
    with pytest.raises(RuntimeError, match="boundaries and input value tensors should have same device type"):
        torch.searchsorted(taken, torch.tensor(4))
    assert int(torch.searchsorted(taken, 4)) == 2 == int(torch.searchsorted(taken, torch.tensor(4).to(DEVICE)))


def test_numpy_of_a_device_tensor_fails(rules):
    x = torch.ones(2).to(DEVICE)
    with pytest.raises(TypeError, match=re.escape(NUMPY)):
        x.numpy()
    with pytest.raises(TypeError, match="can't convert cuda:0"):
        np.asarray(x)
    assert x.cpu().numpy().tolist() == [1.0, 1.0] and float(x.sum()) == 2.0 and x.tolist() == [1.0, 1.0]


def test_a_training_step_written_for_a_gpu_passes(rules):
    """Correct device code: model, batch and optimizer state on the device, clipping, evaluation on the host."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(20, 4), nn.LSTM(4, 6, batch_first=True))
    head = nn.Linear(6, 2)
    params = [*net.parameters(), *head.parameters()]
    optimizer = torch.optim.Adam(params, lr=1e-2)
    net.to(DEVICE), head.to(DEVICE)
    tokens, labels = torch.randint(0, 20, (3, 5)).to(DEVICE), torch.tensor([0, 1, 1]).to(DEVICE)
    for _ in range(2):
        optimizer.zero_grad()
        out, _ = net(tokens)
        loss = F.cross_entropy(head(out[:, -1]), labels)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
    state = [t for s in optimizer.state.values() for t in s.values()]
    assert all(map(rules.on_device, params)) and all(rules.on_device(p.grad) for p in params)
    assert all(rules.on_device(t) for t in state if t.dim() > 0), "Adam's moments; its step counts stay on the host"
    assert np.isfinite(loss.item()) and head.weight.detach().cpu().numpy().shape == (2, 6)


def _use_in_child(x, queue):
    try:
        queue.put(repr(float((x * 2).sum())))
    except RuntimeError as error:
        queue.put(str(error))


def test_a_forked_child_holds_host_tensors_only(rules):
    """A DataLoader worker forked from a process that uses the GPU cannot touch a device tensor (CUDA refuses to run
    in a forked child); host data loads as usual."""
    ctx = multiprocessing.get_context("fork")
    results = []
    for x in (torch.ones(2).to(DEVICE), torch.ones(2)):
        queue = ctx.Queue()
        child = ctx.Process(target=_use_in_child, args=(x, queue))
        child.start()
        results.append(queue.get(timeout=60))
        child.join(timeout=60)
    assert "Cannot re-initialize CUDA in forked subprocess" in results[0] and results[1] == "4.0"
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(8.0)), batch_size=4,
                                         num_workers=1, multiprocessing_context=ctx)
    batches = [batch.to(DEVICE) for (batch,) in loader]
    assert all(map(rules.on_device, batches)) and sum(float(b.sum()) for b in batches) == 28.0


def test_the_rules_are_the_harness():
    """Without cuda_rules() the same calls run (on a CPU nothing is refused), and nn.Parameter is restored: what the
    tests above catch, the harness catches."""
    before = nn.Parameter.__dict__["__new__"]
    x, host = torch.randn(2, 3).to(DEVICE), torch.randn(2, 3)
    x * host, host[torch.tensor([0])], x.numpy()  # noqa: B018
    with fakedevice.cuda_rules():
        with pytest.raises(RuntimeError, match=re.escape(MIXED)):
            torch.randn(2).to(DEVICE) * torch.randn(2)
        with pytest.raises(RuntimeError, match="already active"), fakedevice.cuda_rules():
            pass
    assert nn.Parameter.__dict__["__new__"] is before and x.device == torch.device("cpu")
