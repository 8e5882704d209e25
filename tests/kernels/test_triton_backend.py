"""The Triton backend, run by the Triton interpreter, gives the reference's bits on every op.

The kernels run under TRITON_INTERPRET=1 in one subprocess (this file, run as
a script), so the variable never leaks into the rest of the test session.
This is the only place the per-op Triton-versus-reference comparison runs
(tests/engine/test_triton_step.py compares a whole step instead).
The subprocess runs the shared cases of kernel_cases.py (small shapes), extra
cases that reach the backend's multi-pass trees (rows wider than one block,
columns taller than one fold), torch-tensor inputs, and bad inputs; it prints
one JSON object that the tests below read. Beside them, stock torch on the
same cases fails, which shows that the cases can tell orders apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO, SEED, run_probe
from kernel_cases import OPS, any_bits, build_cases, check_backend, compare_outputs, sprinkle, tiny, wide

from kernels.versions import FOLDS

pytestmark = [pytest.mark.triton, pytest.mark.slow]  # one subprocess runs the interpreter

# Shapes past the backend's single-block limits (rows of 2^10, folds of 2^3 rows).
# Widths around 2^10, 2^11, 2^13 and past 2^13 (one, then two fold passes per row);
# heights 9 to 600 (one to four fold passes down the columns, the last one narrower).
EXTRA_ROWS = [(2, 1024), (3, 1025), (2, 2049), (1, 4097), (2, 9000), (9, 3), (65, 5), (70, 5), (600, 2)]


def _extra_cases(rng) -> list[tuple[str, tuple]]:
    """(op, args) cases that take the fold paths of kernels/triton_launch.py."""
    cases = []
    for shape in EXTRA_ROWS:
        x = sprinkle(rng, wide(rng, shape), 3)
        cases += [("sum_rows", (x,)), ("sum_cols", (x,)), ("max_rows", (x,))]
    logits = wide(rng, (2, 1100), spread=4)
    targets = rng.integers(0, 1100, 2)
    cases += [("cross_entropy", (logits, targets)), ("cross_entropy_backward", (logits, targets, 0.37))]
    x, w = wide(rng, (2, 1100)), wide(rng, (1100,), spread=1)
    cases += [("rmsnorm", (x, w, 1e-5))]
    return cases


def _probe_torch_inputs(triton_backend, reference, rng) -> list[str]:
    """Torch tensors in, torch tensors out, with the reference's bits."""
    import torch

    problems = []
    a, b = wide(rng, (5, 7)), wide(rng, (7, 3))
    got = triton_backend.matmul(torch.from_numpy(a), torch.from_numpy(b))
    if not isinstance(got, torch.Tensor):
        problems.append(f"matmul of tensors returned a {type(got).__name__}, want a torch.Tensor")
    else:
        problems.append(compare_outputs(got.numpy(), reference.matmul(a, b)))
    logits, targets = wide(rng, (3, 9)), rng.integers(0, 9, 3)
    loss = triton_backend.cross_entropy(torch.from_numpy(logits), torch.from_numpy(targets))
    problems.append(compare_outputs(loss.numpy(), reference.cross_entropy(logits, targets)))
    y, rstd = triton_backend.rmsnorm(torch.from_numpy(a), torch.from_numpy(b[:, 0].copy()), 1e-5)
    ry, rrstd = reference.rmsnorm(a, b[:, 0].copy(), 1e-5)
    problems.append(compare_outputs((y.numpy(), rstd.numpy()), (ry, rrstd)))
    return [p for p in problems if p]


def _probe_layout_ops(triton_backend, reference, rng) -> list[str]:
    """The ops between kernels on device tensors: the reference's (numpy's) bits, kept on the device."""
    import torch

    problems = []
    up, down = triton_backend.to_device, triton_backend.to_host
    pairs = [(wide(rng, (33, 7)), wide(rng, (33, 7))), (tiny(rng, (50,)), -tiny(rng, (50,)))]
    pairs += [
        (any_bits(rng, (2000,)), any_bits(rng, (2000,))),
        (sprinkle(rng, wide(rng, (4, 5)), 6), wide(rng, (4, 5))),
    ]
    pairs += [(np.array(1.5, np.float32), np.array(2.0**-149, np.float32))]  # 0-d, a subnormal
    for a, b in pairs:
        got = triton_backend.add(up(a), up(b))
        if not isinstance(got, torch.Tensor):
            problems.append(f"add of tensors returned a {type(got).__name__}")
        problems.append(compare_outputs(down(got), np.asarray(reference.add(a, b))))
        for d in (2.0, 8.0, 3.0, 0.1):  # powers of two (exact unless subnormal) and not
            problems.append(compare_outputs(down(triton_backend.div_scalar(up(a), d)), reference.div_scalar(a, d)))
    x = wide(rng, (2 * 5, 12))  # B = 2, T = 5, C = 12, H = 3
    heads = triton_backend.split_heads(up(x), 2, 5, 3)
    problems.append(compare_outputs(down(heads), reference.split_heads(x, 2, 5, 3)))
    problems.append(compare_outputs(down(triton_backend.merge_heads(heads, 2, 3)), x))
    # The Llama family's ops: rope (odd positions and a head size past one half-block), grouped heads, mul.
    for bh, t, d in ((3, 5, 4), (2, 7, 130)):
        x, cos, sin = sprinkle(rng, wide(rng, (bh, t, d)), 4), wide(rng, (t, d // 2)), wide(rng, (t, d // 2))
        got = triton_backend.rope(up(x), up(cos), up(sin))
        problems.append(compare_outputs(down(got), reference.rope(x, cos, sin)))
        other = x[::-1].copy()
        problems.append(compare_outputs(down(triton_backend.mul(up(x), up(other))), reference.mul(x, other)))
    kv = sprinkle(rng, wide(rng, (6, 3, 4)), 6)
    problems.append(compare_outputs(down(triton_backend.repeat_heads(up(kv), 3)), reference.repeat_heads(kv, 3)))
    problems.append(compare_outputs(down(triton_backend.sum_head_groups(up(kv), 3)), reference.sum_head_groups(kv, 3)))
    tokens = rng.integers(0, 50, (3, 9))
    for got, want in zip(triton_backend.split_tokens(up(tokens)), reference.split_tokens(tokens), strict=True):
        if not np.array_equal(down(got), want) or down(got).dtype != np.int64:
            problems.append(f"split_tokens: {down(got)} != {want}")
    # An index range noted at upload is checked without reading the ids back, also on slices.
    table = wide(rng, (40, 3))
    idx, _, _ = triton_backend.split_tokens(up(tokens))
    problems.append("" if "outside [0, 40)" in _error_of(triton_backend.embedding, up(table), idx) else "range")
    # A tensor changed in place after upload loses its noted range and is checked by value.
    ids = up(np.array([0, 1], dtype=np.int64))
    ids[1] = 40
    problems.append("" if "outside [0, 40)" in _error_of(triton_backend.embedding, up(table), ids) else "in place")
    return [p for p in problems if p]


def _error_of(fn, *args) -> str:
    """The KernelInputError message `fn(*args)` raises, or a note that it raised none."""
    from kernels import KernelInputError

    try:
        fn(*args)
    except KernelInputError as e:
        return str(e)
    return "no KernelInputError"


def _probe_errors(triton_backend, reference, rng) -> dict[str, list[str]]:
    """Bad inputs: (triton's message, reference's message) per case, and torch-only refusals."""
    import torch

    a = wide(rng, (3, 4))
    bad = {
        "matmul shapes": ("matmul", (a, wide(rng, (5, 2)))),
        "float64": ("sum_rows", (a.astype(np.float64),)),
        "matmul float64": ("matmul", (a.astype(np.float64), a.T.copy())),
        "rmsnorm weight": ("rmsnorm", (a, np.ones(3, np.float32), 1e-5)),
        "not contiguous": ("exp", (a.T,)),
        "index range": ("embedding", (a, np.array([0, 3], dtype=np.int64))),
        "targets dtype": ("cross_entropy", (a, np.array([0, 1, 2], dtype=np.int32))),
        "max of empty rows": ("max_rows", (np.zeros((2, 0), np.float32),)),
        "adamw step": ("adamw", (a, a, a, a, 0, 1e-3, 0.9, 0.99, 1e-8, 0.0)),
    }
    out = {
        name: [_error_of(getattr(triton_backend, op), *args), _error_of(getattr(reference, op), *args)]
        for name, (op, args) in bad.items()
    }
    t = torch.from_numpy(a)
    out["mixed kinds"] = [
        _error_of(triton_backend.matmul, t, a.T.copy()),
        "arguments mix numpy arrays and torch tensors",
    ]
    out["tensor not contiguous"] = [_error_of(triton_backend.exp, t.T), "not contiguous"]
    out["tensor float64"] = [_error_of(triton_backend.exp, t.double()), "has dtype float64, want float32"]
    return out


class _TorchBaseline:
    """Stock torch for a few ops: the failing baseline the same cases must catch."""

    @staticmethod
    def matmul(a, b):
        import torch

        return (torch.from_numpy(a) @ torch.from_numpy(b)).numpy()

    @staticmethod
    def sum_rows(x):
        import torch

        return torch.from_numpy(x).sum(dim=1).numpy()

    @staticmethod
    def exp(x):
        import torch

        return torch.from_numpy(x).exp().numpy()


def probe() -> dict:
    """Everything the tests check, computed under TRITON_INTERPRET=1."""
    from kernels import get_backend, reference, triton_backend

    started = time.perf_counter()
    rng = np.random.default_rng([SEED, 3])
    result = {"ops": {op: check_backend(triton_backend, reference, op, SEED, small=True) for op in OPS}}
    # Arithmetic version 2 (tl.fma): its near-tie cases fail unless the interpreter's fma rounds once.
    triton_v2, reference_v2 = get_backend("triton", 2), get_backend("reference", 2)
    result["ops_v2"] = {op: check_backend(triton_v2, reference_v2, op, SEED, small=True) for op in FOLDS}
    extra = []
    for op, args in _extra_cases(rng):
        msg = compare_outputs(getattr(triton_backend, op)(*args), getattr(reference, op)(*args))
        if msg:
            extra.append(f"{op} {[np.shape(a) for a in args]}: {msg}")
    result["extra"] = extra
    result["torch"] = _probe_torch_inputs(triton_backend, reference, rng)
    result["errors"] = _probe_errors(triton_backend, reference, rng)
    result["layout"] = _probe_layout_ops(triton_backend, reference, rng)
    result["baseline"] = {
        op: len(check_backend(_TorchBaseline, reference, op, SEED, small=True)) for op in ("matmul", "sum_rows", "exp")
    }
    result["cases"] = {op: len(build_cases(op, SEED, small=True)) for op in OPS}
    result["seconds"] = time.perf_counter() - started
    return result


# ------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def results() -> dict:
    return run_probe("test_triton_backend.py", [], {"TRITON_INTERPRET": "1"}, timeout=900)


@pytest.mark.parametrize("op", OPS)
def test_triton_matches_reference_bitwise(op, results):
    assert results["cases"][op] > 0, f"no cases for {op}"
    failures = results["ops"][op]
    assert not failures, f"{len(failures)} of {results['cases'][op]} cases differ:\n" + "\n".join(failures[:10])


@pytest.mark.parametrize("op", FOLDS)
def test_triton_matches_reference_bitwise_in_version_2(op, results):
    failures = results["ops_v2"][op]
    assert not failures, f"{len(failures)} of {results['cases'][op]} cases differ:\n" + "\n".join(failures[:10])


def test_triton_matches_reference_past_one_block(results):
    assert not results["extra"], "\n".join(results["extra"])


def test_triton_layout_ops_match_numpy_on_the_device(results):
    assert not results["layout"], "\n".join(results["layout"])


def test_triton_takes_and_returns_torch_tensors(results):
    assert not results["torch"], "\n".join(results["torch"])


def test_triton_refuses_what_the_reference_refuses(results):
    for name, (got, want) in results["errors"].items():
        assert got != "no KernelInputError", f"{name}: the triton backend accepted it"
        assert want in got, f"{name}: triton says {got!r}, want {want!r}"


def test_stock_torch_fails_the_same_cases(results):
    # The failing baseline: if stock torch passed, the cases could not tell orders apart.
    for op, failures in results["baseline"].items():
        assert failures > 0, f"stock torch {op} matched the reference on every case"


def test_import_without_cuda_or_interpreter_is_refused():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "P2PAUDIT_TRITON_COMPILE_ONLY")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # hide any GPU, so the check cannot pass on one
    code = "import kernels.triton_backend"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300
    )
    assert proc.returncode != 0
    assert "ImportError: triton backend needs CUDA or TRITON_INTERPRET=1" in proc.stderr
    env["P2PAUDIT_TRITON_COMPILE_ONLY"] = "1"  # compile-only builds kernels but never runs them
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=300
    )
    assert "ImportError: triton backend needs CUDA or TRITON_INTERPRET=1" in proc.stderr


if __name__ == "__main__":
    print(json.dumps(probe()))
