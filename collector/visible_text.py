"""Text from a trace or an input file, made safe to show: names may hold any character.

A converted Kineto name or a recorded Python function can hold control characters.  In
SVG and HTML most C0 controls, lone surrogates and U+FFFE/U+FFFF make the document not
well-formed (XML forbids them even as character references), and DEL and the C1 controls
are invisible parse errors.  On a terminal they are worse: a kernel named
"\\x1b]0;pwned\\x07" retitles the window, "\\x1b[2J" clears the screen, a carriage return
overwrites what the line said.  Every such character is written visibly instead, as Python
would show it (`\\x1b`, `\\ud800`), so the name stays recognisable and findable.

The one place both the page outputs (exporters/report/markup.py) and every command that
prints to a terminal (report, query's table, folded, the summaries of convert, merge and
record, error lines) take it from; core, so producers and readers alike import it downward.
Machine formats (query's JSON and CSV, report --format json) stay exact: JSON escapes
controls itself, and CSV's reader gets back the value that is in the trace.
"""

from __future__ import annotations

import re

# Tab, newline and carriage return are legal XML and stay in the page outputs.
_UNSHOWABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
# On a terminal every C0 and C1 control acts (ESC starts a sequence, CR and BS move the
# cursor), and so do the line separators and the bidirectional overrides (they reorder
# what the line shows).  Within one name a tab or a newline would break its row.
_NOT_PRINTABLE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
# A whole message keeps its line structure: newline and tab are what it means.
_NOT_PRINTABLE_IN_LINES = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """`text` with every character XML cannot carry (or HTML shows as nothing) written as
    its escape sequence; any other text unchanged."""
    return _UNSHOWABLE.sub(_shown, text)


def printable(text: str) -> str:
    """One name or value for a terminal: every character that would act on the terminal
    instead of showing (controls, tab and newline included) written as its escape."""
    return _NOT_PRINTABLE.sub(_shown, text)


def printable_lines(text: str) -> str:
    """A whole message for a terminal: as `printable`, newlines and tabs kept."""
    return _NOT_PRINTABLE_IN_LINES.sub(_shown, text)
