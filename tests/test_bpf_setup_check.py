"""`record`'s start-up checks for eBPF: each gap is reported with its fix."""

from __future__ import annotations

import pytest

from collector import setup_check


def test_not_root_is_reported_with_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(setup_check.os, "geteuid", lambda: 1000)
    problems = setup_check.check_ebpf()
    assert any("not root" in p.what and "sudo" in p.fix for p in problems)


def test_missing_headers_are_reported(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    real_path = setup_check.Path

    def fake_path(*parts: str):
        if parts and parts[0] in ("/lib/modules", "/sys/kernel/kheaders.tar.xz"):
            return real_path(tmp_path, "absent", *parts[1:])
        return real_path(*parts)

    monkeypatch.setattr(setup_check, "Path", fake_path)
    problems = setup_check.check_ebpf()
    assert any("kernel headers" in p.what and p.fix == setup_check.FIX for p in problems)


@pytest.mark.skipif(not setup_check.is_root(), reason="the machine set-up is checked as root")
def test_set_up_machine_is_ready() -> None:
    """After scripts/setup_bcc.sh (CI's set-up) nothing is missing."""
    assert setup_check.check_ebpf() == []
