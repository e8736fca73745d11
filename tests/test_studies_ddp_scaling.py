"""cnnlab.studies.ddp_scaling without launching processes: configure, the sweep around cnnlab.ddp.launch (replaced
by a fake that counts its calls), scaling, claims and figures. The real torchrun launches are in test_ddp.py."""

import math

import pandas as pd
import pytest
import torch

import cnnlab  # noqa: F401
from cnnlab import ddp, studies
from cnnlab.studies import ddp_scaling


def fake_launch(calls: list, *, fail_world=None):
    """A stand-in for cnnlab.ddp.launch: a row like merge()'s, throughput 100 x world_size, fewer calls and less
    time at larger batches; ``fail_world`` fails like a crashed rank."""

    def launch(*, world_size, batch_size_per_rank, data_fraction, model, dataset, epochs, device, synthetic,
               stem=None, profile_steps=5, **_):
        calls.append((data_fraction, batch_size_per_rank, world_size, model, stem, profile_steps))
        if world_size == fail_world:
            return ddp.failed_row("rank 1: RuntimeError: boom", world_size=world_size,
                                  batch_size_per_rank=batch_size_per_rank, data_fraction=data_fraction, model=model,
                                  dataset=dataset, epochs=epochs, device=device)
        row = {name: math.nan for name in ddp.ROW_FIELDS}
        row.update(model=model, dataset=dataset, data_source="real", backend="gloo", device=device,
                   world_size=world_size, nnodes=1, batch_size_per_rank=batch_size_per_rank,
                   global_batch_size=batch_size_per_rank * world_size, data_fraction=data_fraction, epochs=epochs,
                   samples_total=100, steps_per_rank=10, wall_time_s=1.0 / world_size,
                   throughput_samples_per_s=100.0 * world_size,
                   cpu_total_ms=1000.0 / (batch_size_per_rank * world_size),
                   cuda_missing_reason="CPU run: no device activity to profile",
                   calls_total=10000 // batch_size_per_rank,
                   conv_calls=40, max_cpu_mem_mib=3.0, max_gpu_mem_missing_reason="CPU run: no GPU memory",
                   cpu_mem_allocated_mib=300.0 / world_size, stem=stem, profiled_steps=profile_steps,
                   max_rss_mib=500.0, torch_threads_per_rank=1, final_loss=2.0, params_identical=True, status="ok")
        return {**row, "launch_time_s": 0.1, "run_dir": "runs/x"}

    return launch


def test_study_follows_the_contract():
    assert studies.signature_problems(ddp_scaling) == []


def test_configure_checks_every_parameter_and_reads_papermill_text():
    cfg = ddp_scaling.configure("paper", device="cpu", oversubscribe=True)  # 4 processes, on any CPU
    assert (cfg.device, cfg.world_sizes, cfg.data_fractions) == ("cpu", [1, 2, 4], [1.0, 0.5, 0.1])
    assert ddp_scaling.configure("quick", world_sizes="[2, 1]").world_sizes == [1, 2]  # papermill -p text
    assert ddp_scaling.configure("quick", world_sizes=2, batch_sizes=16, data_fractions=0.5).world_sizes == [2]
    assert ddp_scaling.configure("quick", data_fractions="[1, 0.5]").data_fractions == [1.0, 0.5]
    # the stem is explicit wherever the model has one: the paper's torchvision (ImageNet) stem unless asked otherwise
    assert ddp_scaling.configure("paper", device="cpu", oversubscribe=True).stem == "imagenet"
    assert ddp_scaling.configure("quick", model="resnet152").stem == "imagenet"
    assert ddp_scaling.configure("quick", model="resnet152", stem="cifar").stem == "cifar"
    assert ddp_scaling.configure("quick").stem is None  # LeNet-5 has no stem option
    for name, bad in [("batch_sizes", [0]), ("data_fractions", [1.5]), ("world_sizes", "[0, 1]"), ("device", "tpu"),
                      ("model", "nope"), ("dataset", "nope"), ("epochs", 0), ("threads_per_rank", 1.5),
                      ("timeout_s", -1), ("profile_steps", 0), ("stem", "cifar")]:
        with pytest.raises(ValueError, match=name.rstrip("s")):
            ddp_scaling.configure("quick", **{name: bad})
    with pytest.raises(ValueError, match="stem='tiny' is not valid; valid: imagenet, cifar"):
        ddp_scaling.configure("quick", model="resnet152", stem="tiny")
    with pytest.raises(ValueError, match="unknown parameter"):
        ddp_scaling.configure("quick", world_size=[1])
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ddp_scaling.configure("quick", device="cuda")
        assert ddp_scaling.configure("quick", device="auto").device == "cpu"


def test_configure_rejects_values_that_would_fail_late_or_start_too_many_processes(monkeypatch):
    monkeypatch.setattr(ddp_scaling.config, "cores", lambda: 2)
    for name, bad, message in [
            ("timeout_s", float("inf"), r"timeout_s=inf is not valid; valid: a finite number in \(0, 604800\]"),
            ("timeout_s", float("nan"), "timeout_s=nan is not valid"),
            ("timeout_s", True, "timeout_s=True is not valid"),
            ("world_sizes", [1000], r"world_sizes: 1000 is not valid; valid: integers >= 1 and <= 2 \(the 2 CPU "
                                    r"cores present; oversubscribe=True allows up to 64\)"),
            ("world_sizes", [1, True], "world_sizes: True is not valid"),
            ("threads_per_rank", 3, r"threads_per_rank=3 must be an integer >= 1 and <= 2 \(the 2 CPU cores"),
            ("batch_sizes", [10**6], "batch_sizes: 1000000 is not valid; valid: integers >= 1 and <= 65536"),
            ("data_fractions", [float("nan")], "data_fractions=nan is not valid; valid: a finite number in \\(0, 1\\]"),
            ("data_fractions", [True], "data_fractions=True is not valid"),
            ("data_fractions", [], "data_fractions is empty"),
            ("epochs", 2.0, "epochs=2.0 must be an integer"),
            ("synthetic", 1, "synthetic=1 is not valid; valid: True, False"),
            ("oversubscribe", "yes", "oversubscribe='yes' is not valid; valid: True, False")]:
        with pytest.raises(ValueError, match=message):
            ddp_scaling.configure("quick", device="cpu", **{name: bad})
    # asked otherwise: more processes than cores, up to a stated bound
    assert ddp_scaling.configure("quick", device="cpu", world_sizes=[1, 4], oversubscribe=True).world_sizes == [1, 4]
    with pytest.raises(ValueError, match="world_sizes: 1000 is not valid; valid: integers >= 1 and <= 64"):
        ddp_scaling.configure("quick", device="cpu", world_sizes=[1000], oversubscribe=True)


def test_measure_is_one_row_per_point_and_a_failed_launch_says_why(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ddp, "launch", fake_launch(calls, fail_world=2))
    cfg = ddp_scaling.configure("quick", batch_sizes=[32], world_sizes=[1, 2], profile_steps=2)
    with pytest.warns(UserWarning, match="2 of 4 points failed"):
        df = ddp_scaling.measure(cfg, tmp_path, progress=False)
    assert {c[4:] for c in calls} == {(None, 2)}  # the stem and the profiled steps reach every launch
    assert df["profiled_steps"].eq(2).all()
    assert df[["data_fraction", "world_size"]].values.tolist() == [[1.0, 1], [1.0, 2], [0.5, 1], [0.5, 2]]
    assert df["status"].tolist() == ["ok", "error"] * 2
    failed = df[df["status"] == "error"]
    assert failed["error"].eq("rank 1: RuntimeError: boom").all()  # the launcher's reason, not the wrapper's
    assert failed["cuda_missing_reason"].eq(failed["error"]).all()
    assert df["global_batch_size"].tolist() == [32, 64, 32, 64] and df["backend"].eq("gloo").all()
    assert df[["model", "dataset", "device", "data_source"]].drop_duplicates().values.tolist() == \
        [["lenet5", "digits", "cpu", "real"]]
    assert df["scaling_missing_reason"].tolist()[1] == "point error"
    assert list(df.columns[:len(ddp.ROW_FIELDS)]) == list(ddp.ROW_FIELDS)
    print(studies.check_results(df))
    with pytest.warns(UserWarning, match="2 of 2 points failed"):  # failed points are launched again, ok ones not
        ddp_scaling.measure(cfg, tmp_path, progress=False)
    assert len(calls) == 4 + 2


def test_points_that_need_more_gpus_than_present_are_skipped(monkeypatch):
    calls = []
    monkeypatch.setattr(ddp, "launch", fake_launch(calls))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    cfg = ddp_scaling.configure("quick", data_fractions=[1.0], batch_sizes=[32], world_sizes=[1, 2, 4],
                                oversubscribe=True)  # (4 CPU processes: on any CPU)
    cfg.device = "cuda"  # as configure makes it on a machine with CUDA
    df = ddp_scaling.measure(cfg, None, progress=False)
    assert df["status"].tolist() == ["ok", "skipped", "skipped"] and len(calls) == 1
    assert df["error"].tolist()[1:] == ["needs 2 GPUs, 1 present", "needs 4 GPUs, 1 present"]
    assert df["backend"].eq("nccl").all() and df["global_batch_size"].tolist() == [32, 64, 128]


def test_a_store_with_other_settings_is_never_read_and_the_same_settings_resume(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ddp, "launch", fake_launch(calls))
    a = ddp_scaling.configure("quick", data_fractions=[1.0], batch_sizes=[32], world_sizes=[1, 2])
    b = ddp_scaling.configure("quick", data_fractions=[1.0], batch_sizes=[32], world_sizes=[1, 2], model="resnet20")
    c = ddp_scaling.configure("quick", data_fractions=[1.0], batch_sizes=[32], world_sizes=[1, 2], profile_steps=7)
    first = ddp_scaling.measure(a, tmp_path, progress=False)
    assert len(calls) == 2
    other = ddp_scaling.measure(b, tmp_path, progress=False)  # same grid, another model: measured again
    assert len(calls) == 4 and other["model"].eq("resnet20").all() and [c[3] for c in calls[2:]] == ["resnet20"] * 2
    ddp_scaling.measure(c, tmp_path, progress=False)  # another number of profiled steps: measured again
    assert len(calls) == 6
    again = ddp_scaling.measure(a, tmp_path, progress=False)  # a's store: nothing new, the same rows
    assert len(calls) == 6
    pd.testing.assert_frame_equal(again.drop(columns="finished_utc"), first.drop(columns="finished_utc"),
                                  check_dtype=False)


def test_scaling_efficiency_against_one_process():
    df = pd.DataFrame([dict(model="m", dataset="d", device="cpu", epochs=1, data_fraction=1.0,
                            batch_size_per_rank=b, world_size=w, status=s, throughput_samples_per_s=t)
                       for b, w, s, t in [(8, 1, "ok", 100.0), (8, 2, "ok", 150.0), (16, 2, "ok", 90.0),
                                          (32, 1, "error", math.nan), (32, 2, "ok", 80.0)]])
    out = ddp_scaling.add_scaling(df)
    assert out["speedup_vs_1"].tolist()[:2] == [1.0, 1.5]
    assert out["scaling_efficiency"].tolist()[:2] == [1.0, 0.75]
    assert out["scaling_missing_reason"].tolist()[2:] == ["no successful 1-process point to compare with",
                                                         "point error", "no successful 1-process point to compare with"]


CLAIMS = {
    "cpu_batch": "CPU runtime falls with batch size on the larger data fractions (1, 1/2)",
    "cpu_procs": "CPU runtime falls with process count on the larger data fractions (1, 1/2)",
    "cuda_batch": "CUDA runtime falls with batch size on the larger data fractions (1, 1/2)",
    "cuda_procs": "CUDA runtime falls with process count on the larger data fractions (1, 1/2)",
    "calls": "number of calls falls with batch size",
    "cpu_memory": "CPU memory transfer is about the same for every batch size and process count",
    "gpu_memory": "GPU memory transfer falls with more GPUs",
}


def paper_like(**columns):
    """A grid (fractions 1, 1/2; batch 128, 512; 1 and 2 GPUs) on which every claim of the paper holds: totals per
    epoch fall with batch size and process count, CPU memory allocated per epoch is flat, GPU memory allocated per
    epoch halves with 2 GPUs while the peak grows with the batch (as a peak must); ``columns`` replace columns by a
    function of the row."""
    rows = []
    for f in (1.0, 0.5):
        for b in (128, 512):
            for w in (1, 2):
                row = dict(data_fraction=f, batch_size_per_rank=b, world_size=w, status="ok", device="cuda",
                           cpu_total_ms=1000.0 / (b * w), cuda_total_ms=500.0 / (b * w), cuda_missing_reason=None,
                           calls_total=100_000 // (b * w), max_cpu_mem_mib=50.0, cpu_mem_allocated_mib=100.0 + b / 64,
                           max_gpu_mem_mib=float(b), gpu_mem_allocated_mib=1000.0 / w, max_gpu_mem_missing_reason=None)
                rows.append({**row, **{k: fn(row) for k, fn in columns.items()}})
    return pd.DataFrame(rows)


def judged(df, device="cuda"):
    checks = {c.claim: c for c in ddp_scaling.check_claims(df, device)}
    assert set(checks) == set(CLAIMS.values()) and all(c.criterion for c in checks.values())
    return checks


def test_every_claim_holds_on_the_paper_like_grid():
    checks = judged(paper_like())
    assert {k: checks[v].held for k, v in CLAIMS.items()} == dict.fromkeys(CLAIMS, True)
    assert "fell in 0 of 4" in checks[CLAIMS["gpu_memory"]].note  # the peaks did not fall: only the bytes allocated


@pytest.mark.parametrize("claim, columns", [
    ("cpu_batch", dict(cpu_total_ms=lambda r: 5.0 * r["batch_size_per_rank"] / r["world_size"])),  # grows with b
    ("cpu_procs", dict(cpu_total_ms=lambda r: 1000.0 / r["batch_size_per_rank"])),  # flat: a tie does not fall
    ("cuda_batch", dict(cuda_total_ms=lambda r: 5.0 * r["batch_size_per_rank"] / r["world_size"])),
    ("cuda_procs", dict(cuda_total_ms=lambda r: 500.0 * r["world_size"] / r["batch_size_per_rank"])),
    ("calls", dict(calls_total=lambda r: 1000)),
    ("cpu_memory", dict(cpu_mem_allocated_mib=lambda r: float(r["batch_size_per_rank"]))),  # 4x apart
    # judged on the bytes allocated, not on the peak: a falling peak does not make it hold
    ("gpu_memory", dict(gpu_mem_allocated_mib=lambda r: 1000.0, max_gpu_mem_mib=lambda r: 64.0 / r["world_size"])),
])
def test_each_claim_fails_when_its_measurement_goes_the_other_way(claim, columns):
    checks = judged(paper_like(**columns))
    assert checks[CLAIMS[claim]].held is False, checks[CLAIMS[claim]]
    assert [k for k, v in CLAIMS.items() if checks[v].held is False] == [claim]  # and only that one


def test_claims_say_what_failed_and_what_cannot_be_judged_on_a_cpu():
    df = paper_like(cpu_total_ms=lambda r: 1000.0 / (r["batch_size_per_rank"] * r["world_size"])
                    if r["data_fraction"] == 1.0 else 5.0 * r["batch_size_per_rank"],
                    cuda_total_ms=lambda r: math.nan, max_gpu_mem_mib=lambda r: math.nan,
                    gpu_mem_allocated_mib=lambda r: math.nan, device=lambda r: "cpu",
                    cuda_missing_reason=lambda r: "CPU run", max_gpu_mem_missing_reason=lambda r: "CPU run")
    checks = judged(df, "cpu")
    by_batch = checks[CLAIMS["cpu_batch"]]
    assert by_batch.held is False and by_batch.ours == "fell in 2 of 4 comparisons"  # fraction 0.5 grows
    assert "data_fraction=0.5" in by_batch.note and "data_fraction=1" not in by_batch.note
    assert "< at the smallest" in by_batch.criterion
    for name in ("cuda_batch", "cuda_procs", "gpu_memory"):
        assert checks[CLAIMS[name]].held is None and checks[CLAIMS[name]].note == "CPU run"
    memory = checks[CLAIMS["cpu_memory"]]
    assert memory.held is True and "1.67" in memory.criterion and "CPU run" in memory.note


def test_claims_name_the_grid_points_they_were_not_judged_on():
    # notebook 05 on 2 cores: a world_size=2 point failed and the claims read "fell in 3 of 3" as if complete
    df = paper_like()
    lost = (df["data_fraction"] == 1.0) & (df["batch_size_per_rank"] == 512) & (df["world_size"] == 2)
    df.loc[lost, "status"] = "error"
    df.loc[lost, ["cpu_total_ms", "cuda_total_ms", "calls_total", "gpu_mem_allocated_mib"]] = math.nan
    df["note"] = None
    kept = (df["data_fraction"] == 0.5) & (df["batch_size_per_rank"] == 128) & (df["world_size"] == 2)
    df.loc[kept, "note"] = "kept: row.json was complete when the launch then failed at shutdown: rank 1 was killed"
    checks = judged(df)
    for check in checks.values():
        assert check.ours.endswith("; 1 of 8 grid points missing, not judged: f=1 b=512 w=2 (error)"), check.ours
        assert "f=0.5 b=128 w=2: kept: row.json was complete" in check.note, check.note
    assert checks[CLAIMS["cpu_procs"]].ours.startswith("fell in 3 of 3 comparisons; 1 of 8")  # the one lost: 1 of 4
    assert "missing" not in "".join(c.ours for c in judged(paper_like()).values())  # a full grid says nothing


def test_figures_keep_their_names_and_say_what_was_not_measured(monkeypatch):
    monkeypatch.setattr(ddp, "launch", fake_launch([], fail_world=2))
    cfg = ddp_scaling.configure("quick", batch_sizes=[32, 128], world_sizes=[1, 2])
    with pytest.warns(UserWarning):
        df = ddp_scaling.measure(cfg, None, progress=False)
    figs = ddp_scaling.figures(df)
    assert list(figs) == ["05_cpu_total_ms", "05_cuda_total_ms", "05_calls_total", "05_max_cpu_mem_mib",
                          "05_max_gpu_mem_mib", "05_cpu_mem_allocated_mib", "05_gpu_mem_allocated_mib", "05_scaling"]
    texts = [t.get_text() for ax in figs["05_cuda_total_ms"].axes for t in ax.texts]
    assert len(texts) == 2 and all("no device activity" in t for t in texts)
    for fig in figs.values():
        ddp_scaling.plotting.plt.close(fig)
