"""The lab mode on the triton backend, run by the Triton interpreter: prints one JSON line for test_lab_triton.py.

Run as a script with TRITON_INTERPRET=1 (tests/lab/test_lab_triton.py does), so the variable never
reaches the rest of the test session. It holds, bit for bit:

- kernels/triton_lab.py's functions against kernels/lab_math.py's on special values, random bit patterns
  and each function's working range (numpy's own float32 sin and tanh beside them: the failing baseline);
- every case of tests/lab/test_lab_ops.py (forward and backward), the lab functions' entries and
  tests/lab/test_lab_accuracy.py's one-op cases (each TABLE entry's aten overload called directly), under
  CanonicalMode on triton, reference and cpu, at arithmetic versions 1 and 2 (stock torch beside them);
- whole steps of tests/lab/models.py: TinyGPT2 through LabRun, and the tiny Llama script through
  `p2paudit train-script --backend triton` and `verify-script`, against the reference backend's digests.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

import kernels
from kernels import lab_math

F32 = np.float32
BACKENDS = ("reference", "cpu", "triton")
UNARY = ("sin", "cos", "tanh", "gelu_tanh", "rsqrt", "reciprocal", "sigmoid")


def probe_inputs(seed: int) -> np.ndarray:
    """Special values, the trig domain's edges, tanh's split, any bit pattern, and each function's range."""
    rng = np.random.default_rng(seed)
    special = np.array(
        [0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 1.1754944e-38, 0.625, -0.625, 65536.0, -65536.0,
         65536.01, 9.0, -9.5, 100.0, 1e30, -1e30, np.pi / 4, 3 * np.pi / 4],
        dtype=F32,
    )  # fmt: skip
    near_split = np.nextafter(F32(0.625), np.array([0.0, 1.0], dtype=F32))
    any_bits = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(F32)
    ranges = [rng.uniform(lo, hi, 1500).astype(F32) for lo, hi in ((-1, 1), (-20, 20), (-70000, 70000))]
    return np.concatenate([special, near_split, any_bits, *ranges])


def bits_differ(a: np.ndarray, b: np.ndarray) -> int:
    """How many elements differ in their bits (NaN payloads included)."""
    return int(np.count_nonzero(np.asarray(a).view(np.uint32) != np.asarray(b).view(np.uint32)))


def probe_functions() -> dict[str, int]:
    """Per lab function: elements where triton's bits differ from lab_math's; and numpy's baseline."""
    from kernels import triton_lab

    x = probe_inputs(1)
    dy = probe_inputs(2)[: x.size]
    out = {name: bits_differ(getattr(triton_lab, name)(x), getattr(lab_math, name)(x)) for name in UNARY}
    out["gelu_tanh_backward"] = bits_differ(triton_lab.gelu_tanh_backward(x, dy), lab_math.gelu_tanh_backward(x, dy))
    for base in (2.0, 10000.0, 0.5):
        out[f"pow_scalar_base {base}"] = bits_differ(
            triton_lab.pow_scalar_base(F32(base), x), lab_math.pow_scalar_base(F32(base), x)
        )
    with np.errstate(all="ignore"):
        out["baseline numpy sin"] = bits_differ(np.sin(x), lab_math.sin(x))
        out["baseline numpy tanh"] = bits_differ(np.tanh(x), lab_math.tanh(x))
    return out


def probe_errors() -> list[str]:
    """triton_lab refuses what lab_math refuses, with the same message."""
    from kernels import KernelInputError, triton_lab

    def message(fn: Callable[[], object]) -> str:
        try:
            fn()
        except KernelInputError as e:
            return str(e)
        return "no KernelInputError"

    cases: list[tuple[Callable[[], object], Callable[[], object]]] = [
        (lambda: triton_lab.sin(np.ones(2)), lambda: lab_math.sin(np.ones(2))),
        (lambda: triton_lab.pow_scalar_base(F32(-2.0), np.ones(2, F32)),
         lambda: lab_math.pow_scalar_base(F32(-2.0), np.ones(2, F32))),
    ]  # fmt: skip
    pairs = [(message(t), message(r)) for t, r in cases]
    return [f"{t!r} != {r!r}" for t, r in pairs if t != r or t == "no KernelInputError"]


def lab_cases() -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """test_lab_ops's forward cases, the lab functions' other entries, and backward cases as forward functions."""
    from tests.lab.test_lab_ops import BACKWARDS, CASES

    cases = dict(CASES)
    cases["sigmoid"] = torch.sigmoid
    cases["pow scalar base"] = lambda x: 10000.0 ** (x / 7)
    cases["reciprocal"] = lambda x: torch.reciprocal(x * x + 1.0)
    cases["pow -0.5 and -1"] = lambda x: (x * x + 1.0).pow(-0.5) + (x * x + 2.0).pow(-1)
    backward = dict(BACKWARDS)
    backward["sigmoid, rsqrt"] = lambda x, w: (torch.sigmoid(x @ w) * torch.rsqrt(x @ w * (x @ w) + 1.0)).sum()
    backward["sin, cos"] = lambda x, w: ((x @ w).sin() * (x @ w).cos()).sum()
    for name, fn in backward.items():
        cases[f"backward {name}"] = _as_forward(fn)
    return cases


def _as_forward(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """fn(x, w).backward() with x, w cut from the case's input; its value is w's gradient."""

    def run(x: torch.Tensor) -> torch.Tensor:
        w = x.reshape(-1)[:24].reshape(6, 4).detach().clone().requires_grad_()
        fn(x.reshape(-1)[24:54].reshape(5, 6).detach().clone(), w).backward()
        assert w.grad is not None
        return w.grad

    return run


def digest(out: object) -> str:
    """SHA-256 over the bits of every tensor in `out` (a tensor, or lists and tuples of them)."""
    h = hashlib.sha256()
    for t in out if isinstance(out, (list, tuple)) else [out]:
        if isinstance(t, torch.Tensor):
            h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def one_op_cases() -> dict[str, Callable[[], str]]:
    """tests/lab/test_lab_accuracy.py's cases (one aten overload each: every TABLE entry but AdamW and arange),
    each as a thunk giving its outputs' digest (an in-place op's: its first argument's)."""
    from tests.lab.test_lab_accuracy import CASE_TABLE, Case

    def thunk(case: Case) -> Callable[[], str]:
        def run() -> str:
            args = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args)
            out = case.fn(*args)
            return digest(args[0] if case.inplace else out)

        return run

    return {f"op {name}": thunk(case) for name, case in CASE_TABLE.items()}


def probe_ops() -> tuple[dict[str, dict[str, str]], list[str]]:
    """Per case and arithmetic version: each backend's output digest, and stock torch's; the ops triton ran."""
    from p2paudit.lab import CanonicalMode

    cases = one_op_cases()
    for name, fn in lab_cases().items():
        x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(5))
        cases[name] = lambda fn=fn, x=x: digest(fn(x.clone()))
    out: dict[str, dict[str, str]] = {}
    reached: set[str] = set()
    for name, run in sorted(cases.items()):
        row = {"stock": run()}
        for arithmetic in (1, 2):
            for be in BACKENDS:
                with CanonicalMode(kernels.get_backend(be, arithmetic), math=lab_math.for_backend(be)) as mode:
                    row[f"{be} {arithmetic}"] = run()
                if be == "triton":
                    reached |= set(mode.calls)
        out[name] = row
    return out, sorted(reached)


def step_digests(make: Callable[[], tuple[torch.nn.Module, torch.optim.Optimizer]], arithmetic: int) -> dict[str, str]:
    from p2paudit.lab import LabRun
    from tests.lab import models

    out = {}
    for be in ("triton", "reference"):
        model, opt = make()
        run = LabRun(model, opt, backend=be, arithmetic=arithmetic)
        with run.step(0):
            models.train_step(model, opt, models.batches(1)[0])
        out[be] = run.records[0].state.text()
    return out


def probe_cli(where: Path) -> dict[str, object]:
    """train-script --backend triton and verify-script of the tiny Llama script, beside the reference's digest."""
    from click.testing import CliRunner

    from p2paudit.cli import cli
    from p2paudit.lab import load_script, train_script
    from tests.lab.lab_runs import TINY_SCRIPT

    script = where / "lab_tiny.py"
    script.write_text(TINY_SCRIPT)
    env = {"P2PAUDIT_HOME": str(where / "home")}
    trained = CliRunner().invoke(cli, ["train-script", str(script), str(where / "run"), "--steps", "1",
                                       "--backend", "triton"], env=env)  # fmt: skip
    verified = CliRunner().invoke(cli, ["verify-script", str(where / "run")], env=env)
    manifest = json.loads((where / "run" / "manifest.json").read_bytes()) if trained.exit_code == 0 else {}
    claims, _, _ = train_script(load_script(script), 1, backend="reference")
    return {
        "train": [trained.exit_code, trained.output],
        "verify": [verified.exit_code, verified.output],
        "backend": manifest.get("backend"),
        "reference state": claims.states[0].text(),
    }


def main() -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run me with TRITON_INTERPRET=1")
    from tests.lab import models

    ops, reached = probe_ops()
    result: dict[str, object] = {"functions": probe_functions(), "errors": probe_errors(), "ops": ops}
    result["triton reached"] = reached
    result["gpt2 step v1"] = step_digests(models.make_gpt2, 1)
    with tempfile.TemporaryDirectory() as tmp:
        result["cli"] = probe_cli(Path(tmp))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
