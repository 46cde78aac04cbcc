"""What a process of the recorded tree is, for its name in the trace: `ROLE [N] (program)`,
the program's own name kept in parentheses (`DataLoader worker 0 (python3)`).

The role comes from what the process runs (the startup hook's report of a multiprocessing
process, collector/recording/python_names.py, or the script of its command line), in this
order:
1. the name the program gave the multiprocessing process (Process(name=...)), as it is;
2. a library whose own workers users look for (LIBRARY_ROLES): the target function, for a
   pool's worker a callable among its arguments (the pool's initializer), or the script
   comes from it;
3. a pool of the standard library (POOL_LOOPS): its workers all run the pool's loop;
4. otherwise the name of the target function (`crunch_numbers (python3)`).
Processes of one parent with one role are numbered in their start order when there are
several (DataLoader starts its workers in worker-id order: the number is the worker id
within one iteration of the loader).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

from collector.recording.python_names import ProcessReport

# (package, role): a process running code of the package is named after it.
LIBRARY_ROLES = (
    ("torch.utils.data", "DataLoader worker"),
    ("torch._inductor", "inductor compile worker"),
)
# target (MODULE:QUALNAME) -> role: the loops the standard library's pools run their workers in.
POOL_LOOPS = {
    "concurrent.futures.process:_process_worker": "process pool worker",
    "multiprocessing.pool:worker": "pool worker",
}
# multiprocessing's own names (Process-1, ForkProcess-2:1, SpawnPoolWorker-3): not the program's.
_DEFAULT_NAME = re.compile(r"\w*(Process|PoolWorker)-\d+(:\d+)*")


def library_role(modules: Iterable[str]) -> str | None:
    """The role of the first LIBRARY_ROLES package one of `modules` belongs to."""
    modules = list(modules)
    for package, role in LIBRARY_ROLES:
        if any(m == package or m.startswith(package + ".") for m in modules):
            return role
    return None


def reported_role(report: ProcessReport) -> tuple[str, bool]:
    """(role, numbered) of a multiprocessing process from its report.  The callables among
    the target's arguments count only for a pool's loop, whose target says nothing of what
    the pool is for (inductor's pool says it through its initializer)."""
    if report.name and not _DEFAULT_NAME.fullmatch(report.name):
        return report.name, False
    module, _, qualname = report.target.partition(":")
    pool = POOL_LOOPS.get(report.target)
    role = library_role([module, *report.callable_modules] if pool else [module])
    return role or pool or qualname or "?", True


def script_role(cmdline: Sequence[str]) -> str | None:
    """The library role of a Python started on a script or module of a LIBRARY_ROLES package
    (the inductor's compile workers: `python .../torch/_inductor/compile_worker/__main__.py`)."""
    if not cmdline or not os.path.basename(cmdline[0]).startswith("python"):
        return None
    args = list(cmdline[1:])
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args):
            return library_role([args[i + 1]])
        if arg.endswith(".py"):
            dotted = arg.removesuffix(".py").replace(os.sep, ".")
            parts = dotted.split(".")
            # Every suffix of the path is a candidate module name (site-packages' depth varies).
            return library_role(".".join(parts[i:]) for i in range(len(parts)))
        if not arg.startswith("-"):
            return None
    return None


def numbered_roles(reports: Mapping[int, ProcessReport]) -> dict[int, str]:
    """pid -> role, with `N` appended where a parent started several of that role."""
    roles = {pid: reported_role(report) for pid, report in reports.items()}
    groups: dict[tuple[int, str], list[ProcessReport]] = {}
    for pid, (role, numbered) in roles.items():
        if numbered:
            groups.setdefault((reports[pid].parent, role), []).append(reports[pid])
    out = {pid: role for pid, (role, _) in roles.items()}
    for (_, role), members in groups.items():
        if len(members) > 1:
            members.sort(key=lambda r: (r.start_ns, r.pid))
            for index, report in enumerate(members):
                out[report.pid] = f"{role} {index}"
    return out


def process_name(program: str, role: str | None) -> str:
    """The name a process is shown under: its role, then its program's own name."""
    if not role or role == program:
        return program
    return f"{role} ({program})" if program else role
