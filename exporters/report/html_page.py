"""The report as one self-contained HTML page: inline CSS, inline SVG (utilisation timeline
and flamegraph), the flamegraph's inline script, no external URL of any kind, so it opens
from a file on a machine without network."""

from __future__ import annotations

from exporters.report import units
from exporters.report.cells import cell_text, is_numeric
from exporters.report.flamegraph import render_svg
from exporters.report.markup import escape
from exporters.report.queries import Report, Section
from exporters.report.timeline import render_timeline_svg

FLAME_ID = "flamegraph"

_CSS = """
body { font-family: system-ui, 'DejaVu Sans', sans-serif; margin: 0 24px 40px; color: #222;
       background: #fff; }
h1 { font-size: 22px; margin: 18px 0 6px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 3px; }
nav a { margin-right: 14px; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 3px 8px; border-bottom: 1px solid #eee; vertical-align: top; }
th { text-align: left; background: #f4f5f7; position: sticky; top: 0; }
td.num, th.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.name { max-width: 720px; overflow-wrap: anywhere; font-family: ui-monospace, monospace;
          font-size: 12px; }
table.facts td { border: none; padding: 1px 12px 1px 0; }
table.facts td:first-child { font-weight: 600; }
.note { color: #666; font-size: 12px; margin: 4px 0; }
.empty { color: #666; font-style: italic; }
.tl-dev { font-size: 12px; font-weight: 600; }
.tl-str, .tl-axis { font-size: 11px; fill: #444; }
.scroll { overflow-x: auto; }
"""


def _findings(report: Report) -> str:
    """The findings, ranked, each with where, evidence and the change to make."""
    analysis = report.analysis
    if analysis is None:
        return ""
    out = ['<h2 id="findings">Findings</h2>']
    if not analysis.findings:
        out.append('<p class="empty">none: no cause explains a sizeable share of the span</p>')
        return "\n".join(out)
    out.append('<ol class="findings">')
    for f in analysis.findings:
        where = f"<div><b>where</b>: {escape(', '.join(f.locations))}</div>" if f.locations else ""
        out.append(
            f'<li id="finding-{escape(f.code)}"><div><b>{escape(f.title)}</b> '
            f"<code>{escape(f.code)}</code> {escape(units.duration(f.idle_ns))} "
            f"({100 * f.share:.1f}% of the span)</div>{where}"
            f"<div><b>evidence</b>: {escape(f.evidence)}</div>"
            f"<div><b>change</b>: {escape(f.suggestion)}</div></li>"
        )
    out.append("</ol>")
    return "\n".join(out)


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Nothing on this page loads from anywhere; the policy makes sure of it.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
        f"<title>xpu-perf report: {escape(report.trace)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>xpu-perf report: {escape(report.trace)}</h1>",
        _nav(report),
        # The first screen: what was analysed (one span, one GPU busy figure), then the
        # findings; the trace's full facts close the page.
        _facts(report.summary),
        _findings(report),
    ]
    for section in (*report.lead_sections, *report.sections):
        parts.append(_section(section))
        if section.key == "gpu_streams":
            parts.append('<h2 id="gpu_timeline">GPU utilisation over time</h2>')
            parts.append(
                '<p class="note">Busy share of each time bin, per device (all its streams) '
                "and per stream; hover a bar for its time and value.</p>"
            )
            parts.append(f'<div class="scroll">{render_timeline_svg(report.timeline)}</div>')
    parts.append('<h2 id="flamegraph_section">Flamegraph (merge mode)</h2>')
    if report.flame is None:
        parts.append(f'<p class="empty">{escape(report.flame_note)}</p>')
    else:
        parts.append(
            f'<p class="note">{escape(report.flame_note)}. Click a frame to zoom, '
            "“Search” to highlight frames by regular expression.</p>"
        )
        total = sum(weight for _, weight in report.flame.lines)
        svg = render_svg(
            report.flame.lines,
            unit=report.flame.unit,
            title="CPU context → CUDA API → GPU op, and sampled CPU stacks",
            subtitle=f"total {units.weight(total, report.flame.unit)}",
            graph_id=FLAME_ID,
        )
        parts.append(f'<div class="scroll">{svg}</div>')
    parts.append('<h2 id="trace_details">Trace details</h2>')
    parts.append(_facts(report.facts))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _nav(report: Report) -> str:
    links = []
    if report.analysis is not None:
        links.append(("findings", "Findings"))
    for section in (*report.lead_sections, *report.sections):
        links.append((section.key, section.title.split(" (")[0].split(":")[0]))
        if section.key == "gpu_streams":
            links.append(("gpu_timeline", "GPU utilisation over time"))
    links.append(("flamegraph_section", "Flamegraph"))
    links.append(("trace_details", "Trace details"))
    return "<nav>" + "".join(f'<a href="#{k}">{escape(t)}</a>' for k, t in links) + "</nav>"


def _facts(facts: list[tuple[str, str]]) -> str:
    rows = "".join(
        f"<tr><td>{escape(key)}</td><td>{escape(value)}</td></tr>" for key, value in facts
    )
    return f'<table class="facts">{rows}</table>'


def _section(section: Section) -> str:
    out = [f'<h2 id="{section.key}">{escape(section.title)}</h2>']
    if section.note:
        out.append(f'<p class="note">{escape(section.note)}</p>')
    if not section.rows:
        out.append(f'<p class="empty">{escape(section.empty)}</p>')
        return "\n".join(out)
    head = "".join(
        f'<th class="{"num" if is_numeric(c) else "name"}">{escape(c.title)}</th>'
        for c in section.columns
    )
    body = []
    for row in section.rows:
        cells = []
        for col in section.columns:
            value = row.get(col.key)
            text = escape(cell_text(col, value))
            if is_numeric(col):
                raw = "" if value is None else f' data-v="{value}"'
                cells.append(f'<td class="num"{raw}>{text}</td>')
            elif col.kind in ("stack", "name", "kernel"):
                # The cell shows the short form; the full name or stack is its tooltip.
                full = row.get(col.key + "_full", value)
                cells.append(f'<td class="name" title="{escape(str(full))}">{text}</td>')
            else:
                cells.append(f"<td>{text}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    out.append(
        f'<div class="scroll"><table id="table-{section.key}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
    return "\n".join(out)
