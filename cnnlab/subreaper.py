"""Run a command so that every process it starts ends with it: ``python -m cnnlab.subreaper PARENT_PID COMMAND...``.

:func:`cnnlab.ddp.launch` runs torchrun through this. torchrun starts each worker in a session of its own, so a
torchrun killed outright (SIGKILL: no chance to stop its workers) used to leave them orphaned, re-parented to PID 1,
where nothing could find them: they then waited minutes in ``TCPStore::connect`` for the dead agent's store. Here
the command runs below a Linux child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``, what tini and systemd use): an
orphan anywhere below it is re-parented to it instead, so when the command exits, however it exits, whatever it
left running is still below this process, which kills it and waits for it before exiting itself.

This process gets SIGTERM when PARENT_PID (the launcher) dies, and passes it on to the command (torchrun then stops
its workers; whatever is left is killed as above). The command gets SIGTERM if this process is itself killed. It
exits as the command did: with its exit code, or killed by the same signal. Elsewhere than Linux it only runs the
command in its place.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def main(argv: list[str]) -> int:
    parent, command = int(argv[0]), argv[1:]
    if not sys.platform.startswith("linux"):
        os.execvp(command[0], command)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the launcher died before the request took effect
        return 1
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    # This process is single-threaded, so preexec_fn is safe here (it is not in a Jupyter kernel, the launcher).
    child = subprocess.Popen(command, preexec_fn=lambda: libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: child.send_signal(signal.SIGTERM))
    code = child.wait()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)  # nothing may stop the clean-up half way
    kill_everything_below()
    if code < 0:  # killed by a signal: end the same way, so that the launcher reads the same exit status
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code if code >= 0 else 128 - code


def kill_everything_below() -> None:
    """SIGKILL every process below this one and reap them, until none is left. Orphans of the killed ones are
    re-parented here (the subreaper), so a later round finds them, as it finds one forked while a round killed."""
    me = os.getpid()
    while True:
        for pid in descendants(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap what has ended
                pass
        except ChildProcessError:  # no child left
            return
        time.sleep(0.02)


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
