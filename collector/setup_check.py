"""What `record` checks before it turns on the eBPF sources, and how to fix each gap.

Cheap checks only (no compilation): `record` runs them at start and, when any fails, skips
CPU sampling and eBPF stacks with one line per problem while GPU recording goes on.
`python -m collector.setup_check` prints the same report.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

FIX = "sudo scripts/setup_bcc.sh"


@dataclass(frozen=True, slots=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what} (fix: {self.fix})"


def is_root() -> bool:
    return os.geteuid() == 0


def check_ebpf() -> list[Problem]:
    """Everything missing for the bcc sources; empty when they can run."""
    problems: list[Problem] = []
    if not is_root():
        problems.append(Problem("not root: eBPF needs root", "run xpu-perf record with sudo"))
    try:
        import bcc  # Debian's python3-bpfcc, linked into the venv by scripts/setup_bcc.sh

        if not hasattr(bcc, "BPF"):
            problems.append(
                Problem(
                    f"the 'bcc' module at {bcc.__file__} is not the BPF Compiler Collection "
                    "(PyPI's 'bcc' is an unrelated package)",
                    f"pip uninstall bcc; {FIX}",
                )
            )
    except ImportError:
        problems.append(Problem("bcc is not importable from this Python", FIX))
    except OSError as exc:  # libbcc.so missing under the Python module
        problems.append(Problem(f"bcc cannot load its library: {exc}", FIX))
    release = os.uname().release
    build = Path("/lib/modules", release, "build")
    kheaders = Path("/sys/kernel/kheaders.tar.xz")
    if not (build / "include").is_dir() and not kheaders.exists():
        problems.append(
            Problem(
                f"no kernel headers for {release} ({build} missing and no "
                "/sys/kernel/kheaders.tar.xz): bcc cannot compile BPF programs",
                FIX,
            )
        )
    tracefs = [Path("/sys/kernel/tracing/events"), Path("/sys/kernel/debug/tracing/events")]
    if is_root() and not any(p.is_dir() for p in tracefs):
        problems.append(
            Problem(
                "tracefs is not mounted: uprobes and tracepoints cannot be attached or removed",
                "mount -t tracefs nodev /sys/kernel/tracing",
            )
        )
    return problems


def main() -> int:
    problems = check_ebpf()
    if not problems:
        print("eBPF: ready (CPU sampling and eBPF launch stacks available)")
        return 0
    for problem in problems:
        print(f"eBPF: {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
