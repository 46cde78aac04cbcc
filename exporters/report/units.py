"""How numbers are written in the report (terminal, HTML and flamegraph share these)."""

from __future__ import annotations

_DURATIONS = ((1e9, "s"), (1e6, "ms"), (1e3, "µs"))
_BYTES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _scaled(value: float | None, scales: tuple[tuple[float, str], ...], base: str) -> str:
    """Three significant digits in the largest unit that keeps the number >= 1."""
    if value is None:
        return "-"
    for scale, unit in scales:
        if abs(value) >= scale:
            return f"{_sig3(value / scale)} {unit}"
    return f"{value:.0f} {base}"


def duration(ns: float | None) -> str:
    """`1.23 ms`: three significant digits, unit picked so the number is >= 1."""
    return _scaled(ns, _DURATIONS, "ns")


def byte_count(n: float | None) -> str:
    return _scaled(n, _BYTES, "B")


def percent(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.1f}%" if p >= 0.1 or p == 0 else f"{p:.2g}%"


def count(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n:,.0f}" if float(n).is_integer() else f"{n:,.2f}"


def rate_gbps(gb_per_s: float | None) -> str:
    return "-" if gb_per_s is None else f"{_sig3(gb_per_s)} GB/s"


def weight(value: float, unit: str) -> str:
    """A flamegraph frame's weight in its unit (ns, us or samples)."""
    if unit == "ns":
        return duration(value)
    if unit == "us":
        return duration(value * 1e3)
    return f"{count(round(value))} samples"


def _sig3(x: float) -> str:
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"
