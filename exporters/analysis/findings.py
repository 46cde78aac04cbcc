"""Findings: small rules over the analyses, each with a stable code, the time it explains,
the evidence, the code to change and one suggestion.  Ranked by the time explained.

Every idle rule reports only when its cause explains at least MIN_SHARE of the analysed
span, so a GPU-bound program gets no idle finding.  `idle_ns` is the GPU idle time the cause
explains; for FP32_GEMM (not idle time) it is the time the change would save, estimated as
half of the FP32 GEMMs' time (TF32 or BF16 tensor-core GEMMs run several times faster)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from exporters.analysis import follow, idle
from exporters.analysis.idle import IdleSummary, Site
from exporters.analysis.launches import LaunchStats
from exporters.perfetto.engine.trace_processor import Trace, sql_literal

MIN_SHARE = 0.03
# FP32 GEMMs must be at least this share of the GPU's compute time to be worth a finding.
FP32_GEMM_SHARE = 0.3
# Kernel names of GEMMs computed in FP32 on the CUDA cores (cuBLAS/CUTLASS SIMT sgemm,
# xmma f32 kernels); tf32 kernels use the tensor cores.
FP32_GEMM_GLOBS = ("*sgemm*", "*gemm*f32f32_f32f32*", "*gemm_fp32*", "*s1688gemm*", "*s884gemm*")


def fp32_gemm_sql(table: str = "") -> str:
    """The condition on a kernel row (of `table`, an alias, where given) that it is an
    FP32 GEMM."""
    col = f"{table}." if table else ""
    globs = " OR ".join(f"{col}name GLOB {sql_literal(g)}" for g in FP32_GEMM_GLOBS)
    return f"({globs}) AND {col}name NOT GLOB '*tf32*' AND {col}category = 'kernel'"


# The ops the findings look at: those starting in the focus (steady-state steps).
IN_FOCUS = (
    "ts >= (select ts from xpu_analysis_focus) and ts < (select end_ts from xpu_analysis_focus)"
)


@dataclass(frozen=True)
class Finding:
    code: str
    title: str
    idle_ns: int
    share: float  # idle_ns / the analysed span
    locations: list[str]
    evidence: str
    suggestion: str
    sites: list[Site] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "title": self.title,
            "idle_ns": self.idle_ns,
            "share": round(self.share, 6),
            "locations": self.locations,
            "evidence": self.evidence,
            "suggestion": self.suggestion,
        }


@dataclass(frozen=True)
class Context:
    trace: Trace
    span_ns: int
    idle: IdleSummary
    launches: LaunchStats
    ranks: dict[int, int] = field(default_factory=dict)  # upid -> rank, of ranked processes


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1e5 else f"{ns / 1e3:.1f} us"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _where(sites: list[Site]) -> str:
    return sites[0].location if sites else "the loop"


# A device-to-host copy of more than this many bytes is a result the program reads (a
# model's output), not a value read for logging (`.item()`: a scalar).
RESULT_BYTES = 1024
# A finding's sites are listed until they cover this share of the time it claims.
EVIDENCE_SHARE = 0.9
EVIDENCE_SITES = 8


def _covering(sites: list[Site], ns: int) -> list[Site]:
    """The heaviest sites until they cover EVIDENCE_SHARE of `ns` (at most EVIDENCE_SITES)."""
    out: list[Site] = []
    for site in sorted(sites, key=lambda s: -s.ns):
        if len(out) >= EVIDENCE_SITES or sum(s.ns for s in out) >= EVIDENCE_SHARE * ns:
            break
        out.append(site)
    return out


def _listed(sites: list[Site]) -> str:
    return ", ".join(f"{x.location} ({_ms(x.ns)})" for x in sites)


def _claimed(ctx: Context, expr: str, where: str = "1") -> int:
    return int(
        ctx.trace.scalar(f"select coalesce(sum({expr}), 0) from xpu_focus_gap where {where}") or 0
    )


# A finding of a multi-rank trace names the rank holding at least this share of its time.
RANK_SHARE = 0.6


def _rank_note(ctx: Context, claim: tuple[str, str] | None) -> str:
    """' (rank N: X% of it)' where the trace holds several ranks and one of them holds most
    of the finding's time (`claim`: its ns expression and gap condition), else ''."""
    if claim is None or len(ctx.ranks) < 2:
        return ""
    expr, where = claim
    per_upid = ctx.trace.query(
        f"select t.upid, sum({expr}) as ns from xpu_focus_gap g join thread t using (utid) "
        f"where {where} group by t.upid"
    )
    by_rank: dict[int, int] = {}
    for r in per_upid:
        rank = ctx.ranks.get(int(r["upid"])) if r["upid"] is not None else None
        if rank is not None:
            by_rank[rank] = by_rank.get(rank, 0) + int(r["ns"] or 0)
    total = sum(by_rank.values())
    if len(by_rank) < 2 or not total:
        return ""
    rank, ns = max(by_rank.items(), key=lambda kv: kv[1])
    if ns < RANK_SHARE * total:
        return ""
    return f" (rank {rank}: {100 * ns / total:.0f}% of it)"


def _finding(
    ctx: Context,
    code: str,
    ns: int,
    title: str,
    sites: list[Site],
    evidence: str,
    suggestion: str,
    claim: tuple[str, str] | None = None,
) -> Finding:
    return Finding(
        code=code,
        title=title + _rank_note(ctx, claim),
        idle_ns=ns,
        share=ns / ctx.span_ns,
        locations=[s.location for s in sites],
        evidence=evidence,
        suggestion=suggestion,
        sites=sites,
    )


def _enough(ctx: Context, ns: int) -> bool:
    return ns >= MIN_SHARE * ctx.span_ns and ns > 0


def host_sync(ctx: Context) -> Finding | None:
    """HOST_SYNC: the launching thread sat in a sync API or a blocking copy when the GPU ran
    dry, so nothing was queued behind the work that ended; the time claimed is the rest of
    the call and the work that launches nothing run after it (the GPU empty meanwhile).
    Advice: both fixes, move that work before the sync (it then overlaps the GPU) or drop
    or defer the sync.  Where most of that time follows a device-to-host copy of more than
    RESULT_BYTES (the copy itself blocking, or an async copy then the sync: `.cpu()` of a
    model's output at the end of a request), the result is what the program needs: titled
    by the work after it, and not told to read less often; a scalar read (`.item()` for a
    log line) is offered both."""
    in_sync = _claimed(ctx, "sync_ns", "block_id is not null")
    after = _claimed(ctx, "host_ns", "block_id is not null")
    ns = in_sync + after
    if not _enough(ctx, ns):
        return None
    # The calls weighted by all they explain (the time in them and the work after them).
    calls = _covering(
        idle.sync_sites(ctx.trace, top=EVIDENCE_SITES, weight="g.sync_ns + g.host_ns"), ns
    )
    # What ran after them, where samples say (without samples, nothing names that work).
    sampled = bool(ctx.trace.scalar("select count(*) from _xpu_gap_sample"))
    following = (
        _covering(idle.sample_sites(ctx.trace, "host", after_sync=True, top=EVIDENCE_SITES), after)
        if after and sampled
        else []
    )
    call = calls[0] if calls else None
    what = call.detail if call else "a sync"
    where = call.location if call else "the loop"
    # Reading back a result (a device-to-host copy of more than a scalar: `.cpu()` of a
    # model's output) for most of the time: the program needs it, so the copy stays.
    result_ns = int(
        ctx.trace.scalar(
            "select coalesce(sum(g.sync_ns + g.host_ns), 0) from xpu_focus_gap g "
            "join xpu_copy c on c.api_id = g.copy_id where g.block_id is not null "
            f"and c.direction = 'DtoH' and coalesce(c.bytes, 0) > {RESULT_BYTES}"
        )
        or 0
    )
    is_copy = result_ns >= ns / 2
    gaps = ctx.trace.scalar("select count(*) from xpu_focus_gap where block_id is not null")
    targets = follow.sync_targets(ctx.trace)
    evidence = (
        f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) in {gaps} gaps "
        f"that began while the host waited in {what}"
        + (
            " for " + ", ".join(f"{name} ({n}x)" for name, n in targets) + " to finish"
            if targets
            else ""
        )
        + (f", made at {_listed(calls)}" if calls else "")
        + f": {_ms(in_sync)} in the call until it returned"
    )
    if following:
        evidence += f"; then {_ms(after)} of work that launches nothing, the GPU empty: " + (
            _listed(following)
        )
    elif after:
        evidence += f"; then {_ms(after)} of host time before the next launch"
    work = following[0].location if following else ""
    if is_copy:
        title = (
            f"{work} runs with the GPU empty after reading a result back at {where}"
            if work
            else f"Reading a result back at {where}: the GPU waits for the host"
        )
        sites = following + calls
        suggestion = f"the copy at {where} returns a result the program needs, so keep it; " + (
            f"move {work} before it (or into another thread) so it runs while the GPU "
            "computes, or queue the next step's GPU work before reading the result"
            if work
            else "queue the next step's GPU work before reading it "
            "(.to('cpu', non_blocking=True) and an event), so the GPU keeps running"
        )
    else:
        title = f"Host sync inside the loop: {what} at {where}" + (
            f", then {work} with the GPU empty" if work else ""
        )
        sites = calls + following
        suggestion = (
            f"{where} makes the host wait for the GPU every time it runs (.item(), .cpu(), "
            ".tolist(), printing a tensor, torch.cuda.synchronize() all do)"
            + (
                f"; {work} runs after it with nothing queued: move {work} before the sync "
                "so it overlaps the GPU, or"
                if work
                else ":"
            )
            + " drop or defer the sync: keep the value on the GPU and read it every N steps, "
            "or copy it with .to('cpu', non_blocking=True) and read it after the next step "
            "is queued"
        )
    return _finding(
        ctx,
        "HOST_SYNC",
        ns,
        title,
        sites,
        evidence,
        suggestion,
        ("g.sync_ns + g.host_ns", "g.block_id is not null"),
    )


def input_pipeline(ctx: Context) -> Finding | None:
    """INPUT_PIPELINE: the launching thread ran input-pipeline code (torch.utils.data, a
    dataset's __getitem__, decoding), or waited for a DataLoader batch, while the GPU
    waited.  A wait for a batch is followed to the DataLoader workers (follow.py): located
    at their hottest line; more workers advised only where they were saturated and the
    machine has cores for more, else a cheaper __getitem__.  Without waits: DataLoader
    workers."""
    ns = _claimed(ctx, "data_ns")
    if not _enough(ctx, ns):
        return None
    waited = _claimed(ctx, "data_wait_ns")
    workers = follow.loader_workers(ctx.trace) if waited else None
    on_thread = idle.sample_sites(ctx.trace, "data", top=EVIDENCE_SITES)
    if workers is None:
        on_thread += idle.wait_sites(ctx.trace, data=True, top=EVIDENCE_SITES)
    else:
        on_thread += workers.sites
    sites = _covering(on_thread, ns)
    evidence = (
        f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) while the "
        "launching thread loaded data or waited for it, in: " + _listed(sites)
    )
    if workers is None or waited < ns / 2:
        return _finding(
            ctx,
            "INPUT_PIPELINE",
            ns,
            f"Input pipeline on the critical path: {_where(sites)}",
            sites,
            evidence,
            f"load batches in background workers: DataLoader(num_workers=N, "
            f"pin_memory=True, persistent_workers=True); or make {_where(sites)} cheaper "
            "(decode once, cache, move the transform to the GPU)",
            ("g.data_ns", "1"),
        )
    hot = workers.sites[0].location if workers.sites else "__getitem__"
    evidence += (
        f"; the launching thread waited {_ms(waited)} for batches while "
        f"{workers.count} DataLoader worker(s) were busy {_pct(workers.busy)} of it"
    )
    room = workers.cores is not None and workers.count < workers.cores
    if workers.saturated() and room:
        advice = (
            f"the {workers.count} workers were saturated and the machine has "
            f"{workers.cores} CPUs: raise DataLoader(num_workers=...), or make {hot} cheaper"
        )
    else:
        advice = f"make {hot} cheaper (decode once, cache, do the transform on the GPU): " + (
            f"the {workers.count} workers were busy only {_pct(workers.busy)} of the wait"
            if not workers.saturated()
            else "there are no spare CPUs for more workers"
        )
    sites = _covering(workers.sites + idle.sample_sites(ctx.trace, "data"), ns)
    return _finding(
        ctx,
        "INPUT_PIPELINE",
        ns,
        f"Input pipeline: DataLoader workers too slow, at {hot}",
        sites,
        evidence,
        advice,
        ("g.data_ns", "1"),
    )


def python_between_launches(ctx: Context) -> Finding | None:
    """PYTHON_BETWEEN_LAUNCHES: the launching thread ran code that launches nothing (not a
    sync, not data loading, not the model's own launching) for longer than the launch path
    takes before it launched the next op.  Advice: take it off the critical path."""
    ns = _claimed(ctx, "host_ns", "block_id is null")
    if not _enough(ctx, ns):
        return None
    sites = _covering(
        idle.sample_sites(ctx.trace, "host", after_sync=False, top=EVIDENCE_SITES), ns
    )
    where = _where(sites)
    unseen = ""
    if sites and sites[0].location == idle.BETWEEN_OPS:
        # The trace cannot say which code: no samples, no stacks, no slice around it.
        where = "code the trace does not name"
        unseen = (
            " (this trace has neither CPU samples nor Python stacks: record the program with "
            "`xpu-perf record`, or torch.profiler(with_stack=True), to see which lines)"
        )
    return _finding(
        ctx,
        "PYTHON_BETWEEN_LAUNCHES",
        ns,
        f"CPU work between launches: {where}",
        sites,
        f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) while the "
        "launching thread ran code that launches no GPU work, in: " + _listed(sites) + unseen,
        f"take {where} off the GPU's critical path: do it before the loop or in a "
        "DataLoader worker or another thread, vectorise it on the GPU, or queue the next "
        "step's GPU work before running it" + unseen,
        ("g.host_ns", "g.block_id is null"),
    )


def blocked_wait(ctx: Context) -> Finding | None:
    """BLOCKED_WAIT: the launching thread was blocked in a call (a lock, a queue, a sleep,
    I/O: the recorder's waits) while the GPU waited; followed to what the other threads of
    its process ran meanwhile (follow.py).  Advice: what it waited for."""
    ns = _claimed(ctx, "wait_ns")
    if not _enough(ctx, ns):
        return None
    sites = _covering(idle.wait_sites(ctx.trace, data=False, top=EVIDENCE_SITES), ns)
    what = sites[0].detail if sites else "a blocking call"
    title = f"Launching thread blocked in {what} at {_where(sites)}"
    evidence = (
        f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) while the "
        "launching thread was blocked, in: "
        + ", ".join(f"{x.detail} at {x.location} ({_ms(x.ns)})" for x in sites)
    )
    suggestion = (
        f"the thread that launches the GPU's work waits at {_where(sites)}: make what it "
        "waits for arrive earlier (produce it ahead, in parallel), or queue the GPU's next "
        "work before waiting"
    )
    others = follow.other_threads(ctx.trace)
    if others is not None and others.sites:
        hot = others.sites[0].location
        title += f", waiting on {others.who} running {hot}"
        evidence += (
            f"; meanwhile {others.who} ran {_listed(others.sites[:3])} "
            f"(busy {_pct(others.busy)} of the wait)"
        )
        suggestion = (
            f"the launching thread waits for {others.who}, which runs {hot}: make {hot} "
            "cheaper or run more of it in parallel, or hand work over earlier (a deeper "
            "queue, produced ahead) so the GPU's next work is queued before the wait"
        )
        sites = sites + others.sites[:1]
    return _finding(ctx, "BLOCKED_WAIT", ns, title, sites, evidence, suggestion, ("g.wait_ns", "1"))


def launch_bound(ctx: Context) -> Finding | None:
    """LAUNCH_BOUND: the GPU waits for the host to launch the model's own work: the launch
    path (short host parts between launches, launch latency) and the host time spent in
    the code that launches (module forwards, framework dispatch).  Located where the host
    spends that time.  Advice: CUDA graphs, torch.compile, fusion, more work per kernel."""
    st = ctx.launches
    ns = _claimed(ctx, "launch_ns")
    if not _enough(ctx, ns):
        return None
    in_code = _claimed(ctx, "launch_host_ns")
    sites = _covering(
        _merge(
            idle.sample_sites(ctx.trace, "launch", top=EVIDENCE_SITES)
            + idle.launch_sites(ctx.trace, top=EVIDENCE_SITES)
        ),
        ns,
    )
    return _finding(
        ctx,
        "LAUNCH_BOUND",
        ns,
        f"Launch-bound: the GPU waits for the host to launch its work, at {_where(sites)}",
        sites,
        f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) waiting for "
        f"launches ({_ms(in_code)} of it the host running the code that launches them); "
        f"median kernel {_ms(st.kernel_p50_ns)} vs its launch call "
        f"{_ms(st.call_p50_ns)}; {st.shorter_than_call} of {st.launches} kernels ran "
        f"shorter than their launch call; launch latency p50 {_ms(st.latency_p50_ns)}; "
        "where: " + _listed(sites),
        "capture the step in a CUDA graph (torch.compile(mode='reduce-overhead') or "
        "torch.cuda.graphs), fuse the small ops (torch.compile), or give each kernel "
        f"more work (a larger batch) around {_where(sites)}",
        ("g.launch_ns", "1"),
    )


def _merge(sites: list[Site]) -> list[Site]:
    """Sites of one location added up."""
    merged: dict[str, Site] = {}
    for s in sites:
        m = merged.get(s.location)
        merged[s.location] = (
            s
            if m is None
            else Site(s.location, m.ns + s.ns, m.count + s.count, m.detail or s.detail)
        )
    return sorted(merged.values(), key=lambda s: -s.ns)


def pageable_copies(ctx: Context) -> Finding | None:
    """PAGEABLE_COPY: copies to or from pageable host memory, or synchronous cudaMemcpy
    calls: staged through a bounce buffer and blocking the host.  Advice: pinned memory and
    non_blocking copies."""
    rows = ctx.trace.query(
        "select count(*) as n, coalesce(sum(dur), 0) as ns, coalesce(sum(bytes), 0) as bytes, "
        "coalesce(sum(api_dur), 0) as api_ns from xpu_copy "
        "where (host_memory = 'pageable' or api_name in ('cudaMemcpy', 'cuMemcpy')) "
        f"and {IN_FOCUS}"
    )[0]
    ns = max(int(rows["ns"]), int(rows["api_ns"]))
    if ns < MIN_SHARE * ctx.span_ns:
        return None
    sites = idle.op_sites(
        ctx.trace,
        "l.category = 'memcpy' and l.op_id in (select id from xpu_copy "
        "where host_memory = 'pageable' or api_name in ('cudaMemcpy', 'cuMemcpy'))",
    )
    return Finding(
        code="PAGEABLE_COPY",
        title=f"Pageable or synchronous copies: {_where(sites)}",
        idle_ns=ns,
        share=ns / ctx.span_ns,
        locations=[s.location for s in sites],
        evidence=(
            f"{rows['n']} copies of {int(rows['bytes']) / 1e6:.1f} MB from or to pageable "
            f"memory (or synchronous cudaMemcpy): {_ms(int(rows['ns']))} on the GPU, "
            f"{_ms(int(rows['api_ns']))} in their API calls on the host"
        ),
        suggestion=(
            "copy from pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()) "
            "with .to(device, non_blocking=True), so the copy runs asynchronously at full "
            f"bandwidth; at {_where(sites)}"
        ),
        sites=sites,
    )


def fp32_gemm(ctx: Context) -> Finding | None:
    """FP32_GEMM: GEMMs computed in FP32 on the CUDA cores take at least FP32_GEMM_SHARE of
    the GPU's compute time: the tensor cores sit idle.  Advice: TF32 or BF16."""
    gemm = ctx.trace.query(
        "select count(*) as n, coalesce(sum(dur), 0) as ns from xpu_launch "
        f"where {fp32_gemm_sql()} and {IN_FOCUS}"
    )[0]
    compute = ctx.trace.scalar(
        "select coalesce(sum(dur), 0) from xpu_analysis_op "
        f"where category = 'kernel' and {IN_FOCUS}"
    )
    ns = int(gemm["ns"])
    if not compute or ns < FP32_GEMM_SHARE * compute or ns // 2 < MIN_SHARE * ctx.span_ns:
        return None
    sites = idle.op_sites(ctx.trace, fp32_gemm_sql("l"))
    return Finding(
        code="FP32_GEMM",
        title=f"FP32 matmuls leave the tensor cores unused: {_where(sites)}",
        idle_ns=ns // 2,
        share=ns / 2 / ctx.span_ns,
        locations=[s.location for s in sites],
        evidence=(
            f"{gemm['n']} FP32 GEMM kernels ran {_ms(ns)}, {_pct(ns / compute)} of the "
            f"kernel time (e.g. {sites[0].detail if sites else ''}); half of it counted as "
            "what TF32/BF16 would save"
        ),
        suggestion=(
            "torch.set_float32_matmul_precision('high') (TF32), or torch.autocast('cuda', "
            "dtype=torch.bfloat16) around the forward pass"
        ),
        sites=sites,
    )


RULES: tuple[Callable[[Context], Finding | None], ...] = (
    host_sync,
    input_pipeline,
    python_between_launches,
    blocked_wait,
    launch_bound,
    pageable_copies,
    fp32_gemm,
)


def findings(ctx: Context) -> list[Finding]:
    ranks = {
        int(r["upid"]): int(r["rank"])
        for r in ctx.trace.query("select upid, rank from xpu_process where rank is not null")
    }
    ctx = replace(ctx, ranks=ranks)
    found = [f for rule in RULES if (f := rule(ctx)) is not None]
    return sorted(found, key=lambda f: -f.idle_ns)
