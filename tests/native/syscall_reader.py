"""Half of the CPU time in read(2) of /dev/zero (kernel), half in a Python loop (user): the
kernel frames of the in-process sampler's samples taken in system calls.

python syscall_reader.py CPU_SECONDS
"""

import os
import sys
import time


def read_zeros():
    fd = os.open("/dev/zero", os.O_RDONLY)
    for _ in range(200):
        os.read(fd, 1 << 20)
    os.close(fd)


def count():
    x = 0
    for i in range(300_000):
        x += i
    return x


end = time.process_time() + float(sys.argv[1] if len(sys.argv) > 1 else 2)
while time.process_time() < end:
    read_zeros()
    count()
