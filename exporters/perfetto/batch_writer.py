"""The writer's slice encoder: a SliceBatch (a process's slices in columns: the CUPTI
streams' API calls, NVTX ranges and GPU ops, Kineto's events, waits, probe hits) encoded
without a Python object per slice (tests/test_batch_writer.py reads batches back through
trace_processor against what their rows say), with the work done per column:
- lanes: a track whose slices do not overlap (nearly all) goes on lane 0 in one check;
  otherwise LaneSet.place() per slice;
- BEGIN heads (track, name, category, args) are encoded once per distinct combination and
  chosen per row from a table;
- each track clock's packets are put in time order by one sort (ENDs before BEGINs of the
  same time, inner slices' ENDs first), their timestamps become deltas on the clock, and
  the packets are assembled by exporters/perfetto/columnar.py in blocks;
- flows get ids that repeat (deflate likes them): flow k of the batch, in start order, gets
  `base + k mod K` with K the smallest power of two for which every flow has ended before
  the flow K places later starts (trace_processor pairs a flow's ends in timestamp order,
  so an id is free again once its flow has ended).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from collector import model
from collector.arrays import group_rows_by_keys
from exporters.perfetto import launch_stacks, wire
from exporters.perfetto.columnar import (
    ByteTable,
    Const,
    Fixed64s,
    Slot,
    Table,
    Varint,
    assemble,
    total_length,
    varint_lengths,
)
from exporters.perfetto.launch_stacks import write_launch_stacks
from exporters.perfetto.producer_state import ProducerState
from exporters.perfetto.sequences import Sequence

# Packets per assembly block: the (packets x width) matrices of a block stay in the CPU
# caches, and a block's bytes are well under a chunk.
BLOCK_PACKETS = 8192
_NONE = model.NONE
_FRAME_TAG = wire.key(wire.TRACE_PACKET, wire.LEN)
_TRACK_EVENT_TAG = wire.key(wire.PACKET_TRACK_EVENT, wire.LEN)
_TS_TAG = wire.key(wire.PACKET_TIMESTAMP, wire.VARINT)
_PERF_SAMPLE_TAG = wire.key(wire.PACKET_PERF_SAMPLE, wire.LEN)
_FIRST_FLOW_PERIOD = 16
# Cached BEGIN heads of a sequence, at most.
_HEAD_CACHE_SIZE = 1 << 16
_BATCH_HEAD = "batch head"  # first in the key of a cached columnar head


def _int64(column: model.Column) -> np.ndarray:
    return np.asarray(column, dtype=np.int64)


def _lookup(mapping: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """mapping[k] for every k in `keys` (all of them in `mapping`)."""
    known = np.array(sorted(mapping), np.int64)
    values = np.array([mapping[k] for k in known.tolist()], np.int64)
    return values[np.searchsorted(known, keys)]


class _Slices:
    """One SliceColumns as numpy columns, with their tracks, lanes and clocks."""

    def __init__(self, cols: model.SliceColumns, gpu: bool) -> None:
        self.cols = cols
        self.gpu = gpu
        self.ts = _int64(cols.ts)
        self.dur = _int64(cols.dur)
        self.end = np.where(self.dur > 0, self.ts + self.dur, self.ts)
        self.track = _int64(cols.track)
        self.device = _int64(cols.device) if cols.device is not None else None
        self.pid = _int64(cols.pid) if cols.pid is not None else None
        self.name = _int64(cols.name)
        self.category = _int64(cols.category)
        self.args = _int64(cols.args)
        self.stack = _int64(cols.stack) if cols.stack is not None else None
        self.corr = _int64(cols.correlation_id)
        # Varying int args (Kineto's ids): key, values, present; written after the
        # correlation id, like it.
        self.int_args = [
            (c.key, _int64(c.values), np.asarray(c.present, bool)) for c in cols.int_args
        ]
        self.uuid = np.zeros(len(self.ts), np.int64)
        # Flows: CPU rows start any number (flow_count at flow_first in flow_ids),
        # GPU rows end at most one (flow_end, NONE for none).
        self.flow_count = np.zeros(len(self.ts), np.int64)
        self.flow_first = np.zeros(len(self.ts), np.int64)
        self.flow_ids = np.zeros(0, np.int64)
        self.flow_end = np.full(len(self.ts), _NONE, np.int64)
        # CPU rows end any number (Kineto's flows between CPU slices), like their starts.
        self.end_count = np.zeros(len(self.ts), np.int64)
        self.end_first = np.zeros(len(self.ts), np.int64)
        self.end_ids = np.zeros(0, np.int64)

    @property
    def rows(self) -> int:
        return len(self.ts)


def write_batch(prod: ProducerState, batch: model.SliceBatch) -> None:
    """Encode `batch` on `prod`'s sequence, its slices whole (ENDs included)."""
    cpu = _Slices(batch.cpu, False)
    gpu = _Slices(batch.gpu, True)
    if not cpu.rows and not gpu.rows:
        return
    _assign_flows(prod, batch, cpu, gpu)
    for part in (cpu, gpu):
        if part.rows:
            _place_on_lanes(prod, batch.pid, part)
    # CPU tracks first: an API call's flow begins before a GPU op of the same time ends it
    # (these bytes reach the file in this order, see chunks.py).
    for part in (cpu, gpu):
        if part.rows:
            _write_slices(prod, part)
    if cpu.rows and batch.cpu.stack is not None:
        _write_launch_stacks(prod, batch, cpu)
    trace = prod.trace
    trace.counts["slices"] += cpu.rows + gpu.rows
    first = min(int(p.ts.min()) for p in (cpu, gpu) if p.rows)
    trace.note_ts(first)


def _assign_flows(prod: ProducerState, batch: model.SliceBatch, cpu: _Slices, gpu: _Slices) -> None:
    to_gpu = len(batch.flow_to)
    src = np.concatenate((_int64(batch.flow_from), _int64(batch.cpu_flow_from)))
    dst = np.concatenate((_int64(batch.flow_to), _int64(batch.cpu_flow_to)))
    n = len(src)
    if not n:
        return
    begin = cpu.ts[src]
    end = np.concatenate((gpu.ts[dst[:to_gpu]], cpu.ts[dst[to_gpu:]]))
    ids = np.empty(n, np.int64)
    # A flow whose end is earlier than its start gets an id of its own (never reused).
    backwards = end < begin
    forward = np.flatnonzero(~backwards)
    order = forward[np.argsort(begin[forward], kind="stable")]
    starts, ends = begin[order], end[order]
    period = _FIRST_FLOW_PERIOD
    while period < len(order) and not bool(np.all(ends[:-period] < starts[period:])):
        period *= 2
    period = min(period, max(len(order), 1))
    base = prod.next_flow_id
    ids[order] = base + np.arange(len(order)) % period
    back = np.flatnonzero(backwards)
    ids[back] = base + period + np.arange(len(back))
    prod.next_flow_id = base + period + len(back)
    # CPU rows: their flows' ids together, in row order.
    cpu.flow_count, cpu.flow_first, cpu.flow_ids = _by_row(src, ids, cpu.rows)
    gpu.flow_end[dst[:to_gpu]] = ids[:to_gpu]
    if n > to_gpu:
        cpu.end_count, cpu.end_first, cpu.end_ids = _by_row(dst[to_gpu:], ids[to_gpu:], cpu.rows)


def _by_row(rows: np.ndarray, ids: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """Flow ids of rows: (count of each row, where its first is, the ids in row order)."""
    count = np.bincount(rows, minlength=n).astype(np.int64)
    return count, np.cumsum(count) - count, ids[np.argsort(rows, kind="stable")]


def _row_flow_ids(
    tag: int,
    begin: np.ndarray,
    r: np.ndarray,
    count: np.ndarray,
    first: np.ndarray,
    ids: np.ndarray,
) -> Fixed64s:
    """The flow ids field `tag` of the BEGINs among packets of rows `r`."""
    counts = np.where(begin, count[r], 0)
    firsts = first[r][counts > 0]
    taken = counts[counts > 0]
    within = np.arange(int(taken.sum())) - np.repeat(np.cumsum(taken) - taken, taken)
    return Fixed64s(tag, counts, ids[np.repeat(firsts, taken) + within])


def _place_on_lanes(prod: ProducerState, pid: int, part: _Slices) -> None:
    """The lane track uuid of every row, through the tracks' LaneSets (kept from one batch
    to the next), rows of a track taken in start order, the longer of two first."""
    tracks = prod.trace.tracks
    if part.device is not None:
        key = (part.device << 32) | part.track
    elif part.pid is not None:  # CPU rows of several processes
        key = (part.pid << 32) | (part.track & 0xFFFFFFFF)
    else:
        key = part.track
    order = np.lexsort((-part.dur, part.ts, key))
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    for rows in np.split(order, bounds):
        first = int(rows[0])
        if part.device is None:
            tid = int(part.track[first])
            if part.pid is not None:
                pid = int(part.pid[first])
            lane_set, uuids = tracks.thread_lanes(pid, tid)
        else:
            device, stream = int(part.device[first]), int(part.track[first])
            lane_set, uuids = tracks.stream_lanes(device, stream)
        ts, end, dur = part.ts[rows], part.end[rows], part.dur[rows]
        start = int(ts[0])
        lane_free = start >= lane_set.last_starts[0] and all(
            e <= start for e in lane_set.open_ends[0]
        )
        if lane_free and bool(np.all(ts[1:] >= end[:-1])):
            # Nothing overlaps: all on lane 0, whose state is then the last slice's.
            lane_set.last_starts[0] = int(ts[-1])
            lane_set.open_ends[0][:] = [int(end[-1])]
            index = np.zeros(len(rows), np.int64)
        elif lane_free and _properly_nested(ts, end, dur):
            # Slices within slices (CPU ops): all on lane 0 too, as place() would put them;
            # the lane's open slices are then the last one and those around it.
            last = int(ts[-1])
            around = end > last
            around[-1] = True
            lane_set.last_starts[0] = last
            lane_set.open_ends[0][:] = end[around].tolist()
            index = np.zeros(len(rows), np.int64)
        else:
            place = lane_set.place
            index = np.array(
                [place(s, d) for s, d in zip(ts.tolist(), dur.tolist(), strict=True)], np.int64
            )
        most = int(index.max())
        if most >= len(uuids):
            if part.device is None:
                tracks.add_thread_lanes(pid, tid, most)
            else:
                tracks.add_stream_lanes(device, stream, most)
        part.uuid[rows] = np.asarray(uuids, np.int64)[index]


def _properly_nested(ts: np.ndarray, end: np.ndarray, dur: np.ndarray) -> bool:
    """Whether slices in start order (the longer of two with one start first) nest: each
    ends inside every slice open when it began.  In the packets' time order
    (_packet_order's rules for ties: LaneSet.place's), that is: the number of open
    slices just before a slice's END equals that just after its BEGIN, for every slice
    (a partial overlap makes the earlier-begun of the two end at a greater depth)."""
    m = len(ts)
    nth = np.arange(m)
    empty = dur <= 0
    times = np.concatenate((ts, end))
    kind = np.concatenate((np.ones(m, np.int64), np.where(empty, 1, 0)))
    tie = np.concatenate((2 * nth, np.where(empty, 2 * nth + 1, -nth)))
    order = np.lexsort((tie, kind, times))
    depth = np.cumsum(np.where(order < m, 1, -1))
    position = np.empty(2 * m, np.int64)
    position[order] = np.arange(2 * m)
    return bool(np.array_equal(depth[position[:m]], depth[position[m:]] + 1))


def _heads(prod: ProducerState, part: _Slices) -> tuple[list[bytes], np.ndarray]:
    """Encoded BEGIN heads (type, track, device and stream, name, category, args) and the
    head of each row."""
    seq = prod.seq
    cols = part.cols
    keys = [part.uuid, part.name, part.category, part.args]
    if part.stack is not None:
        keys.append(part.stack)
    group, firsts = group_rows_by_keys(*keys)
    heads = []
    cache = prod.begin_cache
    for row in firsts.tolist():
        uuid = int(part.uuid[row])
        name = cols.names[int(part.name[row])]
        category = cols.categories[int(part.category[row])]
        args = cols.arg_sets[int(part.args[row])]
        # Heads without a launch stack are kept for the later batches of the sequence (a
        # Kineto conversion writes one a chunk: most of its heads come back); the key
        # types the values (1, 1.0 and True are equal dict keys, other annotations).
        key = None
        if part.stack is None:
            key = (_BATCH_HEAD, uuid, name, category, *((k, type(v), v) for k, v in args.items()))
            cached = cache.get(key)
            if cached is not None:
                heads.append(cached)
                continue
        head = prod.begin_heads.get(uuid)
        if head is None:
            device = None if part.device is None else int(part.device[row])
            head = prod.begin_head_of(uuid, device, int(part.track[row]))
        encoded = b"".join(
            (
                head,
                seq.name_field(name),
                seq.category_field(category),
                *(seq.annotation(k, v) for k, v in args.items()),
                _launch_stack_arg(seq, part, row),
            )
        )
        if key is not None and len(cache) < _HEAD_CACHE_SIZE:
            cache[key] = encoded
        heads.append(encoded)
    return heads, group


def _launch_stack_arg(seq: Sequence, part: _Slices, row: int) -> bytes:
    """Arg `debug.launch_stack` of an API call with a launch stack (launch_stacks.py)."""
    if part.stack is None or part.stack[row] == _NONE:
        return b""
    stack = part.cols.stacks[int(part.stack[row])]
    return seq.annotation(launch_stacks.ARG_KEY, launch_stacks.stack_text(stack))


def _write_slices(prod: ProducerState, part: _Slices) -> None:
    """Every row's BEGIN and END, clock by clock (see the module doc)."""
    seq = prod.seq
    chunks = prod.trace.chunks
    # Which name is interned first decides only ids: a batch without correlation ids (a
    # sequence's waits, Kineto's span) interns that name ahead of its heads, as the writer
    # did when such slices came one by one; others after them.
    if bool(np.all(part.corr == _NONE)):
        corr_prefixes = _int_prefixes(seq, "correlation_id")
        heads, head_of_row = _heads(prod, part)
    else:
        heads, head_of_row = _heads(prod, part)
        corr_prefixes = _int_prefixes(seq, "correlation_id")
    int_prefixes = [_int_prefixes(seq, key) for key, _, _ in part.int_args]
    # Clocks: one per track uuid, shared by later tracks (see Sequence.track_clock).
    cells: list[list] = []
    cell_index: dict[int, int] = {}
    uuid_cell = {}
    for uuid in np.unique(part.uuid).tolist():
        cell = seq.track_clocks.get(uuid) or seq.track_clock(uuid, part.gpu)
        uuid_cell[uuid] = cell_index.setdefault(id(cell), len(cells))
        if uuid_cell[uuid] == len(cells):
            cells.append(cell)
    if seq.dirty:  # ahead of the packets that use the entries (see intern_into_chunk)
        chunks.size += seq.intern_into_chunk()
    # What fills the head slot: BEGIN heads, then each track's END packet (with its
    # clock id, and without it for a late END) followed by the timestamp tag.
    entries = list(heads)
    end_entry: dict[int, int] = {}
    for uuid, index in uuid_cell.items():
        packet = prod.end_packets.get(uuid) or prod.end_packet(uuid)
        clock_field = cells[index][1]
        end_entry[uuid] = len(entries)
        entries.append(packet + _TS_TAG)
        entries.append((packet[: -len(clock_field)] if clock_field else packet) + _TS_TAG)
    table = ByteTable(entries)
    row_cell = _lookup(uuid_cell, part.uuid)
    order = np.lexsort((-part.dur, part.ts, row_cell))
    bounds = np.flatnonzero(np.diff(row_cell[order])) + 1
    for rows in np.split(order, bounds):
        cell = cells[int(row_cell[rows[0]])]
        _write_clock(
            prod, seq, part, rows, cell, table, head_of_row, end_entry, corr_prefixes, int_prefixes
        )


def _int_prefixes(seq: Sequence, key: str) -> ByteTable:
    """Entry k: the head of an int annotation `key` whose value is a k-byte varint."""
    head = seq.annotation_name(key) + wire.ANNOTATION_INT_TAG
    return ByteTable([wire.ANNOTATION_PREFIX[len(head) + k] + head for k in range(11)])


def _timestamps(times: np.ndarray, clock: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Packets at `times` (in time order) on an incremental clock that reads `clock`: which
    are late (earlier than the clock: an absolute time, the clock left alone), each one's
    timestamp value (the delta, or the absolute time), and the clock afterwards."""
    late = times < clock
    previous = np.empty_like(times)
    previous[0] = clock
    previous[1:] = times[:-1]
    stamp = np.where(late, times, times - np.maximum(previous, clock))
    return late, stamp, max(clock, int(times[-1]))


def _packet_order(part: _Slices, rows: np.ndarray) -> np.ndarray:
    """Packets of `rows` (in start order) in time order: index i < len(rows) is row i's
    BEGIN, len(rows) + i its END.  ENDs come before BEGINs of the same time, the inner
    of two ENDs first; an empty slice ends right after it begins."""
    m = len(rows)
    ts, end, dur = part.ts[rows], part.end[rows], part.dur[rows]
    if bool(np.all(dur > 0)) and bool(np.all(ts[1:] >= end[:-1])):
        out = np.empty(2 * m, np.int64)
        out[0::2] = np.arange(m)
        out[1::2] = np.arange(m, 2 * m)
        return out
    nth = np.arange(m)
    empty = dur <= 0
    times = np.concatenate((ts, end))
    kind = np.concatenate((np.ones(m, np.int64), np.where(empty, 1, 0)))
    tie = np.concatenate((2 * nth, np.where(empty, 2 * nth + 1, -nth)))
    return np.lexsort((tie, kind, times))


def _write_clock(
    prod: ProducerState,
    seq: Sequence,
    part: _Slices,
    rows: np.ndarray,
    cell: list,
    table: ByteTable,
    head_of_row: np.ndarray,
    end_entry: dict[int, int],
    corr_prefixes: ByteTable,
    int_prefixes: list[ByteTable],
) -> None:
    """The packets of the rows on one track clock."""
    chunks = prod.trace.chunks
    m = len(rows)
    packets = _packet_order(part, rows)
    is_begin = packets < m
    row = rows[packets % m]
    times = np.where(is_begin, part.ts[row], part.end[row])
    late, stamp, cell[0] = _timestamps(times, cell[0])
    end_index = _lookup(end_entry, part.uuid[row]) + late
    slot_index = np.where(is_begin, head_of_row[row], end_index)
    tails = ByteTable([cell[4] + _TS_TAG, seq.head_needs + _TS_TAG])
    absolute = ByteTable([seq.absolute_clock])
    # The varying int args of this clock's BEGINs (keys none of its rows has left out).
    int_args = []
    for (_, values, present), prefixes in zip(part.int_args, int_prefixes, strict=True):
        has_all = is_begin & present[row]
        if has_all.any():
            int_args.append((prefixes, has_all, np.where(has_all, values[row], 0)))
    for lo in range(0, len(packets), BLOCK_PACKETS):
        b = slice(lo, lo + BLOCK_PACKETS)
        begin, r = is_begin[b], row[b]
        n = len(r)
        corr = part.corr[r]
        has_corr = begin & (corr != _NONE)
        event: list[Slot] = [Table(table, slot_index[b])]
        if not part.gpu:
            event.append(
                _row_flow_ids(
                    wire.FLOW_TAG, begin, r, part.flow_count, part.flow_first, part.flow_ids
                )
            )
            if len(part.end_ids):
                event.append(
                    _row_flow_ids(
                        wire.TERMINATING_FLOW_TAG,
                        begin,
                        r,
                        part.end_count,
                        part.end_first,
                        part.end_ids,
                    )
                )
        else:
            ends_flow = begin & (part.flow_end[r] != _NONE)
            event.append(
                Fixed64s(
                    wire.TERMINATING_FLOW_TAG,
                    ends_flow.astype(np.int64),
                    part.flow_end[r][ends_flow],
                )
            )
        corr_value = np.where(has_corr, corr, 0)
        event.append(Table(corr_prefixes, np.where(has_corr, varint_lengths(corr_value), -1)))
        event.append(Varint(corr_value, has_corr))
        for prefixes, has_all, value_all in int_args:
            has, value = has_all[b], value_all[b]
            varint = Varint(value, has)
            event.append(Table(prefixes, np.where(has, varint.lengths, -1)))
            event.append(varint)
        packet: list[Slot] = [
            Const(_TRACK_EVENT_TAG, n, begin),
            Varint(total_length(event), begin),
            *event,
            Table(tails, np.where(begin, late[b].astype(np.int64), -1)),
            Varint(stamp[b]),
            Table(absolute, np.where(late[b], 0, -1)),
        ]
        data = assemble(n, [Const(_FRAME_TAG, n), Varint(total_length(packet)), *packet])
        cell[3]((data,))
        chunks.size += len(data)
        if chunks.size >= chunks.chunk_bytes:
            chunks.flush()


def _write_launch_stacks(prod: ProducerState, batch: model.SliceBatch, cpu: _Slices) -> None:
    """A launch-stack sample per CPU row with a launch stack, on its thread's sequence
    (launch_stacks.py), thread by thread in time order."""
    assert batch.cpu.pid is None, "launch stacks of a batch of several processes"
    assert batch.cpu.stack is not None
    stack = _int64(batch.cpu.stack)
    rows = np.flatnonzero(stack != _NONE)
    if not len(rows):
        return
    rows = rows[np.lexsort((cpu.ts[rows], cpu.track[rows]))]
    tids = cpu.track[rows]
    bounds = [0, *(np.flatnonzero(np.diff(tids)) + 1).tolist(), len(rows)]
    stacks = batch.cpu.stacks
    for lo, hi in pairwise(bounds):
        r = rows[lo:hi]
        write_launch_stacks(
            prod.trace,
            prod.launch_threads,
            batch.pid,
            int(tids[lo]),
            cpu.ts[r].tolist(),
            [stacks[j] for j in stack[r].tolist()],
        )
