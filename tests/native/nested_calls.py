"""CPU-bound Python whose Python frames call each other through CPython's C machinery:
builtins that call back into Python (sorted's key, map), a class instantiation, an import
that runs code.  `leaf` does the work; tests/test_python_stacks.py records this."""

import importlib
import sys
import time


def leaf(x: int) -> int:
    total = 0
    for i in range(300):
        total += i * x
    return total


class Box:
    def __init__(self, n: int) -> None:
        self.values = list(map(leaf, range(n)))


def via_sorted(n: int) -> list[int]:
    return sorted(range(n), key=leaf)


def via_class(n: int) -> Box:
    return Box(n)


def main(seconds: float) -> None:
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    end = time.process_time() + seconds
    while time.process_time() < end:
        via_sorted(100)
        via_class(50)
        sys.modules.pop("nested_calls_import", None)
        importlib.import_module("nested_calls_import")


if __name__ == "__main__":
    main(float(sys.argv[1]))
