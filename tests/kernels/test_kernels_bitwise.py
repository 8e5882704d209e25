"""Every in-process backend gives the reference's bits on every op and case.

Cases (kernel_cases.py) cover awkward shapes (1, primes, non-powers of two,
larger than a tile) and subnormals, signed zeros, infinities and NaN (every
NaN equals every NaN). The failing baselines beside these tests are in
test_kernels_baselines.py. A backend module that does not exist fails here.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import (
    IN_PROCESS_BACKENDS,
    OPS,
    SEED,
    build_cases,
    check_backend,
    compare_outputs,
    describe_difference,
)

from kernels import KernelInputError, get_backend
from kernels.backend_contract import contract_functions
from kernels.versions import FOLDS


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("backend_name", IN_PROCESS_BACKENDS)
def test_backend_matches_reference_bitwise(backend_name, op, reference):
    backend = get_backend(backend_name)
    failures = check_backend(backend, reference, op, SEED)
    assert not failures, f"{len(failures)} cases differ:\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("op", FOLDS)
@pytest.mark.parametrize("backend_name", IN_PROCESS_BACKENDS)
def test_backend_matches_reference_bitwise_in_version_2(backend_name, op):
    failures = check_backend(get_backend(backend_name, 2), get_backend("reference", 2), op, SEED)
    assert not failures, f"{len(failures)} cases differ:\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("op", FOLDS)
def test_cases_tell_version_1_from_version_2(op):
    """Where the versions part (every fold), the cases see it: the reference at version 1 fails v2's cases."""
    failures = check_backend(get_backend("reference", 1), get_backend("reference", 2), op, SEED)
    assert len(failures) >= len([c for c in build_cases(op, SEED) if "near ties" in c[0] or "x" in c[0]]) // 2
    if op.startswith("matmul"):
        assert any("[near ties]" in f for f in failures)


def test_version_2_changes_only_the_folds():
    one, two = get_backend("cpu", 1), get_backend("cpu", 2)
    assert [name for name in contract_functions() if getattr(one, name) is not getattr(two, name)] == list(FOLDS)
    assert get_backend("cpu", 2) is two  # one object per (backend, version)
    for bad in (0, 3, True, "2", 2.0):
        with pytest.raises(KernelInputError, match="arithmetic version .* is not one this build implements"):
            get_backend("cpu", bad)


@pytest.mark.parametrize("backend_name", IN_PROCESS_BACKENDS)
def test_backend_exposes_every_op(backend_name):
    backend = get_backend(backend_name)
    missing = [op for op in OPS if not callable(getattr(backend, op, None))]
    assert not missing, f"{backend_name} lacks {missing}"


def test_comparison_tells_apart_what_matters():
    # The bitwise tests are only as strong as this comparison: it must see a
    # sign of zero, one ulp, a dtype, a shape; and must not see NaN payloads.
    x = np.array([0.0, 1.0, np.nan], dtype=np.float32)
    assert describe_difference(x, x.copy()) is None
    assert describe_difference(np.array([-0.0, 1.0, np.nan], dtype=np.float32), x)
    assert describe_difference(np.array([0.0, np.nextafter(np.float32(1), np.float32(2)), np.nan], np.float32), x)
    assert describe_difference(x.astype(np.float64), x)
    assert describe_difference(x[:2], x)
    other_nan = np.array([0x7FC00000, 0x3F800000, 0xFFC00001], dtype=np.uint32).view(np.float32)
    other_nan[0] = 0.0
    assert describe_difference(other_nan, x) is None
    assert compare_outputs((x, x), (x,)) == "got 2 outputs, want 1"
    assert compare_outputs([x], (x,)) is not None  # a list is not a tuple of outputs
