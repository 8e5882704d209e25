"""Cached cpu kernels are dropped when any kernels/cpu*.py source changes.

numba keys a kernel's cache on the kernel's own file only; the kernels inline
helpers of kernels/cpu_scalar.py, so without this a changed helper would
leave stale machine code (wrong bits) in kernels/__pycache__.
"""

from __future__ import annotations

from pathlib import Path

from kernels.cpu_scalar import drop_stale_cache


def _cached(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "__pycache__").glob("*.nb[ic]"))


def test_cache_survives_unchanged_sources_and_goes_when_one_changes(tmp_path):
    (tmp_path / "cpu_scalar.py").write_text("HELPER = 1\n")
    (tmp_path / "cpu_nn.py").write_text("KERNEL = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / "cpu_nn.kernel-3.py311.nbi").write_bytes(b"index built before any stamp")
    (cache / "unrelated.nbi").write_bytes(b"not ours")

    drop_stale_cache(tmp_path)  # no stamp yet: every cpu kernel counts as stale
    assert _cached(tmp_path) == ["unrelated.nbi"]

    (cache / "cpu_nn.kernel-3.py311.nbi").write_bytes(b"index")
    (cache / "cpu_nn.kernel-3.py311.1.nbc").write_bytes(b"code")
    drop_stale_cache(tmp_path)  # same sources: kept
    assert _cached(tmp_path) == ["cpu_nn.kernel-3.py311.1.nbc", "cpu_nn.kernel-3.py311.nbi", "unrelated.nbi"]

    (tmp_path / "cpu_scalar.py").write_text("HELPER = 2\n")  # only the helper changes
    drop_stale_cache(tmp_path)
    assert _cached(tmp_path) == ["unrelated.nbi"]


def test_unwritable_cache_folder_is_left_alone(tmp_path):
    (tmp_path / "cpu_scalar.py").write_text("HELPER = 1\n")
    (tmp_path / "__pycache__").write_text("a file where the folder would be")
    drop_stale_cache(tmp_path)  # must not raise
    assert (tmp_path / "__pycache__").read_text() == "a file where the folder would be"
