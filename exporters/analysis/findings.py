"""Findings: small rules over the analyses, each with a stable code, the time it explains,
the evidence, the code to change and one suggestion.  Ranked by the time explained.

Every idle rule reports only when its cause explains at least MIN_SHARE of the analysed
span, so a GPU-bound program gets no idle finding.  `idle_ns` is the GPU idle time the cause
explains; for FP32_GEMM (not idle time) it is the time the change would save, estimated as
half of the FP32 GEMMs' time (TF32 or BF16 tensor-core GEMMs run several times faster)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporters.analysis import idle
from exporters.analysis.idle import IdleSummary, Site
from exporters.analysis.launches import LaunchStats
from exporters.perfetto.trace_processor import Trace

MIN_SHARE = 0.03
# FP32 GEMMs must be at least this share of the GPU's compute time to be worth a finding.
FP32_GEMM_SHARE = 0.3
# Kernel names of GEMMs computed in FP32 on the CUDA cores (cuBLAS/CUTLASS SIMT sgemm,
# xmma f32 kernels); tf32 kernels use the tensor cores.
FP32_GEMM_SQL = (
    "(name GLOB '*sgemm*' OR name GLOB '*gemm*f32f32_f32f32*' OR name GLOB '*gemm_fp32*'"
    " OR name GLOB '*s1688gemm*' OR name GLOB '*s884gemm*')"
    " AND name NOT GLOB '*tf32*' AND category = 'kernel'"
)


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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms" if ns >= 1e5 else f"{ns / 1e3:.1f} us"


def _pct(share: float) -> str:
    return f"{100 * share:.1f}%"


def _where(sites: list[Site]) -> str:
    return sites[0].location if sites else "the loop"


def _idle_finding(
    ctx: Context,
    cls: str,
    code: str,
    title: Callable[[list[Site]], str],
    sites: Callable[[], list[Site]],
    evidence: Callable[[int, list[Site]], str],
    suggestion: Callable[[list[Site]], str],
) -> Finding | None:
    ns = ctx.idle.by_class.get(cls, 0)
    if ns < MIN_SHARE * ctx.span_ns:
        return None
    found = sites()
    return Finding(
        code=code,
        title=title(found),
        idle_ns=ns,
        share=ns / ctx.span_ns,
        locations=[s.location for s in found],
        evidence=evidence(ns, found),
        suggestion=suggestion(found),
        sites=found,
    )


def host_sync(ctx: Context) -> Finding | None:
    """HOST_SYNC: the launching thread sat in a sync API or a blocking copy when the GPU ran
    dry, so nothing was queued behind the work that ended.  Advice: read GPU values less
    often, asynchronously."""

    def evidence(ns: int, sites: list[Site]) -> str:
        gaps = ctx.idle.gaps_by_class.get("sync", 0)
        calls = ", ".join(f"{s.detail} from {s.location} ({s.count}x, {_ms(s.ns)})" for s in sites)
        return (
            f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) in {gaps} gaps "
            f"that began while the host waited in a sync: {calls}"
        )

    return _idle_finding(
        ctx,
        "sync",
        "HOST_SYNC",
        lambda s: f"Host sync inside the loop: {s[0].detail if s else 'a sync'} at {_where(s)}",
        lambda: idle.sync_sites(ctx.trace),
        evidence,
        lambda s: (
            f"{_where(s)} makes the host wait for the GPU every time it runs (.item(), .cpu(), "
            ".tolist(), printing a tensor, torch.cuda.synchronize() all do): keep the value on "
            "the GPU and read it every N steps, or copy it with .to('cpu', non_blocking=True) "
            "and read it after the next step is queued"
        ),
    )


def input_pipeline(ctx: Context) -> Finding | None:
    """INPUT_PIPELINE: the launching thread ran input-pipeline code (torch.utils.data, a
    dataset's __getitem__, decoding) while the GPU waited.  Advice: DataLoader workers."""
    return _idle_finding(
        ctx,
        "data_loading",
        "INPUT_PIPELINE",
        lambda s: f"Input pipeline on the critical path: {_where(s)}",
        lambda: idle.sample_sites(ctx.trace, data=True),
        lambda ns, s: (
            f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) while the "
            "launching thread loaded data, in: "
            + ", ".join(f"{x.location} ({_ms(x.ns)})" for x in s)
        ),
        lambda s: (
            f"load batches in background workers: DataLoader(num_workers=N, pin_memory=True, "
            f"persistent_workers=True); or make {_where(s)} cheaper (decode once, cache, "
            "move the transform to the GPU)"
        ),
    )


def python_between_launches(ctx: Context) -> Finding | None:
    """PYTHON_BETWEEN_LAUNCHES: the launching thread ran other code (not a sync, not data
    loading) for longer than the launch path takes before it launched the next op."""
    return _idle_finding(
        ctx,
        "host_compute",
        "PYTHON_BETWEEN_LAUNCHES",
        lambda s: f"CPU work between launches: {_where(s)}",
        lambda: idle.sample_sites(ctx.trace, data=False),
        lambda ns, s: (
            f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) while the "
            "launching thread ran other code, in: "
            + ", ".join(f"{x.location} ({_ms(x.ns)})" for x in s)
        ),
        lambda s: (
            f"take {_where(s)} off the GPU's critical path: do it before the loop or in a "
            "DataLoader worker or another thread, vectorise it on the GPU, or queue the next "
            "step's GPU work before running it"
        ),
    )


def launch_bound(ctx: Context) -> Finding | None:
    """LAUNCH_BOUND: the GPU waits for the launch path (short host parts between launches,
    launch latency): kernels too small for the CPU to keep up with.  Advice: CUDA graphs,
    torch.compile, fusion, more work per kernel."""
    st = ctx.launches
    return _idle_finding(
        ctx,
        "launch",
        "LAUNCH_BOUND",
        lambda s: f"Launch-bound: the GPU waits for small kernels launched from {_where(s)}",
        lambda: idle.launch_sites(ctx.trace),
        lambda ns, s: (
            f"the GPU idled {_ms(ns)} ({_pct(ns / ctx.span_ns)} of the span) waiting for "
            f"launches; median kernel {_ms(st.kernel_p50_ns)} vs its launch call "
            f"{_ms(st.call_p50_ns)}; {st.shorter_than_call} of {st.launches} kernels ran "
            f"shorter than their launch call; launch latency p50 {_ms(st.latency_p50_ns)}; "
            "sites: " + ", ".join(f"{x.location} ({x.count} launches)" for x in s)
        ),
        lambda s: (
            "capture the step in a CUDA graph (torch.compile(mode='reduce-overhead') or "
            "torch.cuda.graphs), fuse the small ops (torch.compile), or give each kernel "
            f"more work (a larger batch) around {_where(s)}"
        ),
    )


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
        f"where {FP32_GEMM_SQL} and {IN_FOCUS}"
    )[0]
    compute = ctx.trace.scalar(
        "select coalesce(sum(dur), 0) from xpu_analysis_op "
        f"where category = 'kernel' and {IN_FOCUS}"
    )
    ns = int(gemm["ns"])
    if not compute or ns < FP32_GEMM_SHARE * compute or ns // 2 < MIN_SHARE * ctx.span_ns:
        return None
    sites = idle.op_sites(
        ctx.trace, FP32_GEMM_SQL.replace("name", "l.name").replace("category", "l.category")
    )
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
    launch_bound,
    pageable_copies,
    fp32_gemm,
)


def findings(ctx: Context) -> list[Finding]:
    found = [f for rule in RULES if (f := rule(ctx)) is not None]
    return sorted(found, key=lambda f: -f.idle_ns)
