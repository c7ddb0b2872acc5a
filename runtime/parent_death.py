"""Children that die with their parent: a parent-death signal set before the real
program starts.

    cmd = tethered([sys.executable, "-m", "cli", "serve", ...])   # what Popen runs

`tethered` prefixes a command with a tiny program (plain python, no site, no project
import, so it runs whatever the path): it asks the kernel for SIGKILL when its parent
dies (Linux `prctl(PR_SET_PDEATHSIG)`, kept across exec), checks that the parent it was
started by is still its parent (one that died in between would never send the signal),
and then execs the command in its place, with its pid. Done after exec rather than in
a `preexec_fn`, which is unsafe in a process with threads (the launcher relays every
child's output on threads).

The kernel sends the signal when the *thread* that forked the child exits, not the
process: spawn tethered children from the main thread or from a thread that outlives
them.
"""
from __future__ import annotations

import os
import sys

# argv: PARENT_PID COMMAND [ARGS...]. Exit 70 (EX_SOFTWARE) if prctl fails, 1 if the
# parent is already gone.
_PROGRAM = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, signal.SIGKILL, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
    sys.exit(70)
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def tethered(cmd: list[str], parent_pid: int | None = None) -> list[str]:
    """`cmd` run so that it gets SIGKILL when this process (or `parent_pid`) dies."""
    if not sys.platform.startswith("linux"):
        return list(cmd)  # no parent-death signal elsewhere: the process group still is killed at stop
    pid = os.getpid() if parent_pid is None else parent_pid
    return [sys.executable, "-I", "-S", "-c", _PROGRAM, str(pid), *cmd]
