"""The PyTorch profiler without its banner lines: :func:`quiet_profiler`.

torch 2.13's Kineto prints one line to the process's file descriptor 2 when a ``torch.profiler.profile`` starts
and one when it stops (``USDT:<date> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start``, then
``...:59] profiler_stop``): two red lines per profiled point in every notebook. They are written by C++ to fd 2,
not through Python's ``sys.stderr``, so Python cannot filter them on the way. ``KINETO_LOG_LEVEL=6`` would silence
them, but also every real Kineto error; :func:`quiet_profiler` drops exactly these two lines and passes every other
one on.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# Kineto's start/stop markers (USDT: user-level static tracing probes), nothing else.
PROFILER_BANNER = re.compile(rb"^USDT:.*\]\s*profiler_(start|stop)\s*$")


def drop_banners(data: bytes) -> bytes:
    """``data`` (bytes written to fd 2) without Kineto's ``profiler_start``/``profiler_stop`` lines."""
    return b"".join(line for line in data.splitlines(keepends=True) if not PROFILER_BANNER.match(line))


@contextlib.contextmanager
def quiet_profiler():
    """Enter and exit a ``torch.profiler.profile`` inside this block (``with quiet_profiler(), profile(...)``):
    whatever is written to file descriptor 2 inside it goes to a temporary file, and on leaving (also on an
    exception) every line of it except the profiler's start/stop banners is written to ``sys.stderr``, where
    Jupyter shows it. Lines come out when the block ends, not as they are written; a process forked inside the
    block that outlives it (a persistent DataLoader worker) writes its stderr into the discarded file.
    Without a usable fd 2 (an embedded interpreter) the block runs unfiltered."""
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
            kept = drop_banners(captured.read())
            if kept and sys.stderr is not None:
                sys.stderr.write(kept.decode(errors="replace"))
                _flush(sys.stderr)


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):  # None, closed or not a real stream
        pass


__all__ = ["PROFILER_BANNER", "drop_banners", "quiet_profiler"]
