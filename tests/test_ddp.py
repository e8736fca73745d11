"""cnnlab.ddp (the torchrun training script and its launcher) and the sweep of cnnlab.studies.ddp_scaling over
real launches. The study without launches: test_studies_ddp_scaling.py.

The launches use Gloo on the CPU, LeNet-5 and 71 digits images: each costs mostly process start-up. Where processes
go on CUDA (cnnlab.ddp.placement, init_process_group) is tested with fake GPU counts.
"""

import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import cnnlab  # noqa: F401
from cnnlab import ddp, models
from cnnlab.ddp import ROW_FIELDS, merge, placement
from cnnlab.studies import ddp_scaling

TINY = dict(model="lenet5", dataset="digits", data_fraction=0.085, batch_size_per_rank=8, device="cpu")
WARMUP_STEPS = 100  # 10x the 10 timed steps: were the warm-up in the timed epochs, they would take longer than it


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    row = ddp.launch(world_size=2, epochs=2, out_dir=out, timeout_s=120, save_params=True, profile_steps=3,
                     warmup_steps=WARMUP_STEPS, **TINY)
    return row, Path(row["run_dir"])


def test_two_gloo_ranks_train_to_identical_parameters(two_ranks):
    row, run_dir = two_ranks
    assert row["status"] == "ok", row["error"]
    assert row["params_identical"] is True
    p0 = torch.load(run_dir / "params_rank0.pt", weights_only=True)
    p1 = torch.load(run_dir / "params_rank1.pt", weights_only=True)
    assert list(p0) == list(p1) and len(p0) > 0
    for name in p0:
        assert torch.equal(p0[name], p1[name]), name
    torch.manual_seed(0)  # the script's seed: the initial weights, which training must have changed
    initial = dict(models.get("lenet5", num_classes=10).named_parameters())
    assert any(not torch.equal(p0[name], initial[name]) for name in p0)


def test_one_launch_trains_a_plan_of_configurations_each_on_its_own_process_count(tmp_path):
    # a round of cnnlab.studies.ddp_scaling: one torchrun of 2 processes; the 1-process configurations on rank 0 alone
    configs = [dict(data_fraction=0.085, batch_size_per_rank=8, world_size=1, profile=True),
               dict(data_fraction=0.085, batch_size_per_rank=8, world_size=2, profile=False),
               dict(data_fraction=0.085, batch_size_per_rank=16, world_size=1, profile=False)]
    rows = ddp.launch_plan(configs, name="round0", model="lenet5", dataset="digits", device="cpu", out_dir=tmp_path,
                           epochs=1, timeout_s=120, warmup_steps=2, profile_steps=2)
    assert [r["status"] for r in rows] == ["ok"] * 3, rows
    assert [(r["world_size"], r["placement"], r["batch_size_per_rank"]) for r in rows] == \
        [(1, "1 CPU process", 8), (2, "2 CPU processes", 8), (1, "1 CPU process", 16)]
    # 71 images: 9 steps of 8 on one process, 5 per rank on two (36 each, padded: 72), 5 of 16 on one
    assert [r["steps_per_rank"] for r in rows] == [9, 5, 5] and [r["samples_total"] for r in rows] == [71, 72, 71]
    assert rows[0]["conv_calls"] == 9 * 2 * 2 and all(math.isnan(r["conv_calls"]) for r in rows[1:])  # profiled: 1st
    assert all(r["params_identical"] for r in rows) and len({r["run_dir"] for r in rows}) == 3
    assert all(r["wall_time_s"] > 0 for r in rows)


def test_merged_row_has_every_field_and_counts_the_shards(two_ranks):
    row, run_dir = two_ranks
    assert set(ROW_FIELDS) <= set(row)
    assert (row["world_size"], row["nnodes"], row["backend"], row["device"]) == (2, 1, "gloo", "cpu")
    assert (row["batch_size_per_rank"], row["global_batch_size"], row["data_fraction"]) == (8, 16, 0.085)
    # 71 images; DistributedSampler pads to 36 per rank -> 5 steps of <= 8 per epoch, 2 epochs.
    assert row["samples_total"] == 2 * 36 * 2 and row["steps_per_rank"] == 10
    # 3 profiled steps, scaled to the 10 steps of the timed epochs: LeNet-5 runs 2 convolutions forward and backward
    assert row["profiled_steps"] == 3 and row["conv_calls"] == 10 * 2 * 2
    assert row["calls_total"] > row["conv_calls"]
    # every step allocates its activations anew: 10 steps' allocations are more than one step's peak of live bytes
    assert row["cpu_mem_allocated_mib"] > 2 * row["max_cpu_mem_mib"] > 0
    assert math.isnan(row["gpu_mem_allocated_mib"]) and row["stem"] is None  # LeNet-5 has no stem option
    assert row["wall_time_s"] > 0 and row["cpu_total_ms"] > 0 and row["max_cpu_mem_mib"] > 0
    assert row["throughput_samples_per_s"] == pytest.approx(row["samples_total"] / row["wall_time_s"])
    assert len(row["cpu_total_ms_per_rank"]) == len(row["max_cpu_mem_mib_per_rank"]) == 2
    assert row["max_cpu_mem_mib"] == max(row["max_cpu_mem_mib_per_rank"])
    assert math.isnan(row["cuda_total_ms"]) and "CPU" in row["cuda_missing_reason"]
    assert math.isnan(row["max_gpu_mem_mib"]) and row["max_gpu_mem_missing_reason"]
    assert row["data_source"] == "real" and row["torch_threads_per_rank"] == 1 and math.isfinite(row["final_loss"])
    assert (row["gpus_used"], row["processes_per_gpu"], row["placement"]) == (0, None, "2 CPU processes")
    assert {p.name for p in run_dir.glob("rank*.json")} == {"rank0.json", "rank1.json"}
    # every time and count carries its range, which holds its value
    for col in ("cpu_total_ms", "calls_total", "cpu_mem_allocated_mib", "throughput_samples_per_s"):
        assert row[f"{col}_min"] <= row[col] * (1 + 1e-9) and row[col] <= row[f"{col}_max"] * (1 + 1e-9), col


def test_the_warmup_steps_are_timed_apart_from_the_epochs(two_ranks):
    row, run_dir = two_ranks
    ranks = [__import__("json").loads((run_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert row["warmup_steps"] == WARMUP_STEPS and row["warmup_time_s"] == max(r["warmup_time_s"] for r in ranks)
    # the timed epochs are the 2 x 5 steps alone: their samples, their time, their throughput
    assert row["steps_per_rank"] == 10 and row["samples_total"] == 2 * 36 * 2
    assert all(len(r["epoch_times_s"]) == 2 for r in ranks)
    assert row["wall_time_s"] == pytest.approx(max(sum(r["epoch_times_s"]) for r in ranks))
    assert row["throughput_samples_per_s"] == pytest.approx(row["samples_total"] / row["wall_time_s"])
    assert 0 < row["wall_time_s"] < row["warmup_time_s"], (row["wall_time_s"], row["warmup_time_s"])


@pytest.mark.parametrize("device, processes, gpus, expected", [
    ("cpu", 1, 0, ("gloo", ("cpu",), 0, None, "1 CPU process")),
    ("cpu", 2, 0, ("gloo", ("cpu", "cpu"), 0, None, "2 CPU processes")),
    ("cuda", 1, 1, ("nccl", ("cuda:0",), 1, 1, "1 process on 1 GPU")),
    # NCCL refuses two ranks on one GPU: Gloo all-reduces the CUDA tensors
    ("cuda", 2, 1, ("gloo", ("cuda:0", "cuda:0"), 1, 2, "2 processes sharing 1 GPU")),
    ("cuda", 2, 2, ("nccl", ("cuda:0", "cuda:1"), 2, 1, "2 processes, one GPU each")),
    ("cuda", 2, 8, ("nccl", ("cuda:0", "cuda:1"), 2, 1, "2 processes, one GPU each")),
    ("cuda", 4, 2, ("gloo", ("cuda:0", "cuda:1", "cuda:0", "cuda:1"), 2, 2, "4 processes sharing 2 GPUs")),
])
def test_placement_gives_each_process_a_gpu_round_robin_and_nccl_only_to_one_gpu_each(device, processes, gpus,
                                                                                      expected):
    assert tuple(placement(device, processes, gpus)) == expected


def test_placement_on_cuda_without_a_gpu_says_so():
    with pytest.raises(ValueError, match="no GPU is present"):
        placement("cuda", 2, 0)


@pytest.mark.parametrize("gpus, backend, device", [(1, "gloo", "cuda:0"), (2, "nccl", "cuda:1")])
def test_init_process_group_puts_local_rank_1_of_2_where_placement_says(monkeypatch, gpus, backend, device):
    # the GPU path on a CPU: CUDA, the device and the process group are faked, the decision is real
    for var, value in dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2", MASTER_ADDR="localhost",
                           MASTER_PORT="1").items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    chosen = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda dev: chosen.update(set_device=str(dev)))
    monkeypatch.setattr(ddp.dist, "init_process_group",
                        lambda backend, timeout, device_id: chosen.update(backend=backend, device_id=device_id))
    rank, world_size, local_rank, dev, used = ddp.init_process_group("cuda", 30.0)
    assert (rank, world_size, local_rank, str(dev), used) == (1, 2, 1, device, backend)
    assert chosen["set_device"] == device and chosen["backend"] == backend
    assert chosen["device_id"] == (dev if backend == "nccl" else None)  # NCCL binds its GPU; Gloo takes none


def test_a_crashing_rank_raises_its_reason_within_the_timeout(tmp_path):
    start = time.perf_counter()
    with pytest.raises(ddp.LaunchFailed, match=r"^rank 1: RuntimeError: injected failure") as failed:
        ddp.launch(world_size=2, out_dir=tmp_path, timeout_s=90, fail_rank=1, **TINY)
    assert time.perf_counter() - start < 90
    assert not isinstance(failed.value, torch.OutOfMemoryError)  # the sweep records it as "error", not "oom"
    assert (failed.value.run_dir / "rank1.error.json").exists()


def test_a_rank_out_of_memory_raises_an_out_of_memory_error(tmp_path):
    # what a rank writes when it runs out of memory (cnnlab.ddp.main): the launcher raises an OOM the sweep knows
    error = {"rank": 0, "error": "out of memory: OutOfMemoryError: CUDA out of memory", "oom": True}
    (tmp_path / "rank0.error.json").write_text(__import__("json").dumps(error))
    reason, oom = ddp._failure_reason(tmp_path, tmp_path / "torchrun.log", 1)
    assert oom is True and reason == "rank 0: out of memory: OutOfMemoryError: CUDA out of memory"
    assert isinstance(ddp.LaunchOutOfMemory(reason), (torch.OutOfMemoryError, ddp.LaunchFailed))


def test_launch_rejects_a_timeout_that_is_not_a_finite_number_of_seconds(tmp_path):
    for bad in (float("inf"), float("nan"), 0, True):
        with pytest.raises(ValueError, match=r"timeout_s=.* is not valid; valid: a finite number in \(0, 604800\]"):
            ddp.launch(world_size=1, out_dir=tmp_path, timeout_s=bad, **TINY)
    assert not any(tmp_path.iterdir())  # nothing launched


def test_a_sigkilled_rank_is_recorded_with_the_signal(tmp_path, monkeypatch):
    monkeypatch.setenv("CNNLAB_DDP_KILL_RANK", "1")
    with pytest.raises(ddp.LaunchFailed, match=r"^rank 1 was killed by SIGKILL \(exitcode -9\)"):
        ddp.launch(world_size=2, out_dir=tmp_path, timeout_s=90, **TINY)


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc (Linux): the check reads process state there")
@pytest.mark.gpu
def test_sweep_records_timeouts_as_failed_goes_on_and_kills_every_process(tmp_path, monkeypatch):
    # Rank 0 hangs after the process group forms, so every point times out however fast this machine starts up.
    monkeypatch.setenv("CNNLAB_DDP_HANG_RANK", "0")
    monkeypatch.setattr(ddp_scaling.measure, "plan", lambda cfg: [])  # no probe launch: it would hang too
    cfg = ddp_scaling.configure("quick", data_fractions=[0.085], batch_sizes=[8], world_sizes=[1, 2], timeout_s=4,
                                min_rounds=1, max_rounds=1)  # one round: one launch, and one more after its failure
    start = time.perf_counter()
    with pytest.warns(UserWarning, match="2 of 2 points failed"):
        runs = ddp_scaling.measure(cfg, tmp_path, progress=False)
    assert time.perf_counter() - start < 30
    assert runs["world_size"].tolist() == [1, 2]  # the second point ran after the first failed
    assert (runs["status"] == "error").all() and runs["error"].str.startswith("LaunchFailed: timeout").all()
    assert set(ROW_FIELDS) <= set(runs.columns) and runs["global_batch_size"].tolist() == [8, 16]
    assert runs["epochs"].eq(cfg.epochs).all() and runs["backend"].eq("gloo").all()  # from the configuration
    assert runs["scaling_missing_reason"].eq("point error").all()
    assert _processes_mentioning(str(tmp_path)) == []


def test_merge_takes_the_slowest_rank_and_keeps_per_rank_values():
    rank = dict(local_rank=0, node=0, hostname="a", pid=1, device="cpu", backend="gloo", data_source="real",
                samples=100,
                steps=10, final_loss=1.0, wall_time_s=2.0, cpu_total_ms=2000.0, cuda_total_ms=math.nan,
                cuda_missing_reason="CPU run", calls_total=500, conv_calls=40, kernel_launches=math.nan,
                max_cpu_mem_mib=10.0, max_gpu_mem_mib=math.nan, max_gpu_mem_missing_reason="CPU run",
                cpu_mem_allocated_mib=100.0, gpu_mem_allocated_mib=math.nan, stem=None, profiled_steps=5,
                max_rss_mib=300.0, torch_threads=1, param_sha256="x", warmup_steps=5, warmup_time_s=0.5)
    ranks = [dict(rank, rank=1, wall_time_s=4.0, cpu_total_ms=3000.0, max_cpu_mem_mib=12.0, node=1,
                  cpu_mem_allocated_mib=90.0, warmup_time_s=0.7),
             dict(rank, rank=0)]
    row = merge(ranks, dict(model="lenet5", dataset="digits", batch_size=32, fraction=0.5, epochs=1))
    assert tuple(row) == ROW_FIELDS
    assert row["wall_time_s"] == 4.0 and row["throughput_samples_per_s"] == 200 / 4.0
    assert row["cpu_total_ms_per_rank"] == [2000.0, 3000.0] and row["max_cpu_mem_mib"] == 12.0
    assert row["cpu_mem_allocated_mib"] == 100.0 and row["profiled_steps"] == 5
    assert row["global_batch_size"] == 64 and row["nnodes"] == 2 and row["params_identical"] is True
    assert math.isnan(row["cuda_total_ms"])
    # the warm-up apart from the timed epochs (the slowest rank's); where the ranks ran, from their devices
    assert (row["warmup_steps"], row["warmup_time_s"]) == (5, 0.7)
    assert (row["gpus_used"], row["processes_per_gpu"], row["placement"]) == (0, None, "2 CPU processes")
    config = dict(model="m", dataset="d", batch_size=1, fraction=1.0, epochs=1)
    shared = merge([dict(rank, rank=r, device="cuda:0", backend="gloo") for r in (0, 1)], config)
    assert (shared["device"], shared["backend"], shared["gpus_used"], shared["processes_per_gpu"]) == \
        ("cuda", "gloo", 1, 2)
    assert shared["placement"] == "2 processes sharing 1 GPU"
    # cuda:0 on two machines is two GPUs
    own = merge([dict(rank, rank=r, node=r, device="cuda:0", backend="nccl") for r in (0, 1)], config)
    assert (own["gpus_used"], own["processes_per_gpu"], own["placement"]) == (2, 1, "2 processes, one GPU each")
    assert merge([dict(rank, rank=0), dict(rank, rank=1, param_sha256="y")],
                 dict(model="m", dataset="d", batch_size=1, fraction=1.0, epochs=1))["params_identical"] is False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc (Linux): the check reads process state there")
def test_two_torchrun_nodes_meet_at_a_c10d_rendezvous_and_train_one_model(tmp_path):
    """docs/distributed.md's several-machine command, both "machines" on localhost: two torchrun agents (--nnodes 2, one
    Gloo process each, each with its own output folder) meet at a c10d rendezvous and train as one group."""
    port = _free_port()  # (another process could take it before the rendezvous binds it: a rare failure)
    path = [str(ddp.CHECKOUT) if ddp.CHECKOUT else None, os.environ.get("PYTHONPATH")]
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="INFO",  # torchrun's rendezvous steps in the logs
               PYTHONPATH=os.pathsep.join(filter(None, path)))
    procs = []
    try:
        for node in (0, 1):
            out = tmp_path / f"node{node}"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                   "--rdzv-id", f"cnnlab-test-{port}", "--max-restarts", "0",
                   "-m", "cnnlab.ddp", "--model", "lenet5", "--dataset", "digits", "--fraction", "0.085",
                   "--batch-size", "8", "--epochs", "1", "--device", "cpu", "--profile-steps", "2", "--save-params",
                   "--pg-timeout-s", "30", "--out", str(out)]
            out.mkdir()
            with open(out / "torchrun.log", "w") as log:
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ddp.CHECKOUT, env=env,
                                              start_new_session=True))
        deadline = time.monotonic() + 50
        while time.monotonic() < deadline and any(proc.poll() is None for proc in procs) and \
                not any(proc.poll() for proc in procs):  # stop waiting as soon as one node fails
            time.sleep(0.2)
        codes = [proc.poll() for proc in procs]
    finally:  # on a timeout or any error: no torchrun agent or worker outlives the test
        for proc in procs:
            if proc.poll() is None:
                ddp._kill_tree(proc)
    logs = {n: (tmp_path / f"node{n}" / "torchrun.log").read_text(errors="replace")[-3000:] for n in (0, 1)}
    assert codes == [0, 0], f"exit codes {codes} (None: killed after 50 s); logs: {logs}"
    rows = list(tmp_path.glob("node*/row.json"))
    assert len(rows) == 1, logs  # rank 0, on whichever node it landed, merged every rank's metrics
    row = __import__("json").loads(rows[0].read_text())
    assert (row["world_size"], row["nnodes"], row["backend"], row["params_identical"]) == (2, 2, "gloo", True)
    params = [torch.load(p, weights_only=True) for p in sorted(tmp_path.glob("node*/params_rank*.pt"))]
    assert len(params) == 2 and {p.parent.name for p in tmp_path.glob("node*/params_rank*.pt")} == {"node0", "node1"}
    assert list(params[0]) == list(params[1])
    for name in params[0]:
        assert torch.equal(params[0][name], params[1][name]), name
    assert _processes_mentioning(str(tmp_path)) == []


def test_a_rank_that_dies_at_shutdown_after_row_json_is_kept_with_a_note(tmp_path, monkeypatch):
    # What notebook 05 met on 2 cores: row.json written (every rank's metrics merged), then SIGABRT at exit.
    monkeypatch.setenv("CNNLAB_DDP_ABORT_AT_EXIT_RANK", "1")
    row = ddp.launch(world_size=2, out_dir=tmp_path, timeout_s=90, **TINY)
    assert row["status"] == "ok", row["error"]
    assert row["note"].startswith("kept: row.json was complete") and "SIGABRT" in row["note"], row["note"]
    assert row["wall_time_s"] > 0 and row["world_size"] == 2 and row["error"] is None


def _launched(pid: int) -> list[int]:
    """The processes below ``pid`` that run in a session other than this one's (ddp.launch starts cnnlab.subreaper
    so, torchrun runs in its session, and torchrun starts its workers in sessions of their own), read from
    /proc/<pid>/stat, not from their command lines: reading another process's cmdline waits for its memory-map lock,
    which a busy process (a notebook kernel beside these tests in CI) can hold."""
    def session(child):
        try:
            return int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            return None
    own = os.getsid(0)
    return [child for child in ddp._descendants(pid) if session(child) not in (own, None)]


def _wait_for_launched(pid: int, count: int, timeout_s: float = 60) -> list[int]:
    """:func:`_launched` below ``pid`` once there are ``count`` of them, or what there is after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while len(found := _launched(pid)) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.mark.skipif(not Path("/proc").exists(), reason="needs /proc (Linux): the check reads process state there")
def test_an_interrupted_launch_leaves_no_torchrun_or_worker_running(tmp_path, monkeypatch):
    import signal
    import threading

    monkeypatch.setenv("CNNLAB_DDP_HANG_RANK", "0")  # the launch runs until it is interrupted
    start, sent = time.monotonic(), {}

    def interrupt():  # Ctrl-C once torchrun and a worker run (the rank that does not hang may already be gone)
        # Sent to the main thread itself, where launch() waits; when it was sent is kept for the failure message.
        try:
            sent["processes"] = len(_wait_for_launched(os.getpid(), 3))  # the subreaper, torchrun, a worker
        finally:
            sent["after_s"] = round(time.monotonic() - start, 1)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    # Ctrl-C as a user's Python gets it: KeyboardInterrupt in the main thread. A process started in the background
    # by a non-interactive shell (a CI script run with &) inherits SIGINT ignored, and Python then keeps it ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ddp.launch(world_size=2, out_dir=tmp_path, timeout_s=120, **TINY)
    except BaseException as failure:
        raise AssertionError(f"launch() was not interrupted; the interrupt: {sent or 'not sent'}") from failure
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sent["processes"] >= 3, f"interrupted before torchrun and a worker ran: {sent}"
    assert _processes_mentioning(str(tmp_path)) == []  # launch() waited until every one was gone


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux, whose prctl has the parent-death signal")
def test_torchrun_and_workers_stop_when_the_launching_process_is_killed(tmp_path):
    # papermill killed: the launcher gets no chance to clean up, so torchrun and its workers must stop by themselves
    code = ("import sys; from cnnlab import ddp; ddp.launch(world_size=2, out_dir=sys.argv[1], timeout_s=300, "
            "model='lenet5', dataset='digits', data_fraction=0.085, batch_size_per_rank=8, device='cpu')")
    env = dict(os.environ, CNNLAB_DDP_HANG_RANK="0", OMP_NUM_THREADS="1")
    launcher = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env, cwd=ddp.CHECKOUT)
    try:
        found = _wait_for_launched(launcher.pid, 4)  # the subreaper, torchrun and its two workers, below the launcher
        assert len(found) >= 4, f"fewer than 4 processes below {launcher.pid} after 60 s"
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 60
        while _processes_mentioning(str(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _processes_mentioning(str(tmp_path))
    finally:
        for pid in _processes_mentioning(str(tmp_path)):  # leave nothing behind if the test fails
            os.kill(pid, 9)
    assert left == []


def _agent_and_workers(pid: int) -> tuple[int | None, list[int]]:
    """The torchrun agent below ``pid`` and its workers, from /proc/<pid>/stat (see :func:`_launched`): torchrun
    starts each worker as the leader of a session of its own, so the workers are the session leaders below ``pid``
    other than its own children (launch's cnnlab.subreaper, where there is one), and the agent is their parent."""
    def stat(child):  # (parent, session)
        try:
            fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[1]), int(fields[3])
        except (OSError, IndexError, ValueError):
            return None, None

    below = {child: stat(child) for child in ddp._descendants(pid)}
    workers = [child for child, (parent, session) in below.items() if session == child and parent != pid]
    agents = {below[child][0] for child in workers}
    return (agents.pop() if len(agents) == 1 else None), workers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux (/proc, prctl)")
def test_no_worker_outlives_a_launch_whose_torchrun_was_sigkilled(tmp_path, monkeypatch):
    # Issue 44, item 7: torchrun SIGKILLed while its workers still import torch. They live in sessions of their own,
    # so they were orphaned and then waited in TCPStore::connect for the dead agent's store for minutes.
    import signal
    import threading

    monkeypatch.setenv("CNNLAB_DDP_HANG_RANK", "0")  # should a rank get far, it waits there
    seen = {}

    def kill_agent():  # as soon as both workers exist
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            agent, workers = _agent_and_workers(os.getpid())
            if len(workers) >= 2:
                seen.update(agent=agent, workers=workers)
                os.kill(agent, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_agent, daemon=True)
    killer.start()
    try:
        with pytest.raises(ddp.LaunchFailed):
            ddp.launch(world_size=2, out_dir=tmp_path, timeout_s=60, **TINY)
        killer.join(5)
        assert len(seen.get("workers", [])) >= 2, f"torchrun and its 2 workers were not seen: {seen}"
        left = [pid for pid in seen["workers"] if ddp._alive(pid)]  # launch() returned: none may run
    finally:  # leave nothing behind if the test fails
        for pid in seen.get("workers", []):
            if ddp._alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"workers {left} outlived the launch"
