"""Big traces (issue 24): convert beside the bare JSON parser, load, folded, report, the
second look, peak RSS, all in one run on the same machine.

    python bench/scale.py --slices 1000000 --work /tmp/scale [--sql-profile]

For each size: a Kineto trace of that many complete events built from real outside traces
(bench/scale_input.py; kept in --work for the next run), then, each step a subprocess of
its own (peak RSS from wait4):
- parse: the trace streamed through ijson alone (`ijson.items(f, "traceEvents.item")`,
  the C backend): the floor the issue holds convert to;
- convert's reader: the trace streamed through what convert reads it with
  (collector/sources/kineto_json.py: orjson a run of events at a time) alone;
- convert: `xpu-perf convert`; with --rounds N, the parses and convert alternate N times (this
  VM is shared and noisy: a ratio is only worth something within one round) and the
  medians, each round's ratio and the median ratio are kept;
- with --convert-only, nothing after convert (the looks below need minutes per size);
- load: `query TRACE "select count(*) from slice" --no-cache` (the engine loading it);
- folded / report, --no-cache: every statement on the engine;
- first look / second look: `folded --mode gpu` and `report -o page.html` with the result
  cache, the second answered from it;
- with --sql-profile: report's and folded's statements timed one by one in-process (CPU
  seconds), the costliest printed (what to make cheaper).
With --trace, only the looks are measured and merged into the results' row of that size.
Before/after tables of two checkouts: bench/scale_ab.py.
Results: a table on stdout and bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import scale_input  # noqa: E402
from measured import run_measured  # noqa: E402

from collector import cache_trust  # noqa: E402

PARSE = """
import sys, ijson
n = 0
with open(sys.argv[1], "rb") as f:
    for _ in ijson.items(f, "traceEvents.item", use_float=True):
        n += 1
print(n)
"""


# What convert reads the file with (collector/sources/kineto_json.py: orjson a run of
# events at a time, ijson where it must decide), alone.
PARSE_FAST = """
import sys
from collector.sources import kineto_json
def open_file():
    f = open(sys.argv[1], "rb")
    return f, f
n = 0
for _ in kineto_json.trace_events(open_file):
    n += 1
print(n)
"""


# What a look at a trace past the embedded engine's 4 GiB says (engine_limit.py): the
# measurement at that size, kept in the row ("exit", "error"), not a failed benchmark.
TOO_BIG = "too big for the embedded trace_processor"


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall time, CPU time, peak RSS (MB, the child's own) of one subprocess."""
    return run_measured(cmd, cwd=REPO, env=env, accept=(2, TOO_BIG))[0]


def cold_cache(work: Path) -> dict[str, str]:
    """An environment whose cache directory holds no answers and no engine snapshots (a
    trace looked at in an earlier run would be answered from those: no first look), only
    the compiled engine (compiling it again would take a minute)."""
    root = work / "cache"
    shutil.rmtree(root, ignore_errors=True)
    wasm = cache_trust.cache_root() / "xpu-perf" / "wasm"
    (root / "xpu-perf").mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    if wasm.is_dir():
        shutil.copytree(wasm, root / "xpu-perf" / "wasm")
    return {**os.environ, "XDG_CACHE_HOME": str(root)}


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "collector.cli", *map(str, args)]


def sql_profile(trace: Path, top: int = 12) -> dict[str, Any]:
    """Each statement report and folded run, timed on a loaded engine (one per command),
    in CPU seconds of this process (the engine runs in it, on this thread): on the shared
    VM the neighbours move wall time by tens of percent, the CPU time by a few."""
    from exporters.analysis.idle_stacks import fold_mode
    from exporters.perfetto.engine.trace_processor import Trace, open_trace
    from exporters.report.queries import collect

    timings: list[dict[str, Any]] = []
    command = ["report"]

    def timed(method: Any) -> Any:
        def call(self: Trace, sql: str) -> Any:
            start = time.process_time()
            try:
                return method(self, sql)
            finally:
                code = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
                first = " ".join(" ".join(code).split())[:110]
                took = round(time.process_time() - start, 3)
                timings.append({"what": command[0], "s": took, "sql": first})

        return call

    def one_by_one(self: Trace, script: str) -> None:
        # A script (a .sql file) statement by statement, so each table has its own time
        # (statements end with ';' at the end of a line in this project's SQL).
        for statement in re.split(r";[ \t]*\n", script):
            if any(ln.strip() and not ln.strip().startswith("--") for ln in statement.splitlines()):
                self.query_columns(statement)

    # Trace.query and execute go through query_columns: every statement is timed once.
    Trace.query_columns = timed(Trace.query_columns)  # type: ignore[method-assign]
    Trace.execute = one_by_one  # type: ignore[method-assign]
    start = time.process_time()
    with open_trace(trace) as t:
        load = time.process_time() - start
        slices = t.scalar("select count(*) from slice")
        heap = {"slices": slices, "after_load_mb": round((t.engine_heap_bytes() or 0) / 2**20)}
        collect(t, trace.name)
        heap["after_report_mb"] = round((t.engine_heap_bytes() or 0) / 2**20)
        heap["bytes_per_slice_loaded"] = round(heap["after_load_mb"] * 2**20 / slices)
        heap["bytes_per_slice_report"] = round(heap["after_report_mb"] * 2**20 / slices)
    print(f"  engine heap: {heap}")
    command[0] = "folded"
    with open_trace(trace) as t:
        fold_mode(t, "gpu", "ns", None)
    spent = {c: sum(x["s"] for x in timings if x["what"] == c) for c in ("report", "folded")}
    print(
        f"  in-process (CPU): load {load:.1f} s, report SQL {spent['report']:.1f} s "
        f"({sum(x['what'] == 'report' for x in timings)} statements), "
        f"folded SQL {spent['folded']:.1f} s"
    )
    costly = sorted(timings, key=lambda x: -x["s"])[:top]
    for x in costly:
        print(f"    {x['s']:7.2f} s  {x['what']:<7} {x['sql']}")
    return {"engine_heap": heap, "load_s": round(load, 2), "sql_s": spent, "costliest": costly}


def parse_and_convert(kineto: Path, trace: Path, rounds: int) -> dict[str, Any]:
    """Parse (ijson alone, then convert's own reader alone) and convert of one input,
    alternating, `rounds` times; medians and ratios."""
    mb = kineto.stat().st_size / 1e6
    parses, fast_parses, converts = [], [], []
    for n in range(rounds):
        parse = run([sys.executable, "-c", PARSE, str(kineto)])
        fast = run([sys.executable, "-c", PARSE_FAST, str(kineto)])
        convert = run(cli("convert", kineto, "-o", trace, "-q", "--no-progress"))
        parses.append(parse)
        fast_parses.append(fast)
        converts.append(convert)
        print(
            f"  round {n + 1}: parse {parse['s']} s ({mb / parse['s']:.1f} MB/s), convert's "
            f"reader {fast['s']} s, convert {convert['s']} s ({mb / convert['s']:.1f} MB/s, "
            f"{convert['s'] / parse['s']:.2f}x parse, {convert['s'] / fast['s']:.2f}x the "
            f"reader; CPU {parse['cpu_s']} / {fast['cpu_s']} / {convert['cpu_s']} s), "
            f"convert peak RSS {convert['rss_mb']} MB",
            flush=True,
        )
    parse_s = round(statistics.median(p["s"] for p in parses), 2)
    fast_s = round(statistics.median(p["s"] for p in fast_parses), 2)
    convert_s = round(statistics.median(c["s"] for c in converts), 2)
    ratios = [round(c["s"] / p["s"], 2) for p, c in zip(parses, converts, strict=True)]
    fast_ratios = [round(c["s"] / p["s"], 2) for p, c in zip(fast_parses, converts, strict=True)]
    return {
        "json_mb": round(mb, 1),
        "parse": _reading(parses, parse_s, mb),
        "parse_fast": _reading(fast_parses, fast_s, mb),
        "convert": {
            "s": convert_s,
            "rss_mb": max(c["rss_mb"] for c in converts),
            "mb_s": round(mb / convert_s, 1),
            "x_parse": round(statistics.median(ratios), 2),
            "rounds_s": [c["s"] for c in converts],
            "rounds_x_parse": ratios,
            "x_parse_fast": round(statistics.median(fast_ratios), 2),
            "rounds_x_parse_fast": fast_ratios,
            "rounds_cpu_s": [c["cpu_s"] for c in converts],
        },
    }


def measure(
    slices: int,
    work: Path,
    profile: bool,
    existing: Path | None,
    rounds: int = 1,
    convert_only: bool = False,
) -> dict[str, Any]:
    """One size: built, parsed, converted, looked at; with `existing`, a trace converted
    before (by bench/scale_input.build + convert), looked at only."""
    trace = existing or work / f"scale_{slices}.perfetto-trace"
    html = work / f"scale_{slices}.html"
    row: dict[str, Any] = {"slices": slices}
    if existing is None:
        kineto = work / f"scale_{slices}.json"
        if not kineto.exists():
            start = time.perf_counter()
            made = scale_input.build(kineto, slices)
            print(f"built {kineto} ({made} slices) in {time.perf_counter() - start:.0f} s")
        row |= parse_and_convert(kineto, trace, rounds)
        parse, convert = row["parse"], row["convert"]
        print(
            f"  parse {parse['s']} s ({parse['mb_s']} MB/s), convert's reader "
            f"{row['parse_fast']['s']} s, convert {convert['s']} s ({convert['mb_s']} MB/s, "
            f"{convert['x_parse']}x parse, {convert['x_parse_fast']}x the reader), convert "
            f"peak RSS {convert['rss_mb']} MB (medians of {rounds})",
            flush=True,
        )
    row["trace_mb"] = round(trace.stat().st_size / 1e6, 1)
    if convert_only:
        return row
    steps = {
        "load": cli("query", trace, "select count(*) from slice", "--no-cache"),
        "folded": cli("folded", trace, "--mode", "gpu", "-o", work / "f.folded", "--no-cache"),
        "report": cli("report", trace, "-o", html, "--no-cache"),
        "folded_first_look": cli("folded", trace, "--mode", "gpu", "-o", work / "f.folded"),
        "folded_second_look": cli("folded", trace, "--mode", "gpu", "-o", work / "f.folded"),
        "report_first_look": cli("report", trace, "-o", html),
        "report_second_look": cli("report", trace, "-o", html),
        "query_first_look": cli("query", trace, "select count(*) from slice"),
        "query_second_look": cli("query", trace, "select count(*) from slice"),
    }
    env = cold_cache(work)
    for name, cmd in steps.items():
        result = run(cmd, env)
        row[name] = {k: result[k] for k in ("s", "cpu_s", "rss_mb", "exit", "error") if k in result}
        failed = f", exit {result['exit']}: {result['error']}" if "exit" in result else ""
        print(
            f"  {name}: {result['s']} s (CPU {result['cpu_s']} s), {result['rss_mb']} MB{failed}",
            flush=True,
        )
    load, load_cpu = row["load"]["s"], row["load"]["cpu_s"]
    for name in ("folded", "report"):
        if "exit" in row[name] or "exit" in row["load"]:
            continue  # past the engine's limit: no time on top of a load
        row[name]["on_top_of_load"] = round((row[name]["s"] - load) / load, 2)
        # The same by CPU time: on this shared VM the neighbours move wall time.
        row[name]["cpu_on_top_of_load"] = round((row[name]["cpu_s"] - load_cpu) / load_cpu, 2)
    if profile:
        row["sql_profile"] = sql_profile(trace)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| slices | JSON MB | parse s (MB/s) | convert's reader s (MB/s) | convert s (MB/s, "
        "x parse, x reader) | convert RSS MB | trace MB | load s (RSS MB) | folded s (x load "
        "on top) | report s (x load on top) | folded 2nd look s | report 2nd look s | query "
        "2nd look s |",
        "|" + "---|" * 13,
    ]
    for r in rows:
        if "load" not in r:  # --convert-only
            lines.append(f"| {r['slices']:,} | {_converted(r)} | {r['trace_mb']} |" + " - |" * 6)
            continue
        converted = _converted(r) if "convert" in r else "- | - | - | - | -"
        lines.append(
            f"| {r['slices']:,} | {converted} | {r['trace_mb']} | {_look(r, 'load', 'rss_mb')} | "
            f"{_look(r, 'folded', 'on_top_of_load')} | {_look(r, 'report', 'on_top_of_load')} | "
            f"{_look(r, 'folded_second_look')} | {_look(r, 'report_second_look')} | "
            f"{_look(r, 'query_second_look')} |"
        )
    return "\n".join(lines)


def _look(r: dict[str, Any], name: str, extra: str | None = None) -> str:
    """A look's cell: its seconds (and `extra` in brackets), or how it ended."""
    step = r.get(name)
    if step is None:
        return "-"
    if "exit" in step:
        return f"too big (exit {step['exit']}, {step['s']} s)"
    return f"{step['s']} ({step[extra]})" if extra else f"{step['s']}"


def _converted(r: dict[str, Any]) -> str:
    """The JSON, parse, reader, convert and RSS cells of a row."""
    parse, convert = r["parse"], r["convert"]
    fast = r.get("parse_fast")  # rows of runs before convert's own reader: none
    reader = f"{fast['s']} ({fast['mb_s']})" if fast else "-"
    fast_x = f", {convert['x_parse_fast']}x" if fast else ""
    return (
        f"{r.get('json_mb', '-')} | {parse['s']} ({parse['mb_s']}) | {reader} | "
        f"{convert['s']} ({convert['mb_s']}, {convert['x_parse']}x{fast_x}) | {convert['rss_mb']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slices", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/xpu-perf-scale"))
    ap.add_argument("--sql-profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="parse/convert rounds, alternating")
    ap.add_argument("--convert-only", action="store_true", help="parse and convert only")
    ap.add_argument(
        "--trace",
        type=Path,
        help="look at this trace, converted before, instead (one --slices value: its size)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/scale.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.slices:
        print(f"{n:,} slices", flush=True)
        rows.append(
            measure(n, args.work, args.sql_profile, args.trace, args.rounds, args.convert_only)
        )
    print(table(rows))
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {os.cpu_count()} CPUs",
        "rows": rows,
    }
    if args.convert_only and args.out.exists():
        # Only parse and convert were measured: the looks of an earlier run stay.
        doc = merge_rows(json.loads(args.out.read_text()), rows, "convert_date", doc["date"])
    elif args.trace is not None and args.out.exists():
        # Only the looks were measured: the parse and convert numbers of an earlier run stay.
        doc = merge_rows(json.loads(args.out.read_text()), rows, "looks_date", doc["date"])
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


def _reading(rounds: list[dict[str, Any]], median_s: float, mb: float) -> dict[str, Any]:
    """One reader's rounds (the ijson parse, or convert's own reader) as results."""
    return {
        "s": median_s,
        "rss_mb": max(r["rss_mb"] for r in rounds),
        "mb_s": round(mb / median_s, 1),
        "rounds_s": [r["s"] for r in rounds],
        "rounds_cpu_s": [r["cpu_s"] for r in rounds],
    }


def merge_rows(
    doc: dict[str, Any], rows: list[dict[str, Any]], date_key: str, date: str
) -> dict[str, Any]:
    """`doc` (an earlier run's results) with these rows' numbers (a partial run: parse and
    convert, or the looks): into its row of the same size, or as new rows, each dated by
    `date_key`."""
    by_size = {r["slices"]: r for r in doc["rows"]}
    for row in rows:
        old = by_size.get(row["slices"])
        if old is None:
            doc["rows"].append(row)
        else:
            old.update(row)
        (old or row)[date_key] = date
    doc["rows"].sort(key=lambda r: r["slices"])
    return doc


if __name__ == "__main__":
    main()
