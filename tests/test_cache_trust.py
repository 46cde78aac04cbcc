"""Cached native code (trace_processor module, injection library) is loaded only from files
and directories that nobody but the user (or root) could have written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import wasmtime

from collector import cache_trust, inject_build
from exporters.perfetto.engine import wasm_engine

from .cache_attacks import OTHER_UID

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "cache"
    lib = root / "xpu-perf" / "thing" / "lib.so"
    lib.parent.mkdir(parents=True, mode=0o755)
    root.chmod(0o755)
    (root / "xpu-perf").chmod(0o755)
    lib.write_bytes(b"code")
    lib.chmod(0o644)
    return root, lib


def test_own_file_in_own_directories_is_trusted(tmp_path: Path) -> None:
    root, lib = _tree(tmp_path)
    assert cache_trust.untrusted_reason(lib, root) is None
    assert cache_trust.untrusted_reason(root / "xpu-perf" / "missing.so", root) is None


@needs_root
def test_file_of_another_owner_is_refused(tmp_path: Path) -> None:
    root, lib = _tree(tmp_path)
    os.chown(lib, OTHER_UID, -1)
    assert cache_trust.untrusted_reason(lib, root) == f"{lib} is owned by uid {OTHER_UID}"


@needs_root
def test_directory_of_another_owner_is_refused(tmp_path: Path) -> None:
    root, lib = _tree(tmp_path)
    os.chown(lib.parent, OTHER_UID, -1)
    assert "owned by uid" in (cache_trust.untrusted_reason(lib, root) or "")


@pytest.mark.parametrize("level", ["root", "middle", "file"])
@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777])
def test_group_or_world_writable_is_refused(tmp_path: Path, level: str, mode: int) -> None:
    root, lib = _tree(tmp_path)
    target = {"root": root, "middle": lib.parent, "file": lib}[level]
    target.chmod(mode if level != "file" else mode & 0o666)
    assert "writable by group or others" in (cache_trust.untrusted_reason(lib, root) or "")


def test_symlinked_file_is_refused(tmp_path: Path) -> None:
    root, lib = _tree(tmp_path)
    link = lib.with_name("link.so")
    link.symlink_to(lib)
    assert "symlink" in (cache_trust.untrusted_reason(link, root) or "")


@needs_root
def test_wasm_module_of_another_owner_is_not_deserialized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A planted .cwasm (here: the real compiled module, owned by someone else) is never
    deserialized: the module is compiled in memory instead, with one line on stderr."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    engine = wasmtime.Engine()
    wasm = wasm_engine.find_wasm()
    wasm_engine.load_module(engine, wasm)  # compiles and caches under tmp_path
    (cached,) = (tmp_path / "xpu-perf" / "wasm").glob("*.cwasm")
    assert capfd.readouterr().err == ""
    os.chown(cached, OTHER_UID, -1)
    loads: list[str] = []
    real = wasmtime.Module.deserialize_file
    monkeypatch.setattr(
        wasmtime.Module,
        "deserialize_file",
        staticmethod(lambda e, p: loads.append(p) or real(e, p)),
    )
    module = wasm_engine.load_module(engine, wasm)
    assert loads == []
    assert module.exports  # a working module, compiled here
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        f"xpu-perf: not using the cached trace_processor module ({cached} is owned by uid "
        f"{OTHER_UID}); compiling it in memory"
    ]
    assert cached.stat().st_uid == OTHER_UID  # left alone, not replaced


@needs_root
@pytest.mark.parametrize("plant", ["owner", "writable_dir"])
def test_injection_library_from_untrusted_cache_is_rebuilt_privately(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], plant: str
) -> None:
    try:
        cupti = inject_build.find_cupti()
    except inject_build.BuildError:
        pytest.skip("no CUPTI headers to build the injection library against")
    monkeypatch.setenv("XPU_PERF_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir(mode=0o700)
    good = inject_build.build(cupti)  # into the (trusted) cache
    assert good.is_relative_to(tmp_path / "cache")
    assert inject_build.build(cupti) == good  # and used from it
    capfd.readouterr()
    if plant == "owner":
        os.chown(good, OTHER_UID, -1)
    else:
        good.parent.chmod(0o777)
    private = inject_build.build(cupti)
    assert private != good and not private.is_relative_to(tmp_path / "cache")
    assert private.is_file() and (private.parent.stat().st_mode & 0o777) == 0o700
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("xpu-perf: not using the cached injection library")
    assert f"building it in {private.parent}" in err[0]
    shutil.rmtree(private.parent)


@needs_root
def test_sampler_library_from_untrusted_cache_is_rebuilt_privately(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XPU_PERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("XPU_PERF_SAMPLER_LIB", raising=False)
    (tmp_path / "cache").mkdir(mode=0o700)
    good = inject_build.build_sampler()
    assert good.is_relative_to(tmp_path / "cache")
    assert inject_build.build_sampler() == good
    capfd.readouterr()
    os.chown(good, OTHER_UID, -1)
    private = inject_build.build_sampler()
    assert private.is_file() and not private.is_relative_to(tmp_path / "cache")
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        f"xpu-perf: not using the cached CPU sampler library ({good} is owned by uid "
        f"{OTHER_UID}); building it in {private.parent}"
    ]
    shutil.rmtree(private.parent)
