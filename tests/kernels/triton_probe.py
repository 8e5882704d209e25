"""Compare the triton backend with the reference on every op (small shapes).

Run by test_kernels_bitwise_triton.py in a fresh interpreter with
TRITON_INTERPRET=1 set before triton is imported (the interpreter mode is
fixed when a kernel is decorated, so it cannot be switched inside pytest).
Prints one JSON line: {"import_error": str|null, "failures": {op: [lines]},
"bad_input": [lines]}.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
from kernel_cases import OPS, check_backend

from kernels import KernelInputError
from kernels import reference as R


def probe_bad_input(backend) -> list[str]:
    """Inputs every backend must refuse with KernelInputError; return the ones it did not."""
    good = np.ones((3, 4), dtype=np.float32)
    cases = {
        "matmul float64": lambda: backend.matmul(good.astype(np.float64), good.T.copy()),
        "matmul shapes": lambda: backend.matmul(good, good),
        "embedding index": lambda: backend.embedding(good, np.array([0, 3], dtype=np.int64)),
        "rmsnorm weight": lambda: backend.rmsnorm(good, np.ones(3, np.float32), 1e-5),
        "exp non-contiguous": lambda: backend.exp(good.T),
    }
    missed = []
    for name, call in cases.items():
        try:
            call()
            missed.append(f"{name}: no error")
        except KernelInputError:
            pass
        except Exception as exc:  # noqa: BLE001  (reported, not hidden)
            missed.append(f"{name}: {type(exc).__name__}: {exc}")
    return missed


def main() -> None:
    seed = int(sys.argv[1])
    ops = sys.argv[2].split(",") if len(sys.argv) > 2 else list(OPS)
    report = {"import_error": None, "failures": {}, "bad_input": []}
    try:
        from kernels import get_backend

        backend = get_backend("triton")
    except Exception:  # noqa: BLE001  (an import failure is the result)
        report["import_error"] = traceback.format_exc(limit=3)
        print(json.dumps(report))
        return
    for op in ops:
        try:
            report["failures"][op] = check_backend(backend, R, op, seed, small=True)
        except Exception:  # noqa: BLE001
            report["failures"][op] = [f"{op} raised:\n{traceback.format_exc(limit=4)}"]
    report["bad_input"] = probe_bad_input(backend)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
