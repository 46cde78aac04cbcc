"""Issue 34 C6: names holding control characters (a converted Kineto name, a recorded
Python function) still make well-formed SVG and HTML.

XML 1.0 forbids most C0 controls even as character references, so one such name in a
frame made the flamegraph SVG not well-formed: a browser drew the graph up to that frame
and stopped.  The outputs show such characters visibly (`\\x01`) instead.
"""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from collector import model
from exporters.perfetto.writer import TraceWriter
from exporters.report.flamegraph import render_svg
from exporters.report.markup import escape, escape_text, visible
from tests.slice_batches import batched

from .conftest import run_cli

# Every character XML 1.0 forbids, and the invisible ones it allows but HTML calls errors.
_FORBIDDEN_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_INVISIBLE = re.compile("[\x7f-\x9f]")
CONTROLS = "".join(chr(c) for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20)))
ODD = CONTROLS + "\x7f\x85\x9f\ud800\udfff\ufffe\uffff"

SVG = "{http://www.w3.org/2000/svg}"


def _assert_clean_xml(text: str) -> ET.Element:
    assert not _FORBIDDEN_XML.search(text)
    assert not _INVISIBLE.search(text)
    return ET.fromstring(text)  # well-formed, or this raises


def test_visible_replaces_only_what_xml_and_html_cannot_carry() -> None:
    assert visible("a\x01b\x1b[31mc\x7fd") == "a\\x01b\\x1b[31mc\\x7fd"
    assert visible("\ud800\ufffe") == "\\ud800\\ufffe"
    kept = "tab\tnew\nline\r é 漢字 \U0001f600 <&>"
    assert visible(kept) == kept
    assert escape("<a\x00&'") == "&lt;a\\x00&amp;&#x27;"
    assert escape_text("<a\x00&'") == "&lt;a\\x00&amp;'"
    for c in ODD:
        assert not _FORBIDDEN_XML.search(visible(c)) and visible(visible(c)) == visible(c)


def test_svg_with_every_control_character_is_well_formed() -> None:
    # A frame per character, wide and narrow (data for the script), and in the title.
    lines = [(f"main;f{c}x;k{c}", 1000.0) for c in ODD] + [(f"main;thin{c}", 0.001) for c in ODD]
    svg = render_svg(lines, title=f"t{CONTROLS}", subtitle=f"s{ODD}")
    root = _assert_clean_xml(svg)
    tips = [t.text or "" for t in root.iter(f"{SVG}title")]
    for c in ODD:
        assert any(tip.startswith(f"k{visible(c)}\n") for tip in tips), repr(c)


def _trace_with_control_names(path: Path) -> Path:
    """A recorded-like trace: Python functions, a thread, a kernel and an API call whose
    names hold control characters."""
    pid = 11
    stack = model.Stack(
        (
            model.Frame("main", "/bin/train", 0x10),
            model.Frame("step\x01 (train.py:3)", "/w/train.py", 3),
            model.Frame("fwd\x1b[31m\x00 (model.py:9)", "/w/model.py", 9),
            model.Frame("cudaLaunchKernel", "/usr/lib/libcudart.so.12", 0x30),
        )
    )
    events: list[model.Event] = [
        model.ProcessInfo(pid, "train\x07"),
        model.ThreadInfo(pid, pid, "main\x08"),
        model.GpuDevice(0, "H100\x0c"),
    ]
    for i in range(50):
        ts = 1_000_000 + i * 100_000
        events.append(model.CpuSample(pid, pid, ts, stack, cpu=0))
        flow = model.flow_id(pid, i + 1)
        events.append(
            model.CpuSlice(
                pid,
                pid,
                ts + 10,
                5_000,
                "cudaLaunchKernel",
                "cuda_api",
                {"correlation_id": i + 1},
                flow_ids=(flow,),
                launch_stack=stack,
            )
        )
        events.append(
            model.GpuOp(
                0,
                7,
                ts + 20_000,
                50_000,
                "gemm\x01\x1f<kernel>",
                "kernel",
                correlation_id=i + 1,
                terminating_flow_ids=(flow,),
            )
        )
    events.sort(key=lambda e: getattr(e, "ts", 0))
    with TraceWriter(path, sample_frequency_hz=999) as writer:
        writer.producer("test").write_all(batched(events))
    return path


def _converted_trace(tmp_path: Path) -> Path:
    """A Kineto JSON whose kernel and CPU op names hold control characters, converted."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "p\u0002"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm\u0003", "pid": 1, "tid": 1,
         "ts": 10, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 20, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "volta\u0001_sgemm\u001b", "pid": 0, "tid": 7,
         "ts": 30, "dur": 50, "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]  # fmt: skip
    src = tmp_path / "ctl.json.gz"
    with gzip.open(src, "wt") as f:
        json.dump({"traceEvents": events}, f)
    out = tmp_path / "ctl.perfetto-trace"
    run_cli("convert", src, "-o", out, "-q", check=True)
    return out


def _svgs_of_html(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


@pytest.mark.parametrize("source", ["recorded", "converted"])
def test_flamegraph_and_report_of_control_names_are_well_formed(
    source: str, tmp_path: Path
) -> None:
    if source == "recorded":
        trace = _trace_with_control_names(tmp_path / "ctl.perfetto-trace")
        expect = ("step\\x01 (train.py:3)", "gemm\\x01\\x1f&lt;kernel&gt;")
    else:
        trace = _converted_trace(tmp_path)
        expect = ("volta\\x01_sgemm\\x1b",)
    svg = tmp_path / "flame.svg"
    run_cli("flamegraph", trace, "-o", svg, check=True)
    text = svg.read_text(encoding="utf-8")
    root = _assert_clean_xml(text)
    drawn = [g for g in root.iter(f"{SVG}g") if g.get("class") == "fg-f"]
    assert len(drawn) >= 3
    for name in expect:
        assert name in text, (name, text[:2000])
    page = tmp_path / "report.html"
    run_cli("report", trace, "-o", page, check=True)
    html = page.read_text(encoding="utf-8")
    assert not _FORBIDDEN_XML.search(html) and not _INVISIBLE.search(html)
    svgs = _svgs_of_html(html)
    assert svgs  # the flamegraph and the timeline, inlined
    for part in svgs:
        ET.fromstring(part)
    assert expect[-1] in html
