"""``make gpu-check`` (``python -m cnnlab.gpucheck``): on a machine with one CUDA GPU, the unit tests that exercise
CUDA (``pytest -m gpu``) and every study at the quick preset, then one summary; made for a short GPU slot.

Each study runs in its own process (``--child``, started early so that its imports overlap the study before it) with
its own time limit (:data:`LIMITS_S`, overridable), inside one overall budget (:data:`BUDGET_S`): a study past its
limit is killed with every process under it and recorded as "timeout", with how far its sweep had got and where it
was. Within a study: ``configure("quick", device=...)``, ``measure``, ``figures``, ``check_claims``,
:func:`cnnlab.studies.save` and :func:`cnnlab.studies.check_results`, as its notebook calls them.

Where it writes. ``--out`` (default ``figures/reference/<gpu-name>/``, where ``make report`` and the explorer show it
as a machine beside this one; ``build/gpu-check/<cpu-name>/`` for ``--device cpu``): ``<NN_name>/`` per study (its
tables, figures, ``claims.csv``, ``environment.json``; replaced on each run), ``gpu-check.txt`` (the summary),
``gpu-check.json`` (the same, for programs) and ``logs/`` (what each study and pytest printed). The sweeps' stores go
to ``--stores`` (default ``build/gpu-check/stores/<machine>/``), not into the reference: they hold the same rows as
the tables, with lock and attempt files, keyed by a code digest that the next commit makes stale. A second run
resumes from them (``--fresh``: measure everything again).

Needs no venv: the Makefile runs it with ``.venv/bin/python`` where there is one, else ``python3`` with the checkout on
``PYTHONPATH`` (a framework image: torch, pytest, pytest-xdist; no papermill, Jupyter or torchao).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from cnnlab import claims, paths, studies

# Seconds each part may take on one H100 (the unit tests, then the studies in notebook order). Set from the first GPU
# run (2026-11-27, import and CUDA start included there): quickstart 16 s, fp16 36, amp_amc 39, vgg_quantization 47,
# lstm_pruning 26 (then it crashed), ddp_scaling 99, and batch_size, tiling and validation_li2016 several minutes
# each. The slow four are being made faster; these limits are what the 6-minute budget leaves them.
LIMITS_S = {"tests": 45, "quickstart": 20, "batch_size": 25, "fp16": 40, "amp_amc": 40, "tiling": 25,
            "ddp_scaling": 40, "lstm_pruning": 40, "vgg_quantization": 50, "validation_li2016": 25}
BUDGET_S = 360  # the whole check, so that it fits a 15-minute GPU slot twice with the machine's start
END_S = 5  # kept back from the budget for killing, the summary and the files
PRESET = "quick"
FAILED = ("error", "oom", "killed")  # point statuses that mean "did not measure" (skipped ones say why, on purpose)
VERDICTS = {k: v.short for k, v in claims.STORED.items()}  # claims.csv's held -> column
# A test file that marks a test gpu: a decorator line, or a module's pytestmark.
MARKED = re.compile(r"^(@pytest\.mark\.gpu\b|pytestmark\b.*\bpytest\.mark\.gpu\b)", re.MULTILINE)


def folder_name(device_name: str) -> str:
    """A device's name as a folder: "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3"."""
    return re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown-device"


def notebook_folder(study: str) -> str:
    """A study's results folder, named as its notebook: "fp16" -> "02_fp16" (:data:`cnnlab.studies.STUDIES` is in
    notebook order)."""
    return f"{studies.STUDIES.index(study):02d}_{study}"


def first_line(error: BaseException) -> str:
    """ "RuntimeError: the first line of its message"."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def _short(path: str) -> str:
    """A path inside the checkout's package as "cnnlab/prune.py"; any other path as it is."""
    i = path.rfind(f"{os.sep}cnnlab{os.sep}")
    return path[i + 1:] if i >= 0 else path


def _ours(path: str) -> bool:
    return f"{os.sep}cnnlab{os.sep}" in path and not path.endswith(f"{os.sep}gpucheck.py")


def where(error: BaseException) -> str:
    """The innermost cnnlab frame the error passed through, "cnnlab/prune.py:224", else the innermost one."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)]
    frame = next((f for f in reversed(frames) if _ours(f.filename)), frames[-1] if frames else None)
    return f"{_short(frame.filename)}:{frame.lineno}" if frame else "?"


def faulthandler_frame(log: str) -> str:
    """Where a study's main thread was in the ``faulthandler`` dump its process wrote before its limit: the innermost
    frame of the study's own code and the innermost cnnlab frame, "cnnlab/studies/tiling.py:165 tile_point >
    cnnlab/profiling/timing.py:448 _time_cuda"; "" when the log holds no dump."""
    dump = log[log.rfind("Timeout ("):] if "Timeout (" in log else ""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)  # innermost first
        if not any(path.endswith(f"{os.sep}gpucheck.py") for path, _, _ in frames):
            continue  # not the thread that runs the study
        ours = [f for f in frames if _ours(f[0])]
        own = [f for f in ours if f"{os.sep}studies{os.sep}" in f[0]]
        picked = list(dict.fromkeys(own[:1] + ours[:1]))
        return " > ".join(f"{_short(path)}:{line} {func}" for path, line, func in picked)
    return ""


# ------------------------------------------------------------------------------------------ one study (the child)

def not_measured(df) -> list[dict]:
    """The points that did not measure (status error, oom or killed) and those skipped, grouped by experiment,
    status and the first line of their error: ``[{"experiment", "status", "error", "points"}]``."""
    if "status" not in df.columns:
        return []
    bad = df[df["status"].isin(FAILED + ("skipped",))]
    groups: dict[tuple, int] = {}
    for _, row in bad.iterrows():
        error = row.get("error")
        text = str(error).strip().splitlines()[0] if isinstance(error, str) and error.strip() else "no reason given"
        key = (str(row.get("experiment", "")) if "experiment" in bad.columns else "", row["status"], text)
        groups[key] = groups.get(key, 0) + 1
    return [dict(experiment=e, status=s, error=t, points=n) for (e, s, t), n in groups.items()]


def run_child(name: str, device: str, out_dir: Path, store_dir: Path, result_file: Path, commit: str | None) -> int:
    """One study, as its notebook runs it. Its imports come first (they may overlap the study before); then it
    creates ``<result_file>.ready`` and waits for the parent's "go <limit>" line on stdin. Writes its result to
    ``result_file`` (JSON) whatever happens."""
    import faulthandler

    from cnnlab import plotting
    from cnnlab.profiling import environment

    study = studies.load(name)
    Path(f"{result_file}.ready").touch()
    line = sys.stdin.readline().split()  # "go <seconds>": the limit starts now
    if not line:
        return 1
    limit = float(line[1])
    faulthandler.dump_traceback_later(max(limit - 2.0, 0.8 * limit), exit=False)  # where it was, if it runs late
    result: dict = {"status": "error", "claims": None, "not_measured": [], "problems": []}
    phase, start = "configure", time.monotonic()
    try:
        cfg = study.configure(PRESET, device=device)
        print(f"[{name}] " + ", ".join(f"{k}={getattr(cfg, k)!r}" for k in study.PARAMETERS.declared), flush=True)
        phase = "measure"
        df = study.measure(cfg, store_dir, progress=False)
        result["measure_s"] = time.monotonic() - start
        result["not_measured"] = not_measured(df)
        phase = "figures"
        plotting.set_theme()
        try:
            figs = plotting.keep(study.figures(df))
        except Exception as error:  # the claims are still worth saving
            traceback.print_exc()
            figs = {}
            result["problems"].append(f"figures: {where(error)}: {first_line(error)}")
        phase = "check_claims"
        checks = study.check_claims(df, cfg.device)
        env = environment()
        if commit:  # the lent machine's copy of the checkout has a commit of its own, in no one's history
            env.update(git_commit=commit, git_dirty=None, git_commit_of_copy=env.get("git_commit"))
        table = studies.save(df, figs, checks, out_dir, name=name, env=env)
        result["claims"] = {col: int((table["held"] == held).sum()) for held, col in VERDICTS.items()}
        result["expected_s"] = df.attrs.get("run", {}).get("expected_s")  # the estimate measure printed
        phase = "check_results"
        try:
            result["check_results"] = studies.check_results(df, cfg)
        except AssertionError as error:
            result["problems"].append(f"check_results: {first_line(error)}")
        result["status"] = "ok" if not result["problems"] else "error"
    except BaseException as error:  # noqa: BLE001 - recorded, and the process ends with it
        traceback.print_exc()
        result["problems"].append(f"{phase}: {where(error)}: {first_line(error)}")
    finally:
        faulthandler.cancel_dump_traceback_later()
        result["seconds"] = time.monotonic() - start
        result_file.write_text(json.dumps(result, default=str))
        print(f"[{name}] {result['status']} in {result['seconds']:.0f} s", flush=True)
    return 0 if result["status"] == "ok" else 1


# --------------------------------------------------------------------------------------------- the parent

def _environment(python: str, env: dict) -> dict:
    """cnnlab's environment record from a fresh process (this one creates no CUDA context, which would hold GPU
    memory while the studies measure); ``{"error": ...}`` when torch cannot be imported or CUDA not be read."""
    code = "import json, cnnlab.profiling as p; print(json.dumps(p.environment(), default=str))"
    proc = subprocess.run([python, "-c", code], env=env, cwd=paths.base(), capture_output=True, text=True,
                          timeout=120)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _stop(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``'s process group and every group under it (torchrun starts its workers in sessions of their
    own), and wait until they are gone."""
    from cnnlab.ddp import _kill_tree  # the one place that knows how torchrun's workers are found

    _kill_tree(proc)


def _tail(path: Path, lines: int = 8) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


class Study:
    """A study's process: started (its imports run), then :meth:`go` with a limit, then :meth:`wait`."""

    def __init__(self, name: str, args, python: str, env: dict, tmp: Path, logs: Path):
        self.name, self.folder = name, notebook_folder(name)
        self.out_dir, self.store_dir = args.out / self.folder, args.stores / self.folder
        self.result_file, self.log = tmp / f"{name}.json", logs / f"{self.folder}.log"
        self.progress = tmp / f"{name}.progress.json"
        shutil.rmtree(self.out_dir, ignore_errors=True)  # the results of this run only, never an older run's
        if args.fresh:
            from cnnlab.profiling.store import remove_stores

            remove_stores(self.store_dir)
        cmd = [python, "-m", "cnnlab.gpucheck", "--child", name, "--device", args.device, "--out", str(self.out_dir),
               "--stores", str(self.store_dir), "--result", str(self.result_file)]
        cmd += ["--commit", args.commit] if args.commit else []
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                         env={**env, "CNNLAB_PROGRESS_FILE": str(self.progress)}, cwd=paths.base(),
                                         start_new_session=True)
        self.limit = 0.0

    def ready(self, deadline: float) -> bool:
        """Whether the process has done its imports (waited for until ``deadline``, a ``time.monotonic()``)."""
        ready = Path(f"{self.result_file}.ready")
        while not ready.exists() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return ready.exists()

    def go(self, limit: float) -> None:
        """Start the study, its limit counting from now (after its imports: see :meth:`ready`)."""
        self.limit, self.started = limit, time.monotonic()
        try:
            self.proc.stdin.write(f"go {limit:.1f}\n".encode())
            self.proc.stdin.close()
        except OSError:  # it died while importing: wait() reads why from its log
            pass

    def wait(self) -> dict:
        """The study's record: name, folder, status (ok / error / timeout), seconds, limit_s, claims, not_measured,
        error (the first error line of a failure), log."""
        try:
            self.proc.wait(timeout=self.limit)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        seconds = time.monotonic() - self.started
        _stop(self.proc)
        record = {"name": self.name, "folder": self.folder, "seconds": round(seconds, 1), "limit_s": self.limit,
                  "log": str(self.log)}
        try:
            record.update(json.loads(self.result_file.read_text()))
            record["seconds"] = round(seconds, 1)
        except (OSError, ValueError):
            record.update(status="error", claims=None, not_measured=[], problems=[])
        if record.get("expected_s") is None and self.log.exists():  # a study cut short: its printed estimate
            said = re.search(r"preset: expected about ([0-9.]+) (s|min|h) on", self.log.read_text(errors="replace"))
            record["expected_s"] = float(said[1]) * {"s": 1, "min": 60, "h": 3600}[said[2]] if said else None
        if timed_out:
            from cnnlab.profiling import progress

            state = progress.read(self.progress)
            at = faulthandler_frame(self.log.read_text(errors="replace")) if self.log.exists() else ""
            record.update(status="timeout", error=f"past its {self.limit:.0f} s limit" +
                          (f"; {progress.describe(state)}" if state else "") + (f"; in {at}" if at else ""))
        elif record["status"] != "ok":
            record["error"] = "; ".join(record["problems"]) or \
                f"exit code {self.proc.returncode}: " + " | ".join(_tail(self.log, 2))
        return record


def run_tests(python: str, env: dict, limit: float, workers: int, logs: Path, tmp: Path) -> dict:
    """``pytest -m gpu`` over the test files that mark a test ``gpu`` (a module another image cannot import is not
    collected), on ``workers`` processes: status (ok / failed / error / timeout), counts, failing test ids with their
    first error line."""
    import importlib.util
    import xml.etree.ElementTree as ET

    files = sorted(str(p.relative_to(paths.base())) for p in (paths.base() / "tests").glob("test_*.py")
                   if MARKED.search(p.read_text()))
    xml, log = tmp / "junit.xml", logs / "unit-tests.log"
    record = {"name": "unit tests", "seconds": 0.0, "limit_s": limit, "files": files, "counts": {}, "failures": [],
              "log": str(log)}
    if not files:  # pytest would then run every test file
        return {**record, "status": "error", "error": "no file in tests/ marks a test gpu"}
    cmd = [python, "-m", "pytest", "-m", "gpu", "-q", "-rfE", "-p", "no:cacheprovider", f"--junitxml={xml}", *files]
    if workers > 1 and importlib.util.find_spec("xdist") is not None:
        cmd += ["-n", str(workers)]
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=paths.base(),
                                start_new_session=True)
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pass
        timed_out = proc.poll() is None
        _stop(proc)
    record["seconds"] = round(time.monotonic() - start, 1)
    try:
        cases = ET.parse(xml).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        cases = None
    if timed_out or cases is None:
        status = "timeout" if timed_out else "error"
        return {**record, "status": status, "error": (f"past its {limit:.0f} s limit; " if timed_out else "") +
                " | ".join(_tail(log, 2))}
    for case in cases:
        outcome = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
        kind = {"failure": "failed", "error": "errors", "skipped": "skipped"}.get(getattr(outcome, "tag", ""), "passed")
        record["counts"][kind] = record["counts"].get(kind, 0) + 1
        if kind in ("failed", "errors"):
            message = (outcome.get("message") or outcome.text or "").strip().splitlines()
            test_id = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            record["failures"].append(f"{test_id}: {message[0] if message else kind}")
    bad = record["counts"].get("failed", 0) + record["counts"].get("errors", 0)
    return {**record, "status": "failed" if bad or proc.returncode not in (0, 5) else "ok"}


def summary(header: str, records: list[dict], tests: dict | None, total_s: float, budget_s: float, out: Path) -> str:
    """The printed summary: one line per study (status, minutes, the minutes its measure expected, limit, claims held /
    not / inconclusive / n/a, a failure's first error line) with its points that did not measure under it, the unit tests' line, the total."""
    lines = [header, f"{'study':<22}{'status':<9}{'min':>5}{'exp.':>6}{'limit s':>9}" +
             "".join(f"{c:>6}" for c in VERDICTS.values())]
    for r in records:
        claims = r.get("claims") or {}
        counts = "".join(f"{claims[c]:>6}" if c in claims else f"{'-':>6}" for c in VERDICTS.values())
        expected = f"{r['expected_s'] / 60:>6.1f}" if r.get("expected_s") is not None else f"{'-':>6}"
        lines.append(f"{r['folder']:<22}{r['status']:<9}{r['seconds'] / 60:>5.1f}{expected}{r['limit_s']:>9.0f}"
                     f"{counts}" + (f"  {r['error']}" if r.get("error") else ""))
        for p in r.get("not_measured") or []:
            what = "not measured" if p["status"] in FAILED else "skipped"
            lines.append(f"    {what}: {p['points']} point(s) of {p['experiment'] or 'the sweep'}, {p['status']}: "
                         f"{p['error'][:160]}")
    if tests is None:
        lines.append(f"{'unit tests':<22}{'skipped':<9}  (--skip-tests)")
    else:
        counts = ", ".join(f"{n} {k}" for k, n in tests["counts"].items())
        lines.append(f"{'unit tests':<22}{tests['status']:<9}{tests['seconds'] / 60:>5.1f}{tests['limit_s']:>9.0f}  "
                     + (counts or tests.get("error", "")))
        lines += [f"    FAILED {f[:200]}" for f in tests["failures"]]
    lines.append(f"total {total_s / 60:.1f} min of the {budget_s / 60:.1f}-minute budget; results in {out}/ "
                 "(gpu-check.txt, gpu-check.json, logs/)")
    return "\n".join(lines)


def failed(records: list[dict], tests: dict | None) -> bool:
    return any(r["status"] != "ok" or any(p["status"] in FAILED for p in r.get("not_measured") or [])
               for r in records) or (tests is not None and tests["status"] != "ok")


def _pairs(text: str, flag: str) -> dict[str, float]:
    limits = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = pair.partition("=")
        if not sep or name.strip() not in LIMITS_S:
            raise SystemExit(f"{flag} {pair!r}: NAME=SECONDS with NAME one of {', '.join(LIMITS_S)}")
        try:
            limits[name.strip()] = float(value)
        except ValueError:
            raise SystemExit(f"{flag} {pair!r}: {value!r} is not a number of seconds") from None
    return limits


def main(argv=None) -> int:
    start = time.monotonic()
    parser = argparse.ArgumentParser(prog="python -m cnnlab.gpucheck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cuda:N; cpu only tests the plumbing")
    parser.add_argument("--studies", default=",".join(studies.STUDIES), help="comma-separated (default: all)")
    parser.add_argument("--limits", default="", help="NAME=SECONDS,... for 'tests' or a study (defaults: "
                        + ", ".join(f"{k} {v}" for k, v in LIMITS_S.items()) + ")")
    parser.add_argument("--budget", type=float, default=BUDGET_S, help=f"seconds for everything (default {BUDGET_S})")
    parser.add_argument("--out", type=Path, help="results (default figures/reference/<gpu-name>/)")
    parser.add_argument("--stores", type=Path, help="the sweeps' stores (default build/gpu-check/stores/<machine>/)")
    parser.add_argument("--fresh", action="store_true", help="delete the stores first: measure every point again")
    parser.add_argument("--skip-tests", action="store_true", help="run the studies only")
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist processes for the unit tests")
    parser.add_argument("--prewarm", action=argparse.BooleanOptionalAction, default=None,
                        help="start each study's process while the one before runs (default: on a GPU only)")
    parser.add_argument("--commit", help="the commit this checkout was copied from, recorded as git_commit")
    for hidden in ("--child", "--result"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args.child, args.device, args.out, args.stores, Path(args.result), args.commit)

    names = [n.strip() for n in args.studies.split(",") if n.strip()]
    unknown = [n for n in names if n not in studies.STUDIES]
    if unknown:
        raise SystemExit(f"--studies: unknown {', '.join(unknown)}; valid: {', '.join(studies.STUDIES)}")
    limits = {**LIMITS_S, **_pairs(args.limits, "--limits")}
    python = sys.executable
    base = {**os.environ, "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(paths.base()), os.environ.get("PYTHONPATH")]))}
    # the studies record the preset they ran (environment.json) and measure a point that failed before again
    env = {**base, "CNNLAB_PRESET": PRESET, "CNNLAB_RETRY": "1"}
    cuda = args.device.startswith("cuda")
    import torch  # already imported with cnnlab; is_available() asks the driver and creates no CUDA context

    record = _environment(python, env) if torch.cuda.is_available() or not cuda else \
        {"cuda_missing_reason": "torch.cuda.is_available() is False", "torch_version": torch.__version__,
         "cuda_version": torch.version.cuda}
    if "error" in record or (cuda and record.get("cuda_missing_reason")):
        build = f"torch {record['torch_version']}, " + (f"built for CUDA {record['cuda_version']}" if
                                                       record.get("cuda_version") else "a CPU-only build") \
            if "torch_version" in record else "torch cannot be imported"
        print(f"gpu-check: no CUDA GPU here ({record.get('error') or record.get('cuda_missing_reason')}; {build}). "
              "It needs one CUDA GPU; --device cpu runs the same steps on the CPU, to test them", file=sys.stderr)
        return 2
    machine = folder_name(record["device_name"])
    if args.out is None:  # a CPU run tests the plumbing: it is no reference machine
        args.out = (paths.figures_root() / "reference" if cuda else paths.base() / "build" / "gpu-check") / machine
    args.out = args.out.resolve()
    if args.out == paths.figures_root().resolve():
        raise SystemExit(f"--out {args.out} is this machine's own results folder (make figures): gpu-check writes a "
                         "reference machine's, figures/reference/<gpu-name>/ by default")
    args.stores = (args.stores or paths.base() / "build" / "gpu-check" / "stores" / machine).resolve()
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prewarm = cuda if args.prewarm is None else args.prewarm
    header = (f"gpu-check: {record['device_name']} ({args.device}), torch {record['torch_version']}, cnnlab "
              f"{record['cnnlab_version']}, commit {(args.commit or record.get('git_commit') or '?')[:10]}, preset "
              f"{PRESET}")
    print(header, flush=True)
    deadline = start + args.budget - END_S
    records, tests, running = [], None, []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        try:
            queue = [Study(names[0], args, python, env, Path(tmp), logs)] if names and prewarm else []
            running = queue[:]
            if not args.skip_tests:
                limit = min(limits["tests"], deadline - time.monotonic())
                print(f"[gpu-check] unit tests (pytest -m gpu, limit {limit:.0f} s) ...", flush=True)
                tests = run_tests(python, {**base, "OMP_NUM_THREADS": "1"}, limit, args.workers, logs, Path(tmp))
            for i, name in enumerate(names):
                study = queue.pop(0) if queue else Study(name, args, python, env, Path(tmp), logs)
                running = [study]
                study.ready(deadline)  # one that died importing is started all the same: its log says why
                left = deadline - time.monotonic()
                limit = min(limits[name], left)
                if left < min(limits[name], 5):  # the budget would cut it so short that it could only time out
                    _stop(study.proc)
                    records.append({"name": name, "folder": study.folder, "status": "skipped", "seconds": 0.0,
                                    "limit_s": 0.0, "claims": None, "error": "the budget was spent"})
                    continue
                print(f"[gpu-check] {study.folder} (limit {limit:.0f} s) ...", flush=True)
                study.go(limit)
                if prewarm and i + 1 < len(names):
                    queue.append(Study(names[i + 1], args, python, env, Path(tmp), logs))
                    running.append(queue[-1])
                records.append(study.wait())
                print(f"[gpu-check] {study.folder}: {records[-1]['status']} in {records[-1]['seconds']:.0f} s"
                      + (f": {records[-1]['error']}" if records[-1].get("error") else ""), flush=True)
        finally:  # Ctrl-C or a crash here: no study keeps running
            for study in running:
                _stop(study.proc)
    total = time.monotonic() - start
    text = summary(header, records, tests, total, args.budget, args.out)
    print("\n" + text)
    (args.out / "gpu-check.txt").write_text(text + "\n")
    (args.out / "gpu-check.json").write_text(json.dumps(
        {"machine": machine, "device": args.device, "preset": PRESET, "budget_s": args.budget,
         "total_s": round(total, 1), "failed": failed(records, tests), "environment": record, "tests": tests,
         "studies": records}, indent=1, default=str) + "\n")
    return 1 if failed(records, tests) else 0


if __name__ == "__main__":
    sys.exit(main())
