"""Text made safe for the SVG and HTML outputs: names from a trace may hold any character.

XML 1.0 forbids most C0 controls, lone surrogates and U+FFFE/U+FFFF even as character
references, so one such name (a converted Kineto name, a recorded Python function) made a
standalone SVG not well-formed and a browser stopped drawing at it.  HTML calls DEL and the
C1 controls parse errors too, and all of them are invisible.  They are written visibly
instead, as Python would show them (`\\x01`, `\\ud800`), so the name stays recognisable
(`visible`, from collector/visible_text.py: the terminal outputs use the same rules).
"""

from __future__ import annotations

from html import escape as _html_escape

from collector.visible_text import visible

__all__ = ["escape", "escape_text", "visible"]


def escape(text: str, quote: bool = True) -> str:
    """html.escape's contract (&, < and >, and quotes with `quote`, as entities: an
    attribute value or element text), unshowable characters visible.  html.escape, not
    xml.sax's, whose import pulls in urllib and http.client at every report's start."""
    return _html_escape(visible(text), quote=quote)


def escape_text(text: str) -> str:
    """Element text: as `escape`, quotes left as they are."""
    return _html_escape(visible(text), quote=False)
