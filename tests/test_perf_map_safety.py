"""/tmp/perf-PID.map is read as root from a directory anyone can write: no symlinks, no
FIFOs or devices, a size cap, and only maps owned by the target's uid or root."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector import symbolize
from collector.symbolize import Mapping, MapsSnapshot, Symbolizer, read_perf_map

PID = 4_194_998  # above pid_max's default: no live process has it
ANON = Mapping(0x7F0000000000, 0x7F0000010000, "r-xp", 0, 0, "")
LINE = "7f0000001000 100 jit_stub\n"
OTHER_UID = 12345

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


@pytest.fixture
def perf_map() -> Iterator[Path]:
    path = Path(f"/tmp/perf-{PID}.map")
    path.unlink(missing_ok=True)
    yield path
    path.unlink(missing_ok=True)


def _name(symbolizer: Symbolizer, uid: int | None = None) -> str:
    snapshot = MapsSnapshot(PID, [ANON], [ANON.start], uid)
    return symbolizer.user_frames(snapshot, [0x7F0000001010])[0].function


def test_owned_regular_map_is_read(perf_map: Path) -> None:
    perf_map.write_text(LINE)
    symbolizer = Symbolizer()
    assert _name(symbolizer) == "jit_stub"
    assert symbolizer.perf_map_counts == {"perf_maps_refused": 0, "perf_maps_cut": 0}


def test_symlink_is_not_followed(perf_map: Path, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.map"
    real.write_text(LINE)
    perf_map.symlink_to(real)
    symbolizer = Symbolizer()
    assert _name(symbolizer) != "jit_stub"
    assert symbolizer.perf_map_counts["perf_maps_refused"] == 1


def test_fifo_is_not_read_and_does_not_block(perf_map: Path) -> None:
    os.mkfifo(perf_map)
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(read_perf_map(perf_map, {0})))
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive(), "reading a FIFO blocked"
    assert result == [(None, "perf_maps_refused")]


def test_device_is_not_read() -> None:
    # /dev/zero never ends: a reader without the regular-file check would fill memory.
    assert read_perf_map(Path("/dev/zero"), {0}) == (None, "perf_maps_refused")


def test_size_is_capped(perf_map: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    line_bytes = len("7f0000000000 1 fn0\n")
    monkeypatch.setattr(symbolize, "PERF_MAP_MAX_BYTES", 4 * line_bytes + 3)  # 4 lines and a bit
    with perf_map.open("w") as f:
        for i in range(100):
            f.write(f"7f000000{i:04x} 1 fn{i}\n")
    table, problem = read_perf_map(perf_map, {0})
    assert problem == "perf_maps_cut"
    assert table is not None
    assert [table.lookup(0x7F0000000000 + i) for i in range(6)] == [
        "fn0", "fn1", "fn2", "fn3", None, None,
    ]  # fmt: skip


@needs_root
def test_map_of_another_user_is_refused(perf_map: Path) -> None:
    perf_map.write_text(LINE)
    os.chown(perf_map, OTHER_UID, -1)
    symbolizer = Symbolizer()
    assert _name(symbolizer) != "jit_stub"  # uid unknown: only root's map
    assert symbolizer.perf_map_counts["perf_maps_refused"] == 1
    assert _name(Symbolizer(), uid=OTHER_UID + 1) != "jit_stub"  # another target's uid
    assert _name(Symbolizer(), uid=OTHER_UID) == "jit_stub"  # the target's own map


def test_target_uid_is_taken_from_proc() -> None:
    snapshot = MapsSnapshot.read(os.getpid())
    assert snapshot.uid == os.geteuid()
