"""One trace out of many: the inputs' packets streamed through PacketRemapper into one
TraceWriter (the one encoder: its file handling, compression, clock snapshot and metadata).

Memory: one input chunk (1-4 MiB inflated) at a time, plus per input a few small maps
(sequence ids, default clocks) dropped when the input is done, and the pids in use (a few
bytes per process of all inputs).  `--align nccl` also opens each input once in
trace_processor before the merge, one at a time.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector.errors import UserError
from collector.files import check_output
from collector.merge import clocks, nccl
from collector.merge.inputs import InputTrace, read_inputs
from exporters.perfetto.packet_reader import TraceFileError, packets
from exporters.perfetto.remap import (
    InputClock,
    MergeInputError,
    PacketRemapper,
    ProcessIds,
)
from exporters.perfetto.writer import TraceWriter


@dataclass
class InputReport:
    """What happened to one input."""

    path: Path
    label: str
    host: str | None
    clock_source: str  # clocks.ClockBasis.source
    offset_ns: int
    pids_moved: dict[int, int]
    counts: Counter[str]


@dataclass
class MergeReport:
    output: Path
    align: str
    inputs: list[InputReport] = field(default_factory=list)
    nccl: nccl.NcclAlignment | None = None
    bytes_written: int = 0

    def total(self, key: str) -> int:
        return sum(i.counts[key] for i in self.inputs)


def _output_snapshot(
    inputs: Sequence[InputTrace], bases: Sequence[clocks.ClockBasis], offsets: Sequence[int]
) -> dict[int, int]:
    """The merged trace's clock snapshot: BOOTTIME (its time domain) and, where an input
    has a wall clock, REALTIME, so a merged trace merges again like a recorded one.  The
    BOOTTIME reading is the earliest input's first event (the metadata instant goes there)."""
    firsts = []
    for inp, off in zip(inputs, offsets, strict=True):
        head = inp.head
        if head.metadata_ts is not None and head.metadata_clock is not None:
            boot = clocks.to_boottime(head, head.metadata_clock, head.metadata_ts)
            if boot is not None:
                firsts.append(boot + off)
    start = min(firsts, default=0)
    snapshot = {clocks.BOOTTIME: start}
    for basis, off in zip(bases, offsets, strict=True):
        if basis.realtime_at_zero is not None:
            snapshot[clocks.REALTIME] = start + basis.realtime_at_zero - off
            break
    return snapshot


def merge_traces(
    paths: Sequence[Path],
    output: Path,
    align: str = "clock",
    shell: str | None = None,
    command_line: Sequence[str] = (),
    on_input: Callable[[int, Path], None] | None = None,
    add_events: Callable[[TraceWriter], None] | None = None,
) -> MergeReport:
    """Merge `paths` into `output` (written as OUT.tmp, renamed at the end: a failure leaves
    no file).  Input and output problems are UserErrors with one line.  `add_events` writes
    events of its own into the merged trace (in its BOOTTIME domain) after the inputs."""
    if align not in clocks.ALIGN_MODES:
        raise UserError(f"--align must be one of {', '.join(clocks.ALIGN_MODES)}")
    if not paths:
        raise UserError("no input traces")
    resolved = {p.resolve() for p in paths}
    if output.resolve() in resolved:
        raise UserError(f"output {output} is also an input")
    check_output(output, paths)  # a hard link or symlink to an input, a directory, no dir
    inputs = read_inputs(list(paths))
    bases = [clocks.clock_basis(inp.head) for inp in inputs]
    offsets = clocks.clock_offsets(bases, align)
    report = MergeReport(output, align)
    if align == "nccl":
        ends = [nccl.collective_ends(inp.path, shell) for inp in inputs]
        report.nccl = nccl.refine(ends, offsets)
        offsets = report.nccl.offsets
    offsets = clocks.lift(offsets, [inp.head for inp in inputs])
    pids = ProcessIds()
    try:
        writer = TraceWriter(
            output,
            command_line=command_line or sys.argv,
            clock_id=pb.BUILTIN_CLOCK_BOOTTIME,
            clock_snapshot=_output_snapshot(inputs, bases, offsets),
        )
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror}") from None
    try:
        with writer:  # nothing between its making and here: it owns its file from here
            for inp, basis, offset in zip(inputs, bases, offsets, strict=True):
                if on_input is not None:
                    on_input(inp.index, inp.path)
                remapper = PacketRemapper(
                    inp.index,
                    InputClock(inp.head.clock_snapshot, offset),
                    pids.for_input(),
                    writer.new_sequence_id,
                    inp.host,
                    inp.label,
                )
                try:
                    for raw in packets(inp.path):
                        out = remapper.rewrite(raw)
                        if out is not None:
                            writer.write_packet(out)
                except (TraceFileError, MergeInputError) as exc:
                    raise UserError(f"{inp.path}: {exc}") from None
                report.inputs.append(
                    InputReport(
                        inp.path,
                        inp.label,
                        inp.host,
                        basis.source,
                        offset,
                        remapper.pids.mapping(),
                        remapper.counts,
                    )
                )
            if add_events is not None:
                add_events(writer)
            _write_metadata(writer, report)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror}") from None
    report.bytes_written = writer.bytes_written
    return report


def _write_metadata(writer: TraceWriter, report: MergeReport) -> None:
    """The merge's own facts beside the inputs' metadata (kept under `inputN.` keys)."""
    meta = writer.set_metadata
    meta("merge_inputs", len(report.inputs))
    meta("merge_align", report.align)
    for key in ("slices", "instants", "flow_ids", "terminating_flow_ids", "packets_in"):
        meta(f"merge_{key}", report.total(key))
    meta("merge_clock_snapshots_replaced", report.total("clock_snapshots_replaced"))
    meta("merge_pids_moved", sum(len(i.pids_moved) for i in report.inputs))
    # The writer's own counters would read 0 (the merge encodes no event itself): the
    # passed-through totals instead.
    meta("writer.slices", report.total("slices"))
    meta("writer.cpu_samples", report.total("samples.cpu-clock"))
    meta("writer.launch_stacks", report.total("samples.xpu_perf.launch_stack"))
    for i, inp in enumerate(report.inputs):
        prefix = f"merge_input{i}_"
        meta(prefix + "path", str(inp.path))
        meta(prefix + "label", inp.label)
        if inp.host is not None:
            meta(prefix + "host", inp.host)
        meta(prefix + "clock_source", inp.clock_source)
        meta(prefix + "offset_ns", inp.offset_ns)
        meta(prefix + "pids_moved", len(inp.pids_moved))
        for kind, n in sorted(inp.counts.items()):
            if kind.startswith("other_packets."):
                meta(prefix + kind.replace(".", "_"), n)
    if report.nccl is not None:
        nccl = report.nccl
        meta("merge_nccl_reference_input", -1 if nccl.reference is None else nccl.reference)
        meta("merge_nccl_collectives_compared", nccl.after.collectives)
        for when, s in (("before", nccl.before), ("after", nccl.after)):
            if s.median_ns is not None and s.max_ns is not None:  # both or neither
                meta(f"merge_nccl_spread_median_{when}_ns", s.median_ns)
                meta(f"merge_nccl_spread_max_{when}_ns", s.max_ns)
        for i, (delta, kernels, matched) in enumerate(
            zip(nccl.deltas, nccl.kernels, nccl.matched, strict=True)
        ):
            meta(f"merge_input{i}_nccl_kernels", kernels)
            meta(f"merge_input{i}_nccl_matched", matched)
            meta(f"merge_input{i}_nccl_delta_ns", delta)
