"""The triton backend gives the reference's bits on every op (TRITON_INTERPRET=1, small shapes).

All ops run in one subprocess (tests/kernels/triton_probe.py), started once
per session, since the interpreter mode must be chosen before triton is
imported. The cases are those of the cpu comparison with small shapes. A
missing or broken triton backend fails every test here.
"""

from __future__ import annotations

import pytest
from kernel_cases import OPS, SEED
from kernel_subprocess import run_probe

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def triton_report():
    return run_probe("triton_probe.py", [str(SEED)], {"TRITON_INTERPRET": "1"}, timeout=600)


@pytest.mark.parametrize("op", OPS)
def test_triton_matches_reference_bitwise(triton_report, op):
    assert triton_report["import_error"] is None, triton_report["import_error"]
    failures = triton_report["failures"][op]
    assert not failures, f"{len(failures)} cases differ:\n" + "\n".join(failures[:10])


def test_triton_refuses_bad_input(triton_report):
    assert triton_report["import_error"] is None, triton_report["import_error"]
    assert not triton_report["bad_input"], "\n".join(triton_report["bad_input"])
