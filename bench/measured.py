"""One subprocess of a benchmark, measured: wall time, CPU time (user + system) and peak RSS
of the child alone (wait4), with its output.  A step that fails ends the benchmark with its
stderr's tail: a table built on a failed step would measure nothing.  The one exception a
caller names (`accept`): an outcome that is the measurement, such as the engine's limit
on a trace too big for it, kept in the row as its exit code and last line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_measured(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    digits: int = 2,
    accept: tuple[int, str] | None = None,
) -> tuple[dict[str, Any], str, str]:
    """({"s", "cpu_s", "rss_mb"}, stdout, stderr) of `cmd`; CPU seconds beside wall time
    because on a shared VM the neighbours move wall time, the CPU time much less.  With
    `accept` = (exit code, text): a run that exits so with that text in its stderr is kept,
    its row with "exit" and "error" (the stderr's last line) too."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        code = os.waitstatus_to_exitcode(status)
        accepted = accept is not None and code == accept[0] and accept[1] in stderr
        if code != 0 and not accepted:
            where = f"{cwd}: " if cwd else ""
            sys.exit(f"{where}{' '.join(cmd)} failed ({code}): {stderr[-2000:]}")
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    row: dict[str, Any] = {
        "s": round(wall, digits),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, digits),
        "rss_mb": round(usage.ru_maxrss / 1024),
    }
    if code != 0:
        row |= {"exit": code, "error": stderr.strip().splitlines()[-1][:300]}
    return row, stdout, stderr
