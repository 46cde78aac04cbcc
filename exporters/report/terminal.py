"""The report as terminal tables (rich), with a text sparkline per GPU and stream."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from exporters.analysis.findings import MIN_SHARE
from exporters.report import units
from exporters.report.cells import cell_text, cut, is_numeric
from exporters.report.queries import Report, Section, Timeline
from exporters.report.timeline import busy_fractions, row_label

SPARK = " ▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60


def print_report(report: Report, console: Console | None = None) -> None:
    console = console or Console(width=max(100, Console().width))
    console.rule(f"[bold]xpu-perf report: {report.trace}")
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for key, value in report.facts:
        facts.add_row(key, value)
    console.print(facts)
    print_findings(console, report)
    for section in report.lead_sections:
        console.print()
        print_section(console, section)
    for section in report.sections:
        console.print()
        print_section(console, section)
        if section.key == "gpu_streams":
            _print_sparklines(console, report.timeline)


def print_findings(console: Console, report: Report) -> None:
    """The findings, ranked: what to change first."""
    analysis = report.analysis
    if analysis is None:
        return
    console.print()
    if not analysis.findings:
        console.print(
            "[bold]Findings[/bold]: none - no cause explains "
            f"{_pct_text(MIN_SHARE)} of the analysed span"
        )
        return
    console.print("[bold]Findings[/bold] (ranked by the time each explains)")
    for i, f in enumerate(analysis.findings, 1):
        console.print(
            f"[bold]{i}. {escape(f.title)}[/bold]  [dim]{f.code}[/dim]  "
            f"{units.duration(f.idle_ns)} ({_pct_text(f.share)} of the span)"
        )
        if f.locations:
            console.print(f"   where: {escape(', '.join(f.locations))}")
        console.print(f"   evidence: {escape(f.evidence)}")
        console.print(f"   change: {escape(f.suggestion)}")


def _pct_text(share: float) -> str:
    return f"{100 * share:.1f}%"


def print_section(console: Console, section: Section) -> None:
    if not section.rows:
        console.print(f"[bold]{section.title}[/bold]: {section.empty}")
        return
    table = Table(title=section.title, title_justify="left", title_style="bold")
    texts = [[cell_text(col, row.get(col.key)) for col in section.columns] for row in section.rows]
    widths = [
        max(len(col.title), *(len(r[i]) for r in texts)) for i, col in enumerate(section.columns)
    ]
    # Numbers keep their width; kernel names and stacks (can be hundreds of characters)
    # share what is left of the console and are cut with an ellipsis, never wrapped.
    numeric = [is_numeric(col) for col in section.columns]
    fixed = sum(w + 3 for w, num in zip(widths, numeric, strict=True) if num) + 1
    names = numeric.count(False) or 1
    name_width = max(16, (console.width - fixed) // names - 3)
    for col, width in zip(section.columns, widths, strict=True):
        if is_numeric(col):
            table.add_column(col.title, justify="right", no_wrap=True, min_width=width)
        else:
            table.add_column(
                col.title, overflow="ellipsis", no_wrap=True, max_width=min(width, name_width)
            )
    for row_texts in texts:
        table.add_row(
            *(
                text if num else cut(text, min(width, name_width), col.kind == "stack")
                for col, text, width, num in zip(
                    section.columns, row_texts, widths, numeric, strict=True
                )
            )
        )
    if section.note:
        table.caption = section.note
        table.caption_justify = "left"
    console.print(table)


def sparkline(fractions: list[float], width: int = SPARK_WIDTH) -> str:
    """Bins averaged down to `width` characters, each one of 9 heights (' ' = idle)."""
    n = len(fractions)
    if n == 0:
        return ""
    width = min(width, n)
    chars = []
    for i in range(width):
        chunk = fractions[i * n // width : (i + 1) * n // width]
        level = sum(chunk) / len(chunk)
        # Any work at all shows at least the lowest bar: a busy bin must not look idle.
        index = 0 if level <= 0 else max(1, round(level * (len(SPARK) - 1)))
        chars.append(SPARK[index])
    return "".join(chars)


def _print_sparklines(console: Console, timeline: Timeline) -> None:
    if not timeline.rows:
        return
    table = Table(
        title=f"GPU busy over time ({units.duration(timeline.dur_ns)}, "
        f"{timeline.bins} bins of {units.duration(timeline.bin_ns)})",
        title_justify="left",
        title_style="bold",
    )
    table.add_column("device / stream", no_wrap=True, overflow="ellipsis", max_width=40)
    table.add_column("busy", justify="right", min_width=6)
    table.add_column("0 → end of trace", no_wrap=True)
    for row in timeline.rows:
        fractions = busy_fractions(row, timeline)
        busy = 100.0 * sum(row.busy_ns) / timeline.dur_ns
        table.add_row(
            row_label(row), units.percent(busy), Text(sparkline(fractions), style="green")
        )
    console.print(table)
