"""One subprocess of a benchmark, measured: wall time, CPU time (user + system) and peak RSS
of the child alone (wait4), with its output.  A step that fails ends the benchmark with its
stderr's tail: a table built on a failed step would measure nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_measured(
    cmd: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    digits: int = 2,
) -> tuple[dict[str, float], str, str]:
    """({"s", "cpu_s", "rss_mb"}, stdout, stderr) of `cmd`; CPU seconds beside wall time
    because on a shared VM the neighbours move wall time, the CPU time much less."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            where = f"{cwd}: " if cwd else ""
            sys.exit(f"{where}{' '.join(cmd)} failed ({code}): {stderr[-2000:]}")
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    row = {
        "s": round(wall, digits),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, digits),
        "rss_mb": round(usage.ru_maxrss / 1024),
    }
    return row, stdout, stderr
