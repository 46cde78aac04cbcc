"""`report --annotate OUT`: a copy of the trace with the analysis on the timeline, a track of
steps and a track per device of the classified GPU idle gaps, so the Perfetto UI shows them
beside the GPU streams.  The copy is written by the merge of the one input (the encoder's
packet pass-through, in the trace's BOOTTIME domain, which is trace_processor's timeline)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporters.analysis import causes
from exporters.perfetto.trace_processor import Trace

STEP_LANE = "steps"
GAP_LANE = "GPU idle: "  # + the device's track name
CATEGORY = "xpu_perf_analysis"


@dataclass(frozen=True)
class Mark:
    lane: str
    ts: int
    dur: int
    name: str
    args: dict[str, int | str]


def annotations(trace: Trace) -> list[Mark]:
    """The steps and gaps of an analysed trace (analysis tables loaded) as marks."""
    marks = [
        Mark(STEP_LANE, int(r["ts"]), int(r["dur"]), str(r["name"]), {"source": str(r["source"])})
        for r in trace.query("select ts, dur, name, source from xpu_step order by ts")
    ]
    parts = tuple(causes.COLUMNS.values())
    for r in trace.query(
        "select ts, dur, device, class, coalesce(next_op, '') as next_op, "
        "coalesce(api_name, '') as api, coalesce(block_name, '') as block, "
        + ", ".join(parts)
        + " from xpu_gpu_gap order by ts"
    ):
        # The gap named by its cause (causes.py's key), with every part's ns.
        args: dict[str, int | str] = {k: int(r[k]) for k in parts}
        args["next_op"] = str(r["next_op"])
        if r["block"]:
            args["waited_in"] = str(r["block"])
        marks.append(
            Mark(GAP_LANE + str(r["device"]), int(r["ts"]), int(r["dur"]), str(r["class"]), args)
        )
    return marks


def write_annotated(source: Path, output: Path, marks: list[Mark]) -> None:
    from collector.merge.traces import merge_traces

    def add(writer: object) -> None:
        for m in marks:
            writer.add_tool_slice(m.lane, m.ts, m.dur, m.name, CATEGORY, m.args)  # type: ignore[attr-defined]

    merge_traces([source], output, add_events=add)
