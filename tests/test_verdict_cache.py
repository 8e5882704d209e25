"""A cached verdict is reused only under exactly its key: any changed part checks again."""

from __future__ import annotations

import shutil

import llvmlite
import numba
import pytest

from tests.verdict_cache import REPO, VerdictCache, import_closure, machine_code_key

CPUINFO = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n\nprocessor\t: 1\n"


@pytest.fixture
def kernel_copy(tmp_path):
    """A copy of kernels/*.py and a /proc/cpuinfo lookalike that a test may change."""
    folder = tmp_path / "kernels"
    folder.mkdir()
    for source in (REPO / "kernels").glob("*.py"):
        shutil.copy(source, folder / source.name)
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    return folder


ROOTS = ("cpu_elementwise.py", "cpu_matmul.py", "cpu_nn.py", "cpu_reduce.py")


def _key(kernel_copy):
    sources = import_closure([kernel_copy / name for name in ROOTS], kernel_copy)
    return machine_code_key(sources, {"checker": "v1"}, kernel_copy.parent / "cpuinfo")


def _counting_check():
    ran = []
    return ran, lambda: ran.append(1)


def test_same_key_reuses_the_verdict_and_a_fresh_folder_computes_it(kernel_copy, tmp_path):
    ran, check = _counting_check()
    cache = VerdictCache("no-fma", tmp_path / "cache")
    assert cache.check("exp_flat", _key(kernel_copy), check) is True
    assert cache.check("exp_flat", _key(kernel_copy), check) is False
    assert cache.check("log_flat", _key(kernel_copy), check) is True  # another subject has its own verdict
    assert VerdictCache("no-fma", tmp_path / "empty").check("exp_flat", _key(kernel_copy), check) is True
    assert len(ran) == 3


def _edit_source(kernel_copy, monkeypatch):
    target = kernel_copy / "cpu_tile.py"  # imported by cpu_matmul only
    target.write_text(target.read_text() + "\n# changed\n")


def _edit_flags(kernel_copy, monkeypatch):
    (kernel_copy.parent / "cpuinfo").write_text(CPUINFO.replace("avx2 fma", "avx2"))


def _edit_model(kernel_copy, monkeypatch):
    (kernel_copy.parent / "cpuinfo").write_text(CPUINFO.replace("AMD EPYC", "Intel Xeon"))


def _edit_numba(kernel_copy, monkeypatch):
    monkeypatch.setattr(numba, "__version__", numba.__version__ + ".post1")


def _edit_llvmlite(kernel_copy, monkeypatch):
    monkeypatch.setattr(llvmlite, "__version__", llvmlite.__version__ + ".post1")


def _edit_codegen_env(kernel_copy, monkeypatch):
    monkeypatch.setenv("NUMBA_CPU_NAME", "generic")


CHANGES = [_edit_source, _edit_flags, _edit_model, _edit_numba, _edit_llvmlite, _edit_codegen_env]


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__[len("_edit_") :] for c in CHANGES])
def test_a_changed_key_part_checks_again(kernel_copy, tmp_path, monkeypatch, change):
    monkeypatch.delenv("NUMBA_CPU_NAME", raising=False)
    ran, check = _counting_check()
    cache = VerdictCache("no-fma", tmp_path / "cache")
    cache.check("exp_flat", _key(kernel_copy), check)
    change(kernel_copy, monkeypatch)
    assert cache.check("exp_flat", _key(kernel_copy), check) is True
    assert cache.check("exp_flat", _key(kernel_copy), check) is False
    assert len(ran) == 2
    assert len(list((tmp_path / "cache" / "no-fma").glob("exp_flat.*.json"))) == 1  # the old key's verdict went


def test_a_failing_check_is_not_stored(kernel_copy, tmp_path):
    cache = VerdictCache("no-fma", tmp_path / "cache")

    def fails():
        raise AssertionError("fused multiply-adds found")

    for _ in range(2):
        with pytest.raises(AssertionError, match="fused multiply-adds"):
            cache.check("exp_flat", _key(kernel_copy), fails)
    assert not cache.passed("exp_flat", _key(kernel_copy))


def test_a_source_the_kernels_do_not_import_keeps_the_verdict(kernel_copy, tmp_path):
    names = {path.name for path in import_closure([kernel_copy / name for name in ROOTS], kernel_copy)}
    assert {"cpu_scalar.py", "cpu_tile.py", "cpu_rowtree.py", "constants.py", "__init__.py"} <= names
    assert "triton_kernels.py" not in names
    ran, check = _counting_check()
    cache = VerdictCache("no-fma", tmp_path / "cache")
    cache.check("exp_flat", _key(kernel_copy), check)
    (kernel_copy / "triton_kernels.py").write_text("# a GPU kernel changed\n")
    assert cache.check("exp_flat", _key(kernel_copy), check) is False
    assert len(ran) == 1
