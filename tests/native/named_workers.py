"""A program whose threads and processes have names users look for: a thread started as
threading.Thread(name=THREAD_NAME) and a forked multiprocessing worker running
`crunch_numbers`, both busy on the CPU while the main thread waits for them.

python named_workers.py CPU_SECONDS
"""

import multiprocessing
import sys
import threading
import time

# Longer than the 15 bytes a Linux thread name (comm) holds: the trace has it whole.
THREAD_NAME = "metrics-collector"


def spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(10_000):
            x += i * i


def crunch_numbers(seconds: float) -> None:
    spin(seconds)


if __name__ == "__main__":
    seconds = float(sys.argv[1] if len(sys.argv) > 1 else 1)
    worker = multiprocessing.get_context("fork").Process(target=crunch_numbers, args=(seconds,))
    worker.start()
    metrics = threading.Thread(target=spin, args=(seconds,), name=THREAD_NAME)
    metrics.start()
    metrics.join()
    worker.join()
