"""The analysis as report content: facts about the span, the step and idle-cause tables that
lead the report, and the launch/copy tables after the others.  Findings are rendered by the
layouts themselves (terminal.py, html_page.py): they are prose, not rows."""

from __future__ import annotations

from collector.frame_names import shorten_stack
from exporters.analysis.analyze import Analysis
from exporters.analysis.causes import CAUSES
from exporters.report import units
from exporters.report.sections import Column, Section

CLASS_TEXT = {c.key: c.label for c in CAUSES}


def analysis_facts(analysis: Analysis) -> list[tuple[str, str]]:
    span = analysis.span
    busy = span.busy_ns / (span.dur * max(1, span.devices))
    focus_busy = span.focus_busy_ns / span.focus_ns
    facts = [
        ("analysed span", span.describe()),
        ("GPU busy in span", f"{100 * busy:.1f}% ({units.duration(span.busy_ns)})"),
        ("findings cover", span.describe_focus()),
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
        # The slowest steps, in step order (the summary holds the slowest when it cannot
        # hold every step: these are the slowest of all).
        keep = {s.step for s in sorted(shown, key=lambda s: -s.dur)[:top]}
        shown = [s for s in shown if s.step in keep]
    steps = Section(
        "steps",
        "Steps (wall time, GPU busy by kind, idle)"
        + (f": the {top} slowest of {analysis.steps.count}" if analysis.steps.count > top else ""),
        (
            Column("name", "step"),
            Column("dur", "wall", "ns"),
            Column("compute_ns", "compute", "ns"),
            Column("nccl_ns", "NCCL", "ns"),
            Column("memcpy_ns", "memcpy", "ns"),
            Column("memset_ns", "memset", "ns"),
            Column("idle_ns", "GPU idle", "ns"),
            Column("busy_pct", "busy %", "pct"),
        ),
        [
            {
                "name": s.name,
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
        analysis.steps.source,
    )
    del full_names
    return (idle, steps)


def launch_sections(analysis: Analysis, top: int) -> list[Section]:
    st = analysis.launches
    kernels = Section(
        "launch_latency",
        "Launch latency per kernel (API call start -> GPU start)",
        (
            Column("name", "kernel", "name"),
            Column("launches", "launches", "count"),
            Column("latency_p50_ns", "p50", "ns"),
            Column("latency_p99_ns", "p99", "ns"),
            Column("latency_max_ns", "max", "ns"),
            Column("shorter_than_call", "shorter than call", "count"),
        ),
        [dict(r, name=shorten_stack(str(r["name"]))) for r in st.kernels[:top]],
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
