"""The analysis as report content: facts about the span, the step and idle-cause tables that
lead the report, and the launch/copy tables after the others.  Findings are rendered by the
layouts themselves (terminal.py, html_page.py): they are prose, not rows."""

from __future__ import annotations

from collections import Counter

from collector.frame_names import kernel_labels
from exporters.analysis.analyze import Analysis
from exporters.analysis.causes import CAUSES
from exporters.report import units
from exporters.report.sections import Column, Section

CLASS_TEXT = {c.key: c.label for c in CAUSES}


def analysis_facts(analysis: Analysis, focus_steps: str | None = None) -> list[tuple[str, str]]:
    """The analysis's facts; `focus_steps`: the focus's steps in words (exporters/report/
    step_words.py), where the findings cover steps."""
    span = analysis.span
    busy = span.busy_ns / (span.dur * max(1, span.devices))
    focus_busy = span.focus_busy_ns / span.focus_ns
    cover = (
        f"{focus_steps}, the steady state (set-up and the warm-up step left out): "
        f"{span.focus_dur / 1e6:.1f} ms of {span.describe()}"
        if focus_steps and span.focus_kind == "steps"
        else span.describe_focus()
    )
    facts = [
        ("analysed span", span.describe()),
        ("GPU busy in span", f"{100 * busy:.1f}% ({units.duration(span.busy_ns)})"),
        ("findings cover", cover),
        ("GPU busy there", f"{100 * focus_busy:.1f}% ({units.duration(span.focus_busy_ns)})"),
    ]
    steps = analysis.steps
    if steps.steps:
        facts.append(
            (
                "steps",
                f"{steps.count}, median {units.duration(steps.median_ns)}, "
                f"p90 {units.duration(steps.p90_ns)}, max {units.duration(steps.max_ns)} "
                f"({steps.describe_source()})",
            )
        )
    else:
        facts.append(
            ("steps", "none found (no ProfilerStep/--steps slices, no repeating launches)")
        )
    return facts


def analysis_summary(analysis: Analysis, focus_steps: str | None = None) -> list[tuple[str, str]]:
    """The one-screen header's analysis lines: the one span the findings cover and the GPU
    busy there, and the steps; `focus_steps`: the focus's steps in words (exporters/report/
    step_words.py)."""
    span = analysis.span
    if span.focus_kind == "steps":
        what = (
            f"{focus_steps or f'steps 2-{span.steps}'}, the steady state (set-up and the "
            "first step left out; --span all: the whole trace)"
        )
    elif span.kind == "all":
        what = "the whole trace"
    else:
        what = "first GPU op to the end of the last (set-up before it left out)"
    if span.regions > 1:
        what += f", inside {span.regions} capture windows"
    busy = span.focus_busy_ns / max(1, span.focus_ns)
    devices = f" of {span.devices} GPUs" if span.devices > 1 else ""
    steps = analysis.steps
    return [
        ("analysed", f"{units.duration(span.focus_dur)}: {what}"),
        ("GPU busy", f"{100 * busy:.1f}%{devices} ({units.duration(span.focus_busy_ns)})"),
        (
            "steps",
            f"{steps.count}, median {units.duration(steps.median_ns)}, "
            f"max {units.duration(steps.max_ns)} ({steps.describe_source()})"
            if steps.steps
            else "none found (no ProfilerStep/--steps slices, no repeating launches)",
        ),
    ]


def lead_sections(analysis: Analysis, top: int, full_names: bool) -> tuple[Section, ...]:
    span_ns = analysis.span.focus_ns
    idle_rows = [
        {
            "cause": CLASS_TEXT[c],
            "idle_ns": ns,
            "pct": 100 * ns / span_ns,
            "gaps": analysis.idle.gaps_by_class.get(c, 0),
        }
        for c, ns in sorted(analysis.idle.by_class.items(), key=lambda kv: -kv[1])
        if ns > 0
    ]
    idle = Section(
        "idle_causes",
        "GPU idle in the steady state, by what the launching thread did"
        if analysis.span.focus_kind == "steps"
        else "GPU idle in the analysed span, by what the launching thread did",
        (
            Column("cause", "cause"),
            Column("idle_ns", "idle", "ns"),
            Column("pct", "% of span", "pct"),
            Column("gaps", "gaps (mostly this)", "count"),
        ),
        idle_rows,
        "no GPU idle gaps in the analysed span",
        f"{analysis.idle.gaps} gaps, {units.duration(analysis.idle.idle_ns)} idle in all",
    )
    shown = analysis.steps.steps
    if len(shown) > top:
        # The slowest steps, slowest first (the summary holds the slowest when it cannot
        # hold every step: these are the slowest of all).
        shown = sorted(shown, key=lambda s: (-s.dur, s.step))[:top]
    names = Counter(s.name for s in analysis.steps.steps)
    # A step that ended before the findings' span began (the warm-up) is listed among the
    # slowest as it is, but said to be outside what the findings cover.
    before = analysis.span.focus_ts if analysis.span.focus_kind == "steps" else None
    warm = {s.step for s in shown if before is not None and s.ts + s.dur <= before}
    steps = Section(
        "steps",
        "Steps (wall time, GPU busy by kind, idle)"
        + (f": the {top} slowest of {analysis.steps.count}" if analysis.steps.count > top else ""),
        (
            Column("name", "step"),
            Column("dur", "wall", "ns"),
            Column("compute_ns", "compute", "ns"),
            Column("nccl_ns", "NCCL", "ns"),
            Column("memcpy_ns", "memcpy", "ns", optional=2),
            Column("memset_ns", "memset", "ns", optional=3),
            Column("idle_ns", "GPU idle", "ns"),
            Column("busy_pct", "busy %", "pct"),
        ),
        [
            {
                # Steps marked by slices of one name (a repeating range) read apart by number.
                "name": (s.name if names[s.name] == 1 else f"step {s.step}: {s.name}")
                + (" (warm-up)" if s.step in warm else ""),
                "dur": s.dur,
                "compute_ns": s.compute_ns,
                "nccl_ns": s.nccl_ns,
                "memcpy_ns": s.memcpy_ns,
                "memset_ns": s.memset_ns,
                "idle_ns": s.idle_ns,
                "busy_pct": 100 * s.busy_ns / max(1, s.dur * max(1, s.devices)),
            }
            for s in shown
        ],
        "no steps: mark them (torch.profiler's ProfilerStep#N, an NVTX range and --steps "
        "NAME) or run more than two iterations",
        analysis.steps.source
        + ("; (warm-up): before the steps the findings cover" if warm else ""),
    )
    del full_names
    return (idle, steps)


def _kernel_rows(rows: list[dict]) -> list[dict]:
    labels = kernel_labels([str(r["name"]) for r in rows])
    return [dict(r, name=labels[str(r["name"])], name_full=r["name"]) for r in rows]


def launch_sections(analysis: Analysis, top: int) -> list[Section]:
    st = analysis.launches
    kernels = Section(
        "launch_latency",
        "Launch latency per kernel (API call start -> GPU start)",
        (
            Column("name", "kernel", "kernel"),
            Column("launches", "launches", "count"),
            Column("latency_p50_ns", "p50", "ns"),
            Column("latency_p99_ns", "p99", "ns", optional=2),
            Column("latency_max_ns", "max", "ns", optional=3),
            Column("shorter_than_call", "shorter than call", "count", optional=1),
        ),
        _kernel_rows(st.kernels[:top]),
        "no kernels linked to their launch call",
        f"{st.shorter_than_call} of {st.launches} kernels ran shorter than their launch call; "
        f"latency p50 {units.duration(st.latency_p50_ns)}, p99 {units.duration(st.latency_p99_ns)}",
    )
    queues = Section(
        "stream_queues",
        "Queue depth per stream (ops launched, not finished, at each launch)",
        (
            Column("device", "device"),
            Column("stream", "stream"),
            Column("launches", "launches", "count"),
            Column("max_depth", "max", "count"),
            Column("mean_depth_at_launch", "mean", "count"),
        ),
        st.queues[:top],
        "no launches",
        "a depth near 0: the GPU runs each op as soon as it is launched (the CPU leads by nothing)",
    )
    copies = Section(
        "copies",
        "Copies by direction and host memory (bandwidth per copy)",
        (
            Column("direction", "direction"),
            Column("host_memory", "host memory"),
            Column("copies", "copies", "count"),
            Column("bytes", "bytes", "bytes"),
            Column("total_ns", "time", "ns"),
            Column("min_gb_per_s", "min", "gbps"),
            Column("p50_gb_per_s", "p50", "gbps"),
            Column("max_gb_per_s", "max", "gbps"),
        ),
        st.copies,
        "no memory copies in the analysed span",
    )
    overlap = Section(
        "kernel_overlap",
        "Compute kernels overlapping communication, copies and sets",
        (
            Column("device", "device"),
            Column("kind", "overlaps"),
            Column("overlap_ns", "time", "ns"),
        ),
        st.overlap,
        "no compute kernel overlaps NCCL kernels, copies or sets",
    )
    return [kernels, queues, copies, overlap]
