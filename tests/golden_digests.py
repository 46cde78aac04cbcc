"""Golden digests of what the commands write: the SHA-256 of every output, byte for byte.

The cases (tests/test_golden_digests.py runs them against tests/data/golden_digests.json):
- `convert` of every Kineto input committed (bench/data/*.json.gz,
  tests/data/kineto_outside/*.json.gz): the trace file;
- `record --from-streams` of the kept recording tests/data/golden_recording/ (see
  make_recording): the trace file;
- of each of those traces, `report --format json`, the terminal report at COLUMNS=100 and
  `folded` in every mode: what they print on stdout (with the exit status, and stderr
  where the status is not 0: an error is an output too).

Each command runs as a user runs it, in a process of its own, in a directory of its own
with its input under a fixed name (paths are printed and written into traces).  Readers
run with --no-cache: their answers are computed, not recalled.

Normalised, the only bytes the inputs do not fix (the runner, `--run`, does both):
- the command line a trace's metadata holds is sys.argv: the interpreter's path to
  collector/cli.py and the checkout's place come first there, so the runner sets sys.argv
  to `xpu-perf COMMAND ARGS...` (the arguments as given, relative to the run's directory);
- `record`'s clock snapshot: the clocks read when the trace is written
  (writer.capture_clock_snapshot), not kept in the streams; the runner fixes it.
Not normalised, and fixed by the machine rather than the inputs: the kept recording's
stacks are symbolized from the libraries its streams name (libc, libpthread...) as they
are on the machine that runs the test; where they differ from this image's, the `record`
digests differ too (the fake application the streams name is gone everywhere).

Rewrite the digests only when a change of an output is intended (say which in the commit):

    PYTHONPATH=$PWD .venv/bin/python -m tests.golden_digests --update
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DIGESTS = REPO / "tests" / "data" / "golden_digests.json"
RECORDING = REPO / "tests" / "data" / "golden_recording"
KINETO_DIRS = {
    "bench": REPO / "bench" / "data",
    "outside": REPO / "tests" / "data" / "kineto_outside",
}
COLUMNS = "100"
# record's clock snapshot (BOOTTIME, MONOTONIC, REALTIME; builtin clock ids 6, 3, 1).
SNAPSHOT = {6: 5_000_000_000, 3: 4_000_000_000, 1: 1_700_000_000_000_000_000}
FOLDED_MODES = ("merge", "gpu", "cpu", "idle")  # exporters.analysis.idle_stacks.MODES
TRACE = "trace.perfetto-trace"


def kineto_inputs() -> dict[str, Path]:
    """Every committed Kineto input, by case name (`bench/example_kineto`...)."""
    return {
        f"{where}/{path.name.removesuffix('.json.gz')}": path
        for where, directory in KINETO_DIRS.items()
        for path in sorted(directory.glob("*.json.gz"))
    }


def inputs() -> list[str]:
    """Every trace's case name: the Kineto inputs and the kept recording."""
    return [*kineto_inputs(), "record/golden_recording"]


def run(workdir: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    """`xpu-perf ARGV` in `workdir`, through the runner (module docstring)."""
    # What else changes what the commands print: colours forced on, another engine.
    unset = {"FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "XPU_PERF_TRACE_PROCESSOR"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env.update(COLUMNS=COLUMNS, PYTHONPATH=str(REPO), PYTHONIOENCODING="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "tests.golden_digests", "--run", *argv],
        cwd=workdir,
        env=env,
        capture_output=True,
        timeout=600,
    )


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _printed(proc: subprocess.CompletedProcess[bytes]) -> bytes:
    """What a reader's run produced: its status and stdout (and stderr on an error)."""
    out = b"exit %d\n" % proc.returncode + proc.stdout
    return out + proc.stderr if proc.returncode else out


def _write_trace(case: str, workdir: Path) -> None:
    """The trace of input `case` written as TRACE in `workdir` (convert or record)."""
    if case.startswith("record/"):
        kept = workdir / "kept"
        shutil.copytree(RECORDING, kept)  # --from-streams removes it once written
        for path in [kept, *kept.rglob("*")]:  # as record leaves it: the owner's alone
            path.chmod(0o700 if path.is_dir() else 0o600)
        proc = run(workdir, "record", "--from-streams", "kept", "-o", TRACE, "-q")
    else:
        source = kineto_inputs()[case]
        shutil.copyfile(source, workdir / source.name)
        proc = run(workdir, "convert", source.name, "-o", TRACE, "-q")
    if proc.returncode != 0:
        raise AssertionError(f"{case}: {proc.args[4:]} failed: {proc.stderr.decode()}")


def digests(case: str, workdir: Path) -> dict[str, str]:
    """Every output of input `case`, by output name (`convert/bench/example_kineto`...)."""
    _write_trace(case, workdir)
    writer = "record" if case.startswith("record/") else "convert"
    out = {f"{writer}/{case}": _sha((workdir / TRACE).read_bytes())}
    readers: dict[str, Sequence[str]] = {
        "report-json": ("report", TRACE, "--format", "json"),
        "report-terminal": ("report", TRACE),
        **{f"folded-{mode}": ("folded", TRACE, "--mode", mode) for mode in FOLDED_MODES},
    }
    for name, argv in readers.items():
        out[f"{name}/{case}"] = _sha(_printed(run(workdir, *argv, "--no-cache")))
    return out


def stored() -> dict[str, str]:
    return dict(json.loads(DIGESTS.read_text())["sha256"])


def run_fixed(argv: Sequence[str]) -> int:
    """`xpu-perf ARGV` with the normalisations of the module docstring."""
    from exporters.perfetto import writer

    def fixed_snapshot() -> dict[int, int]:
        return dict(SNAPSHOT)

    writer.capture_clock_snapshot = fixed_snapshot
    sys.argv = ["xpu-perf", *argv]
    from collector.cli import main

    return main(list(argv))


def make_recording(out: Path) -> None:
    """How tests/data/golden_recording/ was made (once; root, a C compiler and the CUPTI
    headers): the fake application's default scenario (tests/fake_cupti) under
    `record --no-kernel-stacks --freq 2000` with the fake CUPTI and the in-process CPU
    sampler, whose trace could not be written (a full tmpfs), so record kept its streams."""
    import re

    from tests.fake_cupti.build import build_fake

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        fake = build_fake(tmp / "build")
        full = tmp / "full"
        full.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", full], check=True)
        try:
            fd = os.open(full / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass  # full
            finally:
                os.close(fd)
            env = dict(
                os.environ,
                PYTHONPATH=str(REPO),
                TMPDIR=str(tmp),
                XPU_PERF_INJECT_LIB=str(fake.injection),
                FAKE_CUPTI_RECORDS_PER_BUFFER="64",
            )
            proc = subprocess.run(
                [sys.executable, "-m", "collector.cli", "record", "--no-kernel-stacks",
                 "--freq", "2000", "-o", full / "rec.perfetto-trace", "--", fake.app, "20", "0"],
                env=env, capture_output=True, text=True, timeout=300, cwd=REPO,
            )  # fmt: skip
        finally:
            subprocess.run(["umount", "-l", full], check=False)
        kept = re.search(r"--from-streams (\S+) -o", proc.stderr)
        if kept is None:
            raise SystemExit(f"record kept nothing: {proc.stderr}")
        shutil.copytree(kept[1], out)
        shutil.rmtree(kept[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--update", action="store_true", help=f"rewrite {DIGESTS.relative_to(REPO)}")
    ap.add_argument("--make-recording", type=Path, metavar="DIR", help=make_recording.__doc__)
    ap.add_argument("--run", nargs=argparse.REMAINDER, help="the runner: xpu-perf ARGS, normalised")
    args = ap.parse_args()
    if args.run is not None:
        return run_fixed(args.run)
    if args.make_recording is not None:
        make_recording(args.make_recording)
        return 0
    found: dict[str, str] = {}
    before = stored() if DIGESTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in inputs():
            t0 = time.perf_counter()
            workdir = Path(tmp) / case.replace("/", "-")
            workdir.mkdir()
            found.update(digests(case, workdir))
            print(f"{case:<45} {time.perf_counter() - t0:6.1f} s", file=sys.stderr)
    changed = sorted(k for k in found.keys() | before.keys() if found.get(k) != before.get(k))
    for key in changed:
        print(f"changed: {key}", file=sys.stderr)
    if args.update:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        note = f"written by python -m tests.golden_digests --update at commit {commit}"
        DIGESTS.write_text(
            json.dumps({"note": note, "sha256": found}, indent=1, sort_keys=True) + "\n"
        )
        print(f"wrote {DIGESTS}", file=sys.stderr)
    return 1 if changed and not args.update else 0


if __name__ == "__main__":
    raise SystemExit(main())
