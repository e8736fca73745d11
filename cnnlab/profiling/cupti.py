"""Whether this process has run a CUDA profile, for the timings taken after one.

A CUDA profile attaches CUPTI to the process. Kineto kept it attached after the profile unless
``TEARDOWN_CUPTI=1`` (pytorch#144455), which slowed every later kernel launch; torch's profiler has torn it down
since PR 146604 (not with CUDA graphs), and whether torch 2.11 + CUDA 13 still slows later launches is what the GPU
test ``tests/test_ops.py::test_timing_after_a_cuda_profile_in_the_same_process_is_not_slowed`` (``make gpu-check``)
checks. Until that has passed on a GPU, a study times its points before its first CUDA profile, and every
:func:`cnnlab.profiling.benchmark` row records whether a CUDA profile ran in its process before it
(``after_cuda_profile``), so a timing that was taken after one can be seen.

Every profile cnnlab starts (``ops.profile_ops``, ``memory.memory_over_time``) calls :func:`note_profile`.
"""

from __future__ import annotations

_cuda_profiles = 0


def note_profile(cuda: bool) -> None:
    """Count one profile that recorded CUDA activity (``cuda``: ``ProfilerActivity.CUDA`` was among its
    activities); a CPU-only profile attaches no CUPTI and is not counted."""
    global _cuda_profiles
    if cuda:
        _cuda_profiles += 1


def cuda_profiles() -> int:
    """How many CUDA profiles this process has run so far (0: no timing in it can have been slowed by one)."""
    return _cuda_profiles


__all__ = ["cuda_profiles", "note_profile"]
