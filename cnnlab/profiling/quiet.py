"""The PyTorch profiler without its banner lines: :func:`quiet_profiler`.

torch 2.13's Kineto prints one line to the process's file descriptor 2 when a ``torch.profiler.profile`` starts
and one when it stops (``USDT:<date> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``, then
``...:59] profiler_stop``): two red lines per profiled point in every notebook. They are written by C++ to fd 2,
not through Python's ``sys.stderr``, so Python cannot filter them on the way. ``KINETO_LOG_LEVEL=6`` would silence
them, but also every real Kineto error; :func:`quiet_profiler` drops exactly these two lines (and, on a machine
without a usable GPU, Kineto's ``gpuGetDeviceCount failed`` line) and passes every other one on.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# Kineto's start/stop markers (USDT: user-level static tracing probes), nothing else.
PROFILER_BANNER = re.compile(rb"^USDT:.*\]\s*profiler_(start|stop)\s*$")
# Kineto of a CUDA build of torch, on a machine without a usable GPU (PyPI's torch on a laptop, Colab's CPU
# runtime), asks CUDA for the devices when the first profile starts and logs the failure, e.g.
# ``ERROR:2026-11-26 10:00:00 7239:7239 DeviceProperties.cpp:47] gpuGetDeviceCount failed with code 35`` (35: no
# driver). Dropped only where torch.cuda.is_available() is False: there is no GPU to profile, and cnnlab says so
# (``cuda_missing_reason``); where CUDA works, the line is a real problem and shows.
NO_GPU_LINE = re.compile(rb"^\w+:.*\]\s*gpuGetDeviceCount failed with code \d+\s*$")


# c10's CPU allocator, when a block allocated before a profile with profile_memory started is freed inside it: the
# profiler cannot record that free (it never saw the size). Dropped only where the caller knows the free is not
# counted (:func:`cnnlab.profiling.memory.memory_over_time`'s uncounted ``before`` step).
UNKNOWN_FREE = re.compile(rb"^\[W.*\] Memory block of unknown size was allocated before the profiling started")


# torch 2.11's ``torch.profiler.profile`` warns "Profiler clears events at the end of each cycle ... set
# acc_events=True" whenever a profile starts without ``acc_events=True`` (torch 2.13 only when a second cycle starts,
# which is what the warning is about): under the first profiling cell of every notebook on Colab's torch. cnnlab
# records one cycle per profile, so keeping events across cycles changes nothing; every profile it starts takes these.
ONE_CYCLE = {"acc_events": True}


def drop_banners(data: bytes, *, no_gpu: bool = False, also: tuple[re.Pattern, ...] = ()) -> bytes:
    """``data`` (bytes written to fd 2) without Kineto's ``profiler_start``/``profiler_stop`` lines, without its
    ``gpuGetDeviceCount failed`` line when ``no_gpu`` (CUDA is not available to this process), and without lines
    matching a pattern in ``also``."""
    def dropped(line: bytes) -> bool:
        return bool(PROFILER_BANNER.match(line) or (no_gpu and NO_GPU_LINE.match(line))
                    or any(p.match(line) for p in also))

    return b"".join(line for line in data.splitlines(keepends=True) if not dropped(line))


def _no_gpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@contextlib.contextmanager
def quiet_profiler(also: tuple[re.Pattern, ...] = ()):
    """Enter and exit a ``torch.profiler.profile`` inside this block (``with quiet_profiler(), profile(...)``):
    whatever is written to file descriptor 2 inside it goes to a temporary file, and on leaving (also on an
    exception) every line of it except the profiler's start/stop banners is written to ``sys.stderr``, where
    Jupyter shows it. Lines come out when the block ends, not as they are written; a process forked inside the
    block that outlives it (a persistent DataLoader worker) writes its stderr into the discarded file.
    Without a usable fd 2 (an embedded interpreter) the block runs unfiltered. ``also``: more patterns of lines to
    drop, for a caller that knows them harmless inside its block."""
    _flush(sys.stderr)
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            _flush(sys.stderr)  # in a plain process sys.stderr is fd 2: its buffered text belongs to the block
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = drop_banners(captured.read(), no_gpu=_no_gpu(), also=also)
            if kept and sys.stderr is not None:
                sys.stderr.write(kept.decode(errors="replace"))
                _flush(sys.stderr)


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):  # None, closed or not a real stream
        pass


__all__ = ["NO_GPU_LINE", "ONE_CYCLE", "PROFILER_BANNER", "UNKNOWN_FREE", "drop_banners", "quiet_profiler"]
