"""collector/sources/bcc_api.py declares what the bcc sources call on bcc's BPF object and
its maps: every name it declares is one bcc has, on the class of the map kind that the
program declares (bpf/process_tree.h, bpf/cpu_sampler.bpf.c).  A misspelt name would
type-check and fail only when a program is loaded, as root."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.sources.bcc_api import BpfMap, BpfProgram, CounterArray, RingBuffer

_DUNDERS = ("__getitem__", "__setitem__")


def _declared(protocol: type) -> list[str]:
    return [n for n in vars(protocol) if not n.startswith("_") or n in _DUNDERS]


def test_every_declared_name_is_bccs() -> None:
    bcc = pytest.importorskip("bcc")
    from bcc import table

    kinds = [
        (bcc.BPF, BpfProgram),
        (table.HashTable, BpfMap),  # tracked
        (table.Array, BpfMap),  # spawner, paused
        (table.PerCpuArray, CounterArray),  # counters
        (table.RingBuf, RingBuffer),  # events
    ]
    for cls, protocol in kinds:
        names = _declared(protocol)
        assert names, protocol
        # (BPF.funcs is set per object, in its __init__.)
        missing = [n for n in names if not hasattr(cls, n) and n != "funcs"]
        assert missing == [], (cls, missing)


def test_the_maps_are_of_the_declared_kinds() -> None:
    """The map names the Protocol's overloads take are the program's, declared as those
    kinds."""
    bpf = Path(__file__).resolve().parent.parent / "bpf"
    text = (bpf / "process_tree.h").read_text() + (bpf / "cpu_sampler.bpf.c").read_text()
    for declaration in (
        "BPF_HASH(tracked,",
        "BPF_ARRAY(spawner,",
        "BPF_ARRAY(paused,",
        "BPF_PERCPU_ARRAY(counters,",
        "BPF_RINGBUF_OUTPUT(events,",
    ):
        assert declaration in text
