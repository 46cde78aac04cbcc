"""The report's content, gathered from a trace by SQL alone (the .sql files beside this).

`collect()` returns plain data; terminal.py and html.py only lay it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collector.frame_names import kernel_labels, short_name, shorten_stack
from exporters.analysis.analyze import Analysis, analyze
from exporters.analysis.gpu_metrics import source_facts
from exporters.analysis.tables import DEFAULT_SCOPE, Scope
from exporters.folded import frames
from exporters.folded.folded import FoldedError, FoldedStacks, fold
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace
from exporters.perfetto.engine.views import WindowError, load_views
from exporters.report import top_functions, units
from exporters.report.analysis_sections import (
    analysis_facts,
    analysis_summary,
    launch_sections,
    lead_sections,
)
from exporters.report.gpu_busy import StreamIslands, stream_islands, stream_rows
from exporters.report.gpu_sections import gpu_sections
from exporters.report.sections import Column, Section
from exporters.report.step_words import steps_in

DEFAULT_TOP = 15
DEFAULT_BINS = 120


@dataclass(frozen=True)
class StreamBusy:
    device: str
    stream: str  # '*' for the whole device
    busy_ns: list[int]  # per bin


@dataclass(frozen=True)
class Timeline:
    t0: int  # trace start (ns, trace clock)
    dur_ns: int  # trace duration; bins * bin_ns >= dur_ns (the last bin ends early)
    bin_ns: int
    bins: int
    rows: list[StreamBusy]


@dataclass(frozen=True)
class Report:
    trace: str
    facts: list[tuple[str, str]]  # header lines: what the trace is
    sections: list[Section]
    timeline: Timeline
    flame: FoldedStacks | None  # merge-mode stacks in ns (None: nothing to draw)
    flame_note: str = ""
    analysis: Analysis | None = None  # findings, steps, idle by cause (first in the report)
    lead_sections: tuple[Section, ...] = ()  # steps and idle by cause, before the rest
    # The header of the one-screen report: what the trace holds, one span, one busy figure.
    summary: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Spec:
    key: str
    title: str
    module: str  # its SQL module (sql_modules.py), "" where Python makes the rows
    columns: tuple[Column, ...]
    empty: str
    note: str = ""


_SPECS = (
    _Spec(
        "kernels",
        "Top GPU kernels by total time",
        "report.kernels",
        (
            Column("name", "kernel", "kernel"),
            Column("count", "count", "count"),
            Column("total_ns", "total", "ns"),
            Column("pct", "% kernels", "pct"),
            Column("mean_ns", "mean", "ns", optional=1),
            Column("p50_ns", "p50", "ns", optional=3),
            Column("p99_ns", "p99", "ns", optional=2),
            Column("max_ns", "max", "ns", optional=4),
        ),
        "no GPU kernels in this trace",
        "p50/p99: nearest-rank percentiles of the kernel's durations",
    ),
    _Spec(
        "gpu_streams",
        "GPU busy vs idle over the analysed span (per device '*' and per stream)",
        "",  # gpu_busy.py
        (
            Column("device", "device"),
            Column("stream", "stream"),
            Column("busy_ns", "busy", "ns"),
            Column("idle_ns", "idle", "ns"),
            Column("busy_pct", "busy %", "pct"),
            Column("ops", "ops", "count", optional=1),
        ),
        "no GPU kernels, copies or sets in this trace",
        "busy = union of kernel/memcpy/memset intervals (overlaps counted once)",
    ),
    _Spec(
        "memcpy",
        "Memory copies by direction",
        "report.memcpy",
        (
            Column("direction", "direction"),
            Column("count", "count", "count"),
            Column("bytes", "bytes", "bytes"),
            Column("total_ns", "time", "ns"),
            Column("gb_per_s", "bandwidth", "gbps"),
        ),
        "no memory copies in this trace",
    ),
    _Spec(
        "cuda_api",
        "CUDA API calls by CPU time",
        "report.cuda_api",
        (
            Column("name", "API call"),
            Column("calls", "calls", "count"),
            Column("total_ns", "total", "ns"),
            Column("pct", "% API", "pct"),
            Column("mean_ns", "mean", "ns", optional=1),
            Column("max_ns", "max", "ns", optional=2),
        ),
        "no CUDA API calls in this trace",
    ),
    _Spec(
        "cpu_stacks",
        "Top CPU stacks (timer samples)",
        "report.cpu_stacks",
        (
            Column("stack", "stack (thread;...;leaf)", "stack"),
            Column("samples", "samples", "count"),
            Column("pct", "% samples", "pct"),
        ),
        "no CPU samples in this trace (recorded with --no-cpu, or converted)",
    ),
    _Spec(
        "launch_stacks",
        "Where GPU time is launched from",
        "report.launch_stacks",
        (
            Column("launched_from", "launched from", "name"),
            Column("api", "API call", optional=1),
            Column("stack", "CPU context (thread;...;caller)", "stack"),
            Column("gpu_ns", "GPU time", "ns"),
            Column("pct", "% GPU", "pct"),
            Column("ops", "GPU ops", "count", optional=2),
        ),
        "no GPU ops linked to an API call in this trace",
    ),
    _Spec(
        "counters",
        "Counters: drops, matches, totals",
        "report.counters",
        (
            Column("source", "source"),
            Column("counter", "counter"),
            Column("value", "value", "count"),
        ),
        "no counters in this trace (not written by xpu-perf?)",
        "trace_processor rows appear only for import errors or data losses",
    ),
)


def _load_tables(trace: Trace, window: int | None, scope: Scope = DEFAULT_SCOPE) -> Analysis:
    try:
        load_views(trace, window, gpu_op_table=True)
    except WindowError as exc:
        raise FoldedError(str(exc)) from None
    analysis = analyze(trace, scope, window)
    sql_modules.load(trace, "folded.stacks")
    sql_modules.load(trace, "report.gpu_busy")
    return analysis


def launched_from(stack: str) -> str:
    """The code that launched, from a launch context `thread;outer;...;inner`
    (exporters/folded/frames.py)."""
    return frames.launched_from(stack.split(";")[1:])  # [0] is the thread


def collect(
    trace: Trace,
    trace_name: str | Path,
    top: int = DEFAULT_TOP,
    bins: int = DEFAULT_BINS,
    full_names: bool = False,
    window: int | None = None,
    scope: Scope = DEFAULT_SCOPE,
    all_frames: bool = False,
    stacks: bool = False,
    flame_span: str = "steps",
) -> Report:
    """The report of a trace, or of its capture window `window` (1-based, per process):
    the analysis (findings, steps, idle by cause) first, then the tables.  CPU time by
    function; whole CPU stacks too with `stacks`.  Frames read as
    exporters/folded/frames.py shows them unless all_frames."""
    analysis = _load_tables(trace, window, scope)
    busy = stream_islands(trace)
    launch_stacks = trace.scalar("select count(*) from xpu_launch_stack")
    sections: list[Section] = []
    for spec in _SPECS:
        if spec.key == "cpu_stacks":
            sections.extend(_top_functions(trace, top, full_names, all_frames, scope))
            if not stacks:
                continue
        note = spec.note
        if spec.key == "launch_stacks":
            # Recorded traces carry launch stacks; converted Kineto traces only the CPU
            # slices (python functions, aten ops) around each API call.
            note = (
                "context = the launch stack recorded at each API call"
                if launch_stacks
                else "context = the CPU slices enclosing each API call (no launch stacks)"
            )
        if spec.key == "gpu_streams":
            rows = stream_rows(trace, busy)
        else:
            rows = sql_modules.rows(trace, spec.module, top=top)
        for row in rows:
            if isinstance(row.get("stack"), str):
                row["stack"] = frames.filter_folded(row["stack"], row.get("modules"), all_frames)
        if spec.key == "cpu_stacks":
            rows = _merged_stacks(rows, top)
        for column in spec.columns:
            if column.kind == "kernel":
                _label_kernels(rows, column.key, full_names)
        if not full_names:
            for row in rows:
                for column in spec.columns:
                    if column.kind == "stack" and isinstance(row.get(column.key), str):
                        row[column.key] = shorten_stack(row[column.key])
                    elif column.kind == "name" and isinstance(row.get(column.key), str):
                        # The short name in the cell, the full one on hover (HTML title).
                        row[column.key + "_full"] = row[column.key]
                        row[column.key] = short_name(row[column.key])
        if spec.key == "launch_stacks":
            for row in rows:
                row["launched_from"] = launched_from(row["stack"] or "")
        sections.append(Section(spec.key, spec.title, spec.columns, rows, spec.empty, note))
    span = analysis.span
    # The flamegraph covers what the findings cover (`flame_span` steps, the default), the
    # active span, or (the analysis over the whole trace) everything.
    between: tuple[int, int] | None = None
    if not scope.span_all and flame_span == "active":
        between = (span.ts, span.end_ts + 1)
    elif not scope.span_all:
        between = (span.focus_ts, span.focus_ts + span.focus_dur + 1)
    flame, flame_note = _flame_stacks(trace, full_names, window, all_frames, between)
    steps = (
        steps_in(trace, span.focus_ts, span.focus_ts + span.focus_dur)
        if span.focus_kind == "steps"
        else None
    )
    if between is not None:
        what = (
            "the active span, first GPU op to the end of the last"
            if flame_span == "active"
            else _focus_text(analysis, steps)
        )
        flame_note += f"; over {what} (--span all: the whole trace)"
    facts = _facts(trace, window, _api_totals(sections))
    return Report(
        trace=str(trace_name),
        facts=facts + analysis_facts(analysis, steps) + source_facts(trace),
        summary=_summary(facts) + analysis_summary(analysis, steps),
        sections=sections + launch_sections(analysis, top) + gpu_sections(trace, analysis, top),
        timeline=_timeline(trace, busy, bins),
        flame=flame,
        flame_note=flame_note,
        analysis=analysis,
        lead_sections=lead_sections(analysis, top, full_names),
    )


def _label_kernels(rows: list[dict[str, Any]], key: str, full_names: bool) -> None:
    """Kernel names that tell kernels apart (their functor or lambda kept) in the cells,
    the full name beside them (HTML title)."""
    names = [str(r[key]) for r in rows if isinstance(r.get(key), str)]
    labels = {} if full_names else kernel_labels(names)
    for row in rows:
        if isinstance(row.get(key), str):
            row[key + "_full"] = row[key]
            row[key] = labels.get(row[key], row[key])


def _top_functions(
    trace: Trace, top: int, full_names: bool, all_frames: bool, scope: Scope
) -> tuple[Section, Section]:
    ranked = top_functions.top_functions(trace, scope.span_all, top, full_names, all_frames)
    empty = "no CPU samples in this trace (recorded with --no-cpu, or converted)"
    function, thread = Column("function", "function", "name"), Column("thread", "thread")
    self_pct, total_pct = Column("self_pct", "self %", "pct"), Column("total_pct", "total %", "pct")
    return (
        Section(
            "top_functions_total",
            top_functions.TOTAL_TITLE,
            (function, thread, total_pct, self_pct),
            ranked.by_total,
            empty,
            f"over {ranked.scope}; total: samples with the function anywhere on the stack "
            "(once per sample)",
        ),
        Section(
            "top_functions",
            top_functions.TITLE,
            (
                function,
                thread,
                self_pct,
                total_pct,
                Column("self_samples", "self samples", "count"),
            ),
            ranked.by_self,
            empty,
            f"over {ranked.scope}; self: samples in the function itself (a Python "
            "function's with the interpreter's work under it; --all-frames: each frame); "
            "whole stacks with --stacks",
        ),
    )


def _merged_stacks(rows: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """CPU stack rows added up where filtering made them equal, heaviest first."""
    samples: dict[str, int] = {}
    for row in rows:
        samples[row["stack"]] = samples.get(row["stack"], 0) + int(row["samples"])
    total = sum(samples.values()) or 1
    ranked = sorted(samples.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [{"stack": k, "samples": n, "pct": 100.0 * n / total} for k, n in ranked]


def _focus_text(analysis: Analysis, steps: str | None) -> str:
    span = analysis.span
    if span.focus_kind == "steps":
        return f"{steps or f'steps 2-{span.steps}'}, the steady state the findings cover"
    return "the active span, first GPU op to the end of the last"


def _flame_stacks(
    trace: Trace,
    full_names: bool,
    window: int | None,
    all_frames: bool = False,
    between: tuple[int, int] | None = None,
) -> tuple[FoldedStacks | None, str]:
    try:
        stacks = fold(
            trace,
            "merge",
            "ns",
            full_names=full_names,
            window=window,
            all_frames=all_frames,
            between=between,
        )
        note = "GPU ops weighted by GPU time, CPU samples by sampled CPU time"
    except FoldedError as exc:
        # CPU samples without a recorded frequency cannot be put in ns: GPU side only.
        stacks = fold(
            trace,
            "gpu",
            "ns",
            full_names=full_names,
            window=window,
            all_frames=all_frames,
            between=between,
        )
        note = f"GPU stacks only: {exc}"
    if not stacks.lines:
        return None, "no GPU ops and no CPU samples: nothing to draw"
    return stacks, note


def _timeline(trace: Trace, busy: StreamIslands, bins: int) -> Timeline:
    """Busy time per bin of `bins` equal bins over the report's window, per device (stream
    '*') and per stream, devices by name and streams by number."""
    from exporters.report.timeline_bins import busy_per_bin, stream_number

    bounds = trace.query("select start_ts, dur from xpu_report_window")[0]
    t0, dur = int(bounds["start_ts"]), int(bounds["dur"])
    bin_ns = max(1, -(-dur // bins))
    found = busy.found
    per_bin = busy_per_bin(found.group, found.ts, found.end_ts, len(busy.device), t0, bin_ns, bins)
    rows = [
        StreamBusy(name, stream, per_bin[k].tolist())
        for k, (name, stream) in enumerate(zip(busy.device_name, busy.stream, strict=True))
    ]
    rows.sort(key=lambda r: (r.device, r.stream != "*", stream_number(r.stream), r.stream))
    return Timeline(t0=t0, dur_ns=dur, bin_ns=bin_ns, bins=bins, rows=rows)


def _api_totals(sections: list[Section]) -> tuple[int, int]:
    """CUDA API calls and their time, all of them: the cuda_api section's rows carry them
    (a second scan of the calls for the facts would cost another pass over them)."""
    rows = next(s.rows for s in sections if s.key == "cuda_api")
    return (int(rows[0]["all_calls"]), int(rows[0]["all_ns"])) if rows else (0, 0)


def _facts(trace: Trace, window: int | None, api_totals: tuple[int, int]) -> list[tuple[str, str]]:
    meta = {
        r["key"]: r["value"]
        for r in trace.query(
            "select key, coalesce(string_value, int_value, real_value) as value from xpu_metadata"
        )
    }
    dur = trace.scalar("select dur from xpu_report_window")
    # The GPU ops alone: one GROUP BY over the union of ops and API calls sorted all their
    # rows; the calls' totals come with their section.
    counts = {
        r["category"]: (r["n"], r["total"])
        for r in trace.query(
            "select category, count(*) as n, sum(dur) as total from xpu_gpu_op group by category"
        )
    }
    counts["cuda_api"] = api_totals
    devices = [r["name"] for r in trace.query(_DEVICES_SQL)]
    samples = trace.scalar("select count(*) from xpu_cpu_sample")
    launches = trace.scalar("select count(*) from xpu_launch_stack")
    facts = [
        ("written by", f"{meta.get('tool', '?')} {meta.get('tool_version', '')}".strip()),
        ("command line", str(meta.get("command_line", "?"))),
        (
            "trace duration",
            units.duration(trace.scalar("select end_ts - start_ts from trace_bounds")),
        )
        if window is None
        else (f"capture window {window}", _window_fact(trace, window, dur)),
        ("GPUs", ", ".join(devices) or "none"),
    ]
    for category, label in (
        ("kernel", "kernels"),
        ("memcpy", "memory copies"),
        ("memset", "memory sets"),
        ("cuda_api", "CUDA API calls"),
    ):
        n, total = counts.get(category, (0, 0))
        facts.append((label, f"{units.count(n)} ({units.duration(total or 0)})"))
    hz = meta.get("cpu_sample_frequency_hz")
    facts.append(
        ("CPU samples", f"{units.count(samples)}" + (f" at {units.count(hz)} Hz" if hz else ""))
    )
    facts.append(("launch stacks", units.count(launches)))
    return facts


def _summary(facts: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The one-screen header's first lines, from the facts: the trace's length and GPUs, and
    what it holds in one line."""
    got = dict(facts)
    key, length = next(
        ((k, v) for k, v in facts if k == "trace duration" or k.startswith("capture window")),
        ("trace", ""),
    )
    holds = ", ".join(
        f"{got[k].split(' ')[0]} {k}"  # the count: `311 (1.35 ms)`, `35 at 1,000 Hz`
        for k in ("kernels", "memory copies", "memory sets", "CUDA API calls", "CPU samples")
        if got.get(k, "0").split(" ")[0] not in ("0", "")
    )
    return [
        ("trace" if key == "trace duration" else key, f"{length} on {got.get('GPUs', 'no GPU')}"),
        ("holds", holds or "no GPU ops, API calls or CPU samples"),
    ]


def _window_fact(trace: Trace, window: int, dur: int) -> str:
    """What opened window N in how many processes, and the span the report covers."""
    rows = trace.query(
        "select reason, count(*) as n from xpu_window where window_no = "
        f"{int(window)} group by reason order by reason"
    )
    most = trace.scalar("select max(window_no) from xpu_window")
    opened = ", ".join(
        f"{r['reason']} in {r['n']} process{'es' if r['n'] > 1 else ''}" for r in rows
    )
    return f"{units.duration(dur)} ({opened}; {most} per process at most)"


# A device is the parent track of the tracks GPU ops are on.
_DEVICES_SQL = """
select distinct d.name from (
  select distinct track_id from xpu_gpu_op
  where category in ('kernel', 'memcpy', 'memset', 'sync')
) s
join track t on s.track_id = t.id
join track d on d.id = t.parent_id
order by d.name
"""
