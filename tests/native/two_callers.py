"""Two callers, 3:1, of one leaf, in pure Python: the CPU sampler's Python-frame test.

python two_callers.py CPU_SECONDS
"""

import sys
import time


def leaf(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def heavy_caller():
    for _ in range(3):
        leaf(100_000)


def light_caller():
    leaf(100_000)


end = time.process_time() + float(sys.argv[1] if len(sys.argv) > 1 else 2)
while time.process_time() < end:
    heavy_caller()
    light_caller()
