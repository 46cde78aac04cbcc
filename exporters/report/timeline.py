"""GPU utilisation over time as inline SVG: one row per device ('*', all its streams) and
per stream, one bar per time bin, bar height = busy fraction of the bin."""

from __future__ import annotations

from exporters.report import units
from exporters.report.markup import escape
from exporters.report.queries import StreamBusy, Timeline

LABEL_W = 300
DEVICE_ROW_H = 34
STREAM_ROW_H = 22
AXIS_H = 24
TICKS = 6


def row_label(row: StreamBusy) -> str:
    return row.device if row.stream == "*" else f"    {row.stream}"


def busy_fractions(row: StreamBusy, timeline: Timeline) -> list[float]:
    """Busy share of each bin; the last bin ends with the trace, so it may be shorter."""
    out = []
    for i, busy in enumerate(row.busy_ns):
        length = min(timeline.bin_ns, timeline.dur_ns - i * timeline.bin_ns)
        out.append(min(1.0, busy / length) if length > 0 else 0.0)
    return out


def render_timeline_svg(timeline: Timeline, width: int = 1160) -> str:
    """The plot, or a short SVG note when the trace has no GPU ops."""
    if not timeline.rows:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="30">'
            '<text x="4" y="20" class="tl-note">no GPU ops: nothing to plot</text></svg>'
        )
    plot_w = width - LABEL_W - 10
    bar_w = plot_w * timeline.bin_ns / timeline.dur_ns  # the last bin may be cut short
    heights = [DEVICE_ROW_H if r.stream == "*" else STREAM_ROW_H for r in timeline.rows]
    height = sum(heights) + AXIS_H + 6
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="gpu-timeline" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" data-bins="{timeline.bins}" '
        f'data-bin-ns="{timeline.bin_ns}">'
    ]
    y = 0
    for row, h in zip(timeline.rows, heights, strict=True):
        total = sum(row.busy_ns)
        device = row.stream == "*"
        out.append(
            f'<g class="tl-row" data-device="{escape(row.device)}" '
            f'data-stream="{escape(row.stream)}" data-busy-ns="{total}">'
        )
        out.append(
            f'<rect x="{LABEL_W}" y="{y + 1}" width="{plot_w:.1f}" height="{h - 2}" '
            f'fill="{"#eef0f4" if device else "#f5f6f8"}"/>'
        )
        label = f"{row_label(row)}  {units.percent(100.0 * total / timeline.dur_ns)}"
        out.append(
            f'<text x="4" y="{y + h / 2 + 4:.1f}" class="{"tl-dev" if device else "tl-str"}" '
            f'xml:space="preserve">{escape(label)}</text>'
        )
        color = "#2e7d32" if device else "#66a86a"
        for i, frac in enumerate(busy_fractions(row, timeline)):
            if frac <= 0:
                continue
            bh = max(1.0, frac * (h - 4))
            start_ms = i * timeline.bin_ns / 1e6
            out.append(
                f'<rect x="{LABEL_W + i * bar_w:.2f}" y="{y + h - 2 - bh:.2f}" '
                f'width="{max(min(bar_w, plot_w - i * bar_w) - 0.5, 0.5):.2f}" height="{bh:.2f}" '
                f'fill="{color}">'
                f"<title>{escape(row_label(row).strip())} at +{start_ms:.3f} ms: "
                f"{100 * frac:.1f}% busy</title></rect>"
            )
        out.append("</g>")
        y += h
    # Time axis: ms since the start of the trace.
    span_ms = timeline.dur_ns / 1e6
    out.append(
        f'<line x1="{LABEL_W}" y1="{y + 2}" x2="{LABEL_W + plot_w:.1f}" y2="{y + 2}" '
        'stroke="#888"/>'
    )
    for k in range(TICKS + 1):
        x = LABEL_W + plot_w * k / TICKS
        anchor = "start" if k == 0 else "end" if k == TICKS else "middle"
        out.append(
            f'<line x1="{x:.1f}" y1="{y + 2}" x2="{x:.1f}" y2="{y + 6}" stroke="#888"/>'
            f'<text x="{x:.1f}" y="{y + 18}" text-anchor="{anchor}" class="tl-axis">'
            f"{units.duration(span_ms * k / TICKS * 1e6) if k else '0'}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)
