"""Crash consistency: SIGKILL a writer at random moments; the target is never partial.

A helper process (a small Python script) imports the workspace package once, then for
each trial forks a worker that alternates ``write_file`` and ``edit_file`` on one file,
acknowledging each completed step on stdout. The test kills the worker with ``SIGKILL``
after a random delay and checks that the file holds one complete version: the last
acknowledged one or the next (the step in flight may have been installed just before the
kill). Leftover temporary siblings are allowed (a crash can leave one); a missing, partial
or mixed file is not, and no other sibling may appear.

``EMELEX_CRASH_TRIALS`` sets the number of trials (default 50; the documented longer run
is ``EMELEX_CRASH_TRIALS=200``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import emelex

TRIALS = int(os.environ.get("EMELEX_CRASH_TRIALS", "50"))
FILLER = "".join(f"filler line {i:06d} " + "x" * 80 + "\n" for i in range(2000))  # ~190 KB

HELPER = r"""
import os, sys
from emelex.tools.workspace import Workspace, edit_file, write_file

FILLER = "".join(f"filler line {i:06d} " + "x" * 80 + "\n" for i in range(2000))

def content(k):
    return f"<{k}>\n" + FILLER + f"<{k}>\n"

def say(line):
    # One write(2) per line: print() may write a line in pieces, and a SIGKILL between
    # them would leave half a line ("ack 1" with no newline) in the pipe.
    os.write(1, (line + "\n").encode())

def work(root):
    ws = Workspace.open(root)
    say(f"ready {os.getpid()}")
    k = 0
    while True:
        if k % 2 == 0:
            write_file(ws, "data.txt", content(k + 1))
        else:
            edit_file(ws, "data.txt", f"<{k}>", f"<{k + 1}>", count=2)
        k += 1
        say(f"ack {k}")

for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        try:
            work(line.strip())
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    say(f"done {status}")
"""


def content(k: int) -> str:
    return f"<{k}>\n" + FILLER + f"<{k}>\n"


def step_seconds(root: Path) -> float:
    """The median time of one write step on this machine now (2 cores shared with other
    work can make a step take 10x longer than idle), so the kills can be spread over a
    few steps instead of landing before the first one completes."""
    from emelex.tools.workspace import Workspace, write_file

    root.mkdir()
    times = []
    with Workspace.open(root) as workspace:
        for k in range(5):
            started = time.perf_counter()
            write_file(workspace, "data.txt", content(k))
            times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def test_sigkill_never_leaves_a_partial_file(tmp_path: Path) -> None:
    # Kill after up to ~4 steps (at least 30 ms), so some kills land mid-way.
    window = max(0.03, 4 * step_seconds(tmp_path / "calibrate"))
    source = str(Path(emelex.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=source)
    helper = subprocess.Popen(
        [sys.executable, "-c", HELPER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert helper.stdin is not None
    assert helper.stdout is not None
    steps = 0
    try:
        for trial in range(TRIALS):
            root = tmp_path / f"t{trial}"
            root.mkdir()
            (root / "data.txt").write_text(content(0))
            helper.stdin.write(f"{root}\n")
            helper.stdin.flush()
            ready, pid = helper.stdout.readline().split()
            assert ready == "ready"
            time.sleep(random.random() * window)
            os.kill(int(pid), signal.SIGKILL)
            acked = 0
            while True:
                line = helper.stdout.readline()
                fields = line.split()
                # Name the line if the protocol ever breaks.
                assert len(fields) == 2, f"trial {trial}: unexpected helper line {line!r}"
                word, number = fields
                if word == "done":
                    status = int(number)
                    break
                acked = int(number)
            assert os.WIFSIGNALED(status)
            assert os.WTERMSIG(status) == signal.SIGKILL
            steps += acked
            text = (root / "data.txt").read_text()
            version = int(text.split("\n", 1)[0].strip("<>"))
            assert text == content(version), f"trial {trial}: partial or mixed content"
            assert version in (acked, acked + 1), (trial, version, acked)
            others = [p.name for p in root.iterdir() if p.name != "data.txt"]
            assert all(".emelex-tmp-" in name for name in others), others
    finally:
        helper.stdin.close()
        helper.wait(timeout=30)
        helper.stdout.close()
    assert steps > 0  # kills landed while work was in progress, not only before it
