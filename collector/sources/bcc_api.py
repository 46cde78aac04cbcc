"""The part of bcc's BPF object (a program loaded in the kernel, its maps by name) that the
bcc sources call, as Protocols: bcc ships no types, so what the sources ask of it is
checked against these declarations instead of passing as Any."""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Literal, Protocol, overload

# The ctypes scalars the sources key and fill the maps with (bpf/process_tree.h's types).
CScalar = ctypes.c_int | ctypes.c_uint8 | ctypes.c_uint32
# bcc's ring-buffer callback: (its context, the record's address, its size) -> 0.
RingBufferCallback = Callable[[object, int, int], int]


class CounterSum(Protocol):
    """A per-CPU array's slot summed over the CPUs (a ctypes value)."""

    @property
    def value(self) -> int: ...


class BpfMap(Protocol):
    """A hash or array map the sources fill (`tracked`, `spawner`, `paused`)."""

    def __setitem__(self, key: CScalar, value: CScalar) -> None: ...


class CounterArray(Protocol):
    """The per-CPU array of counters (`counters`: bpf/process_tree.h's slots)."""

    def sum(self, key: CScalar) -> CounterSum: ...


class RingBuffer(Protocol):
    """The ring buffer the program writes its records to (`events`)."""

    def open_ring_buffer(self, callback: RingBufferCallback) -> None: ...


class BpfFunction(Protocol):
    """A function of the program, loaded: its file descriptor (its /proc fdinfo)."""

    @property
    def fd(self) -> int: ...


class BpfProgram(Protocol):
    """bcc.BPF: the compiled program, its maps and its probes."""

    @property
    def funcs(self) -> Mapping[bytes, BpfFunction]: ...

    # The maps by name (bpf/process_tree.h, bpf/cpu_sampler.bpf.c), each of its kind.
    @overload
    def __getitem__(self, name: Literal["events"]) -> RingBuffer: ...

    @overload
    def __getitem__(self, name: Literal["counters"]) -> CounterArray: ...

    @overload
    def __getitem__(self, name: Literal["tracked", "spawner", "paused"]) -> BpfMap: ...

    def ring_buffer_poll(self, timeout: int = -1) -> None: ...

    def ring_buffer_consume(self) -> None: ...

    def attach_perf_event(
        self,
        ev_type: int = -1,
        ev_config: int = -1,
        fn_name: bytes = b"",
        sample_period: int = 0,
        cpu: int = -1,
    ) -> None: ...

    def detach_perf_event(self, ev_type: int = -1, ev_config: int = -1) -> None: ...

    def attach_uprobe(self, name: bytes = b"", sym: bytes = b"", fn_name: bytes = b"") -> None: ...

    def cleanup(self) -> None: ...
