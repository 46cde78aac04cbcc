"""The flags that say how frames read, the same in `folded`, `flamegraph` and `report`."""

from __future__ import annotations

import argparse


def add_frame_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--full-names",
        action="store_true",
        help="C++ frames with their parameter lists and template arguments (default: "
        "at::native::copy_impl; the trace always keeps the full signatures)",
    )
    p.add_argument(
        "--all-frames",
        action="store_true",
        help="every frame, the interpreter's too (default: CPython's own frames between two "
        "Python frames are hidden, as py-spy --native shows stacks; native frames under the "
        "innermost Python frame always show; the trace keeps every frame)",
    )
