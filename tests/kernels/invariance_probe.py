"""Digest every op's outputs on a fixed input set, for the reference and cpu backends.

Run by test_kernels_invariance.py under different instruction-set and thread
settings (ATEN_CPU_CAPABILITY, NUMBA_CPU_NAME, NUMBA_NUM_THREADS,
OMP_NUM_THREADS, NPY_DISABLE_CPU_FEATURES). Prints one JSON line with a
SHA-256 per backend (and per backend at arithmetic version 2, over the ops
that version changes) and the settings as the libraries report them, so the
test can see that each setting took effect.
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np
from kernel_cases import OPS, as_outputs, build_cases, canonical_bits

from kernels import get_backend
from kernels.versions import FOLDS


def digest_backend(backend, cases: dict[str, list], ops: tuple[str, ...] = OPS) -> str:
    """SHA-256 over (op, case label, shape, canonical bits) of every output of `ops`, in order."""
    h = hashlib.sha256()
    for op in ops:
        for label, args in cases[op]:
            for out in as_outputs(getattr(backend, op)(*args)):
                h.update(f"{op}|{label}|{np.shape(out)}|".encode())
                h.update(canonical_bits(out).tobytes())
    return h.hexdigest()


def library_settings() -> dict:
    """What numpy, numba and torch report about their CPU paths and threads."""
    import numba
    import torch
    from numba.core import config
    from numpy._core import _multiarray_umath as umath

    dispatch = [f for f in umath.__cpu_dispatch__ if umath.__cpu_features__.get(f)]
    return {
        "numpy_dispatch_enabled": dispatch,
        "numba_cpu_name": config.CPU_NAME or "host",
        "numba_threads": numba.get_num_threads(),
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    seed = int(sys.argv[1])
    cases = {op: build_cases(op, seed) for op in OPS}
    digests = {name: digest_backend(get_backend(name), cases) for name in ("reference", "cpu")}
    # Arithmetic version 2 changes only the folds: digest those, on every setting (generic: libm's fmaf).
    for name in ("reference", "cpu"):
        digests[f"{name}@v2"] = digest_backend(get_backend(name, 2), cases, FOLDS)
    print(json.dumps({"digests": digests, "settings": library_settings()}))


if __name__ == "__main__":
    main()
