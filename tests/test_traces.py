"""cnnlab.profiling.traces: Chrome traces and CUDA memory snapshots written to files (or missing with a reason)."""

from __future__ import annotations

import contextlib
import json

import cnnlab  # noqa: F401  (first: registers torchvision's schemas)
import pytest
import torch

from cnnlab.profiling import profile_ops
from nets import SmallConvNet


def test_saved_chrome_trace_is_json_with_trace_events(tmp_path):
    import gzip

    from cnnlab.profiling import traces

    model, x = SmallConvNet().eval(), torch.randn(2, 3, 16, 16)
    path = traces.trace_file(tmp_path / "new_folder", "small")
    with torch.inference_mode():
        prof = profile_ops(lambda: model(x), device="cpu", trace_path=path)
    assert prof.trace_path == str(path) and path.name == "small.pt.trace.json"
    names = {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}
    assert {"aten::conv2d", "cnnlab::iteration"} <= names
    with torch.profiler.profile() as raw:
        model(x)
    packed = traces.save_chrome_trace(raw, tmp_path / "t.json.gz")
    assert "aten::conv2d" in {e.get("name") for e in json.loads(gzip.decompress(packed.read_bytes()))["traceEvents"]}


def test_memory_snapshot_on_cpu_is_missing_with_a_reason_and_does_not_run(tmp_path):
    from cnnlab.profiling import traces

    calls = []
    row = traces.memory_snapshot(lambda: calls.append(1), tmp_path / "s.memory.pickle", "cpu")
    assert row["memory_snapshot_path"] is None and "CUDA" in row["memory_snapshot_missing_reason"]
    assert not calls and not (tmp_path / "s.memory.pickle").exists()


def test_memory_snapshot_stops_recording_when_the_function_raises(tmp_path, monkeypatch):
    # The CUDA path with the allocator's recorder replaced (no GPU here): recording must be off again afterwards.
    from cnnlab.profiling import traces

    log = []
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda enabled="all", **kw: log.append(("record", enabled)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: log.append(("dump", path)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "device", lambda dev: contextlib.nullcontext())
    dev = torch.device("cuda", 0)
    row = traces._record_cuda(lambda: log.append("fn"), tmp_path / "a.pickle", dev, 10)
    assert log == [("record", "all"), "fn", ("dump", str(tmp_path / "a.pickle")), ("record", None)]
    assert row == {"memory_snapshot_path": str(tmp_path / "a.pickle"), "memory_snapshot_missing_reason": None}
    log.clear()
    with pytest.raises(ZeroDivisionError):
        traces._record_cuda(lambda: 1 / 0, tmp_path / "b.pickle", dev, 10)
    assert log == [("record", "all"), ("record", None)]
