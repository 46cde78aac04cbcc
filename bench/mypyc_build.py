"""Compile convert's hot modules with mypyc, in place, to measure them (issue 24).

    python bench/mypyc_build.py [--with-model]   # needs mypy (pip install mypy) and a C compiler
    python bench/convert_ab.py INPUT.json --checkout base=/tmp/base --checkout mypyc=.
    python bench/mypyc_build.py --clean          # back to the pure modules

A measurement, not a build of the product: the extension modules land beside their .py
files (gitignored), and Python imports an extension before the source of the same name,
so while they are there the checkout runs them, even after its .py files change.
--clean removes them.  docs/benchmarks.md ("Convert compiled with mypyc") has what it
gave: about a tenth less of the main thread's CPU, not the 2x of issue 24.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What `convert` spends its main thread in (cProfile and perf at 100k events): the source,
# its flow window and reader, and what the writer calls per slice.
HOT = (
    "collector/sources/kineto.py",
    "collector/sources/kineto_json.py",
    "exporters/perfetto/interning.py",
    "exporters/perfetto/wire.py",
    "exporters/perfetto/lanes.py",
    "exporters/perfetto/producer.py",
    "exporters/perfetto/sequences.py",
    "collector/gc_pause.py",
)
# The event model: compiled, its dataclasses become native classes (cheaper to build and
# read), and their field types are checked at run time (a float `ts` is a TypeError).
MODEL = "collector/model.py"
# The source imports ijson, perfetto's protos, orjson and deflate untyped: as Any.
MYPY_FLAGS = ("--ignore-missing-imports", "--follow-imports=silent")

# setup() takes argv for its own options: mypycify's arguments come by the environment.
SETUP = """
import os
from setuptools import setup
from mypyc.build import mypycify
args = os.environ["MYPYC_ARGS"].split("\\n")
setup(name="xpu-perf-mypyc", packages=[], ext_modules=mypycify(args, opt_level="3"))
"""


def built() -> list[Path]:
    """The extension modules mypyc left in the checkout (its shared library at the top)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    modules = [REPO / (m.removesuffix(".py") + suffix) for m in (*HOT, MODEL)]
    return [p for p in modules if p.exists()] + list(REPO.glob(f"*__mypyc{suffix}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--with-model", action="store_true", help=f"compile {MODEL} too")
    ap.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = ap.parse_args()
    for path in built():
        path.unlink()
    if args.clean:
        return
    modules = [*HOT, MODEL] if args.with_model else list(HOT)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-c", SETUP, "build_ext", "--inplace", f"--build-temp={tmp}"],
            cwd=REPO,
            env={**os.environ, "MYPYC_ARGS": "\n".join([*MYPY_FLAGS, *modules])},
            check=True,
        )
    for path in built():
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
