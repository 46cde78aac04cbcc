"""Every output of `convert`, `record --from-streams`, `report` (json and terminal) and
`folded` (every mode), on every committed Kineto input and a kept recording, byte for byte
against tests/data/golden_digests.json (tests/golden_digests.py says how each is made,
which bytes are normalised, and how to rewrite the digests for an intended change)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import golden_digests


@pytest.mark.parametrize("case", golden_digests.inputs())
def test_outputs_unchanged(case: str, tmp_path: Path) -> None:
    want = golden_digests.stored()
    got = golden_digests.digests(case, tmp_path)
    changed = sorted(k for k, v in got.items() if want.get(k) != v)
    assert not changed, f"changed outputs: {changed}"


def test_every_output_has_a_digest() -> None:
    """Each committed input is covered, and no digest is left over from one removed."""
    cases = golden_digests.inputs()
    outputs = {key.split("/", 1)[1] for key in golden_digests.stored()}
    assert outputs == set(cases)
    assert len(golden_digests.stored()) == len(cases) * 7


def test_the_recording_is_replayed_whole(tmp_path: Path) -> None:
    """The kept recording holds GPU ops, API calls and CPU samples (what the record digests
    are meant to cover), and replaying it leaves the committed copy in place."""
    from exporters.perfetto.engine.trace_processor import open_trace

    golden_digests.digests("record/golden_recording", tmp_path)
    assert (golden_digests.RECORDING / "manifest.json").is_file()
    with open_trace(tmp_path / golden_digests.TRACE) as trace:
        assert trace.scalar("select count(*) from slice where category = 'kernel'") > 0
        assert trace.scalar("select count(*) from slice where category = 'cuda_api'") > 0
        assert trace.scalar("select count(*) from perf_sample") > 0
