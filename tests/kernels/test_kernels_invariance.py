"""Instruction-set paths and thread counts change no bit of any op.

invariance_probe.py digests every op's outputs (reference and cpu backends)
on a fixed input set; it runs here in subprocesses under three settings that
together take every value of: ATEN_CPU_CAPABILITY default/avx2 (and the
host's own), numba's CPU generic/the host's (NUMBA_CPU_NAME unset: the host's
model and features), NUMBA_NUM_THREADS and OMP_NUM_THREADS 1/2,
NPY_DISABLE_CPU_FEATURES all of numpy's dispatch targets this CPU has / only
the AVX-512 ones / none. Every digest must be equal, and each setting must be
seen to take effect.

NUMBA_CPU_NAME=host is not the host: LLVM answers "'host' is not a recognized
processor for this target (ignoring processor)" and numba caches that code
under a key of its own, so the setting that named it compiled every kernel
again (116 s of CPU measured) for a processor nobody runs.
"""

from __future__ import annotations

import invariance_probe
import numpy as np
import pytest
from kernel_cases import OPS, SEED, build_cases
from kernel_subprocess import run_probes

from kernels import reference
from tests.generic_isa import GENERIC


def host_dispatch_features() -> list[str]:
    """numpy's runtime-dispatch targets this CPU supports (the names NPY_DISABLE_CPU_FEATURES accepts)."""
    from numpy._core import _multiarray_umath as umath

    return [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]


def settings_under_test() -> list[dict[str, str]]:
    features = host_dispatch_features()
    wide_simd = [f for f in features if "512" in f or f == "X86_V4"]
    return [
        {},
        {"ATEN_CPU_CAPABILITY": "default", **GENERIC, "NUMBA_NUM_THREADS": "1",
         "OMP_NUM_THREADS": "1", "NPY_DISABLE_CPU_FEATURES": " ".join(features)},
        {"ATEN_CPU_CAPABILITY": "avx2", "NUMBA_NUM_THREADS": "2",
         "OMP_NUM_THREADS": "2", "NPY_DISABLE_CPU_FEATURES": " ".join(wide_simd)},
    ]  # fmt: skip


def check_settings_took_effect(env: dict[str, str], seen: dict) -> None:
    """Fail if the libraries did not apply what `env` asked for."""
    for feature in env.get("NPY_DISABLE_CPU_FEATURES", "").split():
        assert feature not in seen["numpy_dispatch_enabled"], f"numpy still dispatches to {feature}"
    if "NUMBA_CPU_NAME" in env:
        assert seen["numba_cpu_name"] == env["NUMBA_CPU_NAME"]
    if "NUMBA_NUM_THREADS" in env:
        assert seen["numba_threads"] == int(env["NUMBA_NUM_THREADS"])
    if "OMP_NUM_THREADS" in env:
        assert seen["torch_threads"] == int(env["OMP_NUM_THREADS"])
    if "ATEN_CPU_CAPABILITY" in env:
        assert seen["torch_capability"] == env["ATEN_CPU_CAPABILITY"].upper()


@pytest.mark.slow
def test_digests_equal_across_isa_and_threads():
    envs = settings_under_test()
    results = list(zip(envs, run_probes("invariance_probe.py", [str(SEED)], envs, timeout=900)))
    for env, report in results:
        check_settings_took_effect(env, report["settings"])
    digests = {(i, name): d for i, (_, r) in enumerate(results) for name, d in r["digests"].items()}
    first = {version: results[0][1]["digests"][f"reference{version}"] for version in ("", "@v2")}
    differing = [
        f"run {i} {name} ({results[i][0] or 'defaults'}): {d}"
        for (i, name), d in digests.items()
        if d != first["@v2" if name.endswith("@v2") else ""]
    ]
    assert len(digests) == 4 * len(envs)
    assert not differing, f"reference under defaults: {first}\n" + "\n".join(differing)


def test_a_changed_bit_changes_the_digest():
    # The digests compare everything only if one flipped bit moves them.
    cases = {op: build_cases(op, SEED, small=True) for op in OPS}
    base = invariance_probe.digest_backend(reference, cases)
    label, (x, w, eps) = cases["rmsnorm"][0]
    x = x.copy()
    x.view(np.uint32)[0, 0] ^= 1
    cases["rmsnorm"][0] = (label, (x, w, eps))
    assert invariance_probe.digest_backend(reference, cases) != base
