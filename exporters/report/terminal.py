"""The report as terminal text (rich), every line within the terminal's width.

By default one screen of answers: a short header (one span, one GPU busy figure), the
findings, the steps, the idle causes and a few key tables; `--all` adds every other table
(streams and their sparklines, copies, API calls, launch latency, queues, counters...).
Long names are cut in the middle with '…' (a kernel's telling template argument sits at its
end), tables that still do not fit lose their optional columns, and no line ends in spaces.

Every text from the trace (names, locations, the findings' words) goes through `printable`
(collector/visible_text.py) before rich measures it: a control character would act on the
terminal (a kernel named "\\x1b]0;..." retitles it) and is shown as `\\x1b` instead; and
the console reads no markup, so a name holding "[bold]" prints as written.
"""

from __future__ import annotations

import io
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import replace

from rich import box
from rich.console import Console, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from collector.visible_text import printable, printable_lines
from exporters.analysis.findings import MIN_SHARE
from exporters.report import units
from exporters.report.cells import cell_text, cut, is_numeric
from exporters.report.queries import Report, Section, Timeline
from exporters.report.timeline import busy_fractions, row_label

SPARK = " ▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60
DEFAULT_WIDTH = 100  # where the output is no terminal and COLUMNS is not set
MIN_WIDTH = 60
MIN_NAME = 10  # a name column narrower than this reads nothing: drop columns instead
# The tables of the one-screen report, after the findings, steps and idle causes.
KEY_SECTIONS = ("kernels", "top_functions_total", "launch_stacks")
KEY_ROWS = 8  # rows per key table on the one screen (--top sets it)
_TRAILING = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$")


def terminal_width() -> int:
    """COLUMNS where set (as a shell exports it, or a user), else the terminal's width, else
    DEFAULT_WIDTH (a pipe or a file)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(MIN_WIDTH, int(columns))
    try:
        if sys.stdout.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (OSError, ValueError):
        pass
    return DEFAULT_WIDTH


class Screen:
    """A console that renders into memory: `flush()` writes the lines without trailing
    spaces (rich pads grids and tables to their width)."""

    def __init__(self, width: int | None = None, color: bool | None = None) -> None:
        self.width = width or terminal_width()
        tty = sys.stdout.isatty() if color is None else color
        self._buf = io.StringIO()
        self.console = Console(
            file=self._buf,
            width=self.width,
            force_terminal=tty,
            no_color=not tty,
            highlight=False,
            markup=False,  # a name's "[bold red]" is text, not a style
            emoji=False,
            soft_wrap=False,
        )

    def print(self, *items: RenderableType | str) -> None:
        self.console.print(*items)

    def text(self) -> str:
        lines = self._buf.getvalue().splitlines()
        return "".join(_TRAILING.sub(r"\1", line) + "\n" for line in lines)

    def flush(self, out: io.TextIOBase | None = None) -> None:
        (out or sys.stdout).write(self.text())
        self._buf = io.StringIO()
        self.console.file = self._buf


def print_report(
    report: Report,
    screen: Screen | None = None,
    full: bool = False,
    trace_path: str | None = None,
    rows: int | None = None,
) -> None:
    """The report: one screen of answers, or (`full`) every table and fact. `rows`: rows per
    key table on the one screen (default KEY_ROWS; `--all` shows the sections' own)."""
    screen = screen or Screen()
    title = Text(printable(f"xpu-perf report: {report.trace}"), style="bold")
    screen.console.rule(title if len(title) < screen.width - 4 else "")
    _print_facts(screen, report.facts if full else report.summary)
    print_findings(screen, report)
    for section in report.lead_sections:
        screen.print()
        print_section(screen, section if full else _head(section, rows or KEY_ROWS))
    shown = [s for s in report.sections if full or (s.key in KEY_SECTIONS and s.rows)]
    for section in shown:
        screen.print()
        print_section(screen, section if full else _head(section, rows or KEY_ROWS))
        if section.key == "gpu_streams":
            _print_sparklines(screen, report.timeline)
    if not full:
        screen.print()
        left = [s.title for s in report.sections if s not in shown]
        more = (
            f"{len(left)} more tables (GPU busy per stream over time, copies, CUDA API calls, "
            "launch latency, counters...) with --all"
            if left
            else "every table with --all"
        )
        where = printable(trace_path or report.trace)
        _print_wrapped(
            screen,
            f"{more}; the timeline in the Perfetto UI: xpu-perf view {where}",
            style="dim",
        )
    screen.flush()


def _head(section: Section, n: int) -> Section:
    """The section's first n rows; of the steps, the n slowest, slowest first."""
    if len(section.rows) <= n:
        return section
    if section.key == "steps":
        total = section.title.rsplit(" of ", 1)[-1] if " slowest of " in section.title else ""
        rows = sorted(section.rows, key=lambda r: -int(r.get("dur") or 0))[:n]
        title = (
            section.title.split(":")[0]
            + f": the {n} slowest"
            + (f" of {total}" if total else f" of {len(section.rows)}")
        )
        return replace(section, rows=rows, title=title)
    return replace(section, rows=section.rows[:n])


def _print_facts(screen: Screen, facts: Sequence[tuple[str, str]]) -> None:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in facts:
        grid.add_row(printable(key), printable(value))
    screen.print(grid)


def _print_wrapped(screen: Screen, text: str, indent: int = 0, style: str = "") -> None:
    screen.print(Padding(Text(printable_lines(text), style=style), (0, 0, 0, indent)))


def print_findings(screen: Screen, report: Report) -> None:
    """The findings, ranked: what to change first; every line indented under its number and
    wrapped within the width."""
    analysis = report.analysis
    if analysis is None:
        return
    screen.print()
    if not analysis.findings:
        _print_wrapped(
            screen,
            f"Findings: none - no cause explains {_pct_text(MIN_SHARE)} of the analysed span",
            style="bold",
        )
        return
    screen.print(Text("Findings (ranked by the time each explains)", style="bold"))
    for i, f in enumerate(analysis.findings, 1):
        head = Table.grid(padding=(0, 1))
        head.add_column(no_wrap=True, justify="right", min_width=3)
        head.add_column(overflow="fold")
        head.add_row(
            Text(f"{i}.", style="bold"),
            Text.assemble(
                (printable(f.title), "bold"),
                f"  {units.duration(f.idle_ns)} ({_pct_text(f.share)} of the span)",
            ),
        )
        screen.print(head)
        body = Table.grid(padding=(0, 1))
        body.add_column(no_wrap=True, style="dim")
        body.add_column(overflow="fold")
        if f.locations:
            body.add_row("where", printable(", ".join(f.locations)))
        body.add_row("evidence", printable(f.evidence))
        body.add_row("change", printable(f.suggestion))
        body.add_row("code", Text(printable(f.code), style="dim"))
        screen.print(Padding(body, (0, 0, 0, 4)))


def _pct_text(share: float) -> str:
    return f"{100 * share:.1f}%"


def _blank(texts: list[list[str]], i: int) -> bool:
    """Column i says nothing: every cell 0, '-' or empty (no NCCL, no memset)."""
    return all(r[i] in _NOTHING for r in texts)


_NOTHING = ("", "-", "0", "0 ns", "0.0%", "0 B")


def _layout(
    section: Section, texts: list[list[str]], width: int
) -> tuple[list[int], dict[int, int]]:
    """Which columns fit `width` (indices) and the width of each name column: names share
    what the numbers leave; where that is under MIN_NAME, the optional columns go (highest
    `optional` first), then columns from the right."""
    cols = list(range(len(section.columns)))
    natural = [
        max(len(c.title), *(len(r[i]) for r in texts)) for i, c in enumerate(section.columns)
    ]
    blank = {i for i in cols if i > 0 and _blank(texts, i)}
    cols = [i for i in cols if i not in blank] if len(cols) - len(blank) >= 2 else cols
    while True:
        names = [i for i in cols if not is_numeric(section.columns[i])]
        fixed = sum(natural[i] for i in cols if i not in names) + 3 * len(cols) + 1
        room = width - fixed
        if not names:
            if room >= 0 or len(cols) <= 2:
                return cols, {}
        else:
            # What the names need to read: their whole width, up to 2/5 of the line; at
            # the least MIN_NAME characters each (or their whole width, if less).
            want = sum(min(natural[i], max(MIN_NAME, width * 2 // 5)) for i in names)
            least = sum(min(natural[i], MIN_NAME) for i in names)
            optional = [i for i in cols if section.columns[i].optional]
            if room >= want or (not optional and room >= least) or len(cols) <= 2:
                return cols, _shares(names, natural, max(least, room))
        optional = [i for i in cols if section.columns[i].optional]
        drop = (
            max(optional, key=lambda i: (section.columns[i].optional, i)) if optional else cols[-1]
        )
        cols.remove(drop)


def _shares(names: list[int], natural: list[int], room: int) -> dict[int, int]:
    """`room` characters over the name columns: the narrow ones keep their width, the
    rest share what is left."""
    widths: dict[int, int] = {}
    pending = sorted(names, key=lambda i: natural[i])
    while pending:
        fair = room // len(pending)
        i = pending[0]
        if natural[i] <= fair:
            widths[i] = natural[i]
            room -= natural[i]
            pending.pop(0)
            continue
        for j in pending:
            widths[j] = max(1, fair)
        break
    return widths


def print_section(screen: Screen, section: Section) -> None:
    if not section.rows:
        _print_wrapped(screen, f"{section.title}: {section.empty}")
        return
    texts = [
        [printable(cell_text(col, row.get(col.key))) for col in section.columns]
        for row in section.rows
    ]
    cols, name_widths = _layout(section, texts, screen.width)
    table = Table(box=box.ROUNDED, show_edge=True, pad_edge=True, expand=False)
    for i in cols:
        col = section.columns[i]
        if i in name_widths:
            table.add_column(
                cut(printable(col.title), name_widths[i], False),
                no_wrap=True,
                overflow="ellipsis",
                width=name_widths[i],
            )
        else:
            table.add_column(printable(col.title), justify="right", no_wrap=True)
    for row_texts in texts:
        table.add_row(
            *(
                cut(
                    row_texts[i],
                    name_widths[i],
                    section.columns[i].kind == "stack",
                    scopes=section.columns[i].kind in ("name", "text"),
                )
                if i in name_widths
                else row_texts[i]
                for i in cols
            )
        )
    _print_wrapped(screen, section.title, style="bold")
    screen.print(table)
    hidden = [
        c.title for i, c in enumerate(section.columns) if i not in cols and not _blank(texts, i)
    ]
    note = section.note
    if hidden:
        note = (note + "; " if note else "") + "not shown at this width: " + ", ".join(hidden)
    if note:
        _print_wrapped(screen, note, style="dim")


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


def _print_sparklines(screen: Screen, timeline: Timeline) -> None:
    if not timeline.rows:
        return
    labels = [printable(row_label(row)) for row in timeline.rows]
    label_w = min(max(len(s) for s in labels), max(MIN_NAME, screen.width // 4))
    busy_w = 6
    spark_w = max(10, min(SPARK_WIDTH, screen.width - label_w - busy_w - 10))
    table = Table(box=box.ROUNDED)
    table.add_column("device / stream", no_wrap=True, overflow="ellipsis", width=label_w)
    table.add_column("busy", justify="right", width=busy_w)
    table.add_column("0 → end", no_wrap=True, width=spark_w)
    for row, label in zip(timeline.rows, labels, strict=True):
        fractions = busy_fractions(row, timeline)
        busy = 100.0 * sum(row.busy_ns) / timeline.dur_ns
        table.add_row(
            cut(label, label_w, False),
            units.percent(busy),
            Text(sparkline(fractions, spark_w), style="green"),
        )
    _print_wrapped(
        screen,
        f"GPU busy over time ({units.duration(timeline.dur_ns)}, "
        f"{timeline.bins} bins of {units.duration(timeline.bin_ns)})",
        style="bold",
    )
    screen.print(table)
