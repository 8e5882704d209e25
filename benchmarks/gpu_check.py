"""GPU check of the Triton backend: compile, audit, compare bit for bit with the CPU backend, time.

One script, end to end in a few minutes on one GPU, in both arithmetic
versions (docs/arithmetic.md; version 2 folds dot products with fma):

  1. compile every Triton kernel for this GPU and audit its PTX (no fma
     but version 2's fold's fma.rn.f32, no approximate division/sqrt, no
     flush-to-zero: kernels/triton_ptx.py);
  2. for each op at a training-sized shape, compare the Triton output's digest
     with the CPU backend's (prepared on a CPU machine into
     benchmarks/gpu_inputs/cpu_digests.json by --prepare, from the same
     seeded inputs; --cpu-live recomputes them here), and time the Triton
     op against torch's own float32 op (TF32 off), both device-resident;
     the ops that fold dot products (kernels.versions.FOLDS) once per
     version, on the same inputs ("matmul" and "matmul@v2");
  3. train the golden tiny run (p2paudit/run/golden.py: 8 steps) on the
     Triton backend in each version and compare the state digest with the
     committed constant (skipped with --quick: the interpreter is too slow);
  4. run the shared kernel cases (tests/kernels/kernel_cases.py, full sizes:
     awkward shapes, subnormals, signed zeros, inf, NaN) through the Triton
     backend and through kernels.cpu, live, and compare bit for bit; the
     folds again at version 2;
  5. op table 1's lab functions (kernels/triton_lab.py: sin, cos, tanh,
     GELU and its backward, rsqrt, reciprocal, sigmoid, pow with a scalar
     base) on special values and random bits, against kernels/lab_math.py,
     bit for bit (tests/lab/triton_probe.py's inputs; reported as cases
     named "lab ...");
  6. two lab steps of each tiny model of tests/lab/test_lab_golden.py under
     the lab mode on the Triton backend, in both versions, against the
     golden value-trace digests (every op's outputs; cases "lab step ...",
     naming the first op that differs from the cpu backend's).

    python benchmarks/gpu_check.py --out OUT_DIR          # on a CUDA machine
    python benchmarks/gpu_check.py --prepare [--backend reference]  # any machine: CPU digests
    TRITON_INTERPRET=1 python benchmarks/gpu_check.py --quick --out OUT_DIR
                                                          # dry run on CPU (no real timings)

Writes OUT_DIR/gpu_check.json and OUT_DIR/gpu_check.md after every stage.
Exit status: 0 all equal, 1 some difference or forbidden instruction,
2 no CUDA (and not a --quick interpreter dry run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "kernels"), str(REPO / "benchmarks")]
DIGESTS = REPO / "benchmarks" / "gpu_inputs" / "cpu_digests.json"
NAN_BITS = 0x7FC00000

from gpu_workloads import SEED, SIZES, Workload, make_inputs, workloads  # noqa: E402  (after the path)

__all__ = ["SEED", "SIZES", "Workload", "make_inputs", "workloads"]  # the tests read them here


def backend(name: str, arithmetic: int):
    """kernels' backend `name` ("cpu", "reference", "triton") at arithmetic version `arithmetic`."""
    from kernels import get_backend

    return get_backend(name, arithmetic)


def digest(outputs) -> str:
    """sha256 over each output's shape and little-endian bits, every NaN as 0x7FC00000."""
    h = hashlib.sha256()
    for o in outputs if isinstance(outputs, tuple) else (outputs,):
        a = np.ascontiguousarray(np.asarray(o), dtype="<f4")
        bits = a.view("<u4").copy()
        bits[np.isnan(a)] = NAN_BITS
        h.update(repr(a.shape).encode() + bits.tobytes())
    return h.hexdigest()


# ------------------------------------------------------------------ stages


class Report:
    """Results so far, written to OUT_DIR after every stage (a timeout keeps what was done)."""

    def __init__(self, out: Path, meta: dict):
        self.out, self.data = out, {"meta": meta, "audit": {}, "cases": {}, "ops": [], "golden": {}}
        out.mkdir(parents=True, exist_ok=True)

    def save(self) -> None:
        (self.out / "gpu_check.json").write_text(json.dumps(self.data, indent=1))
        (self.out / "gpu_check.md").write_text(markdown(self.data))

    def failed(self) -> bool:
        d = self.data
        return (
            any(a["problems"] for a in d["audit"].values())
            or any(d["cases"].values())
            or any(not o["equal"] for o in d["ops"])
            or any(not g["equal"] for g in d.get("golden", {}).values())
        )


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def audit_kernels(report: Report, arch: int) -> None:
    """Stage 1: compile every kernel for sm_<arch> and audit its PTX."""
    from kernels import triton_ptx as P

    for spec in P.kernel_specs():
        t = time.perf_counter()
        try:
            problems = P.audit(P.compile_spec(spec, arch=arch), spec.fused)
        except Exception as e:  # one kernel that fails to compile must not stop the run
            problems = [f"compile error: {type(e).__name__}: {e}"[:500]]
        report.data["audit"][spec.name] = {"problems": problems, "compile_s": round(time.perf_counter() - t, 2)}
        log(f"audit {spec.name}: {'; '.join(problems) or 'clean'}")
    report.save()


def check_cases(report: Report, small: bool) -> None:
    """Stage 4: the shared kernel cases, Triton against kernels.cpu, live; the folds at both versions."""
    from kernel_cases import OPS, check_backend

    from kernels.versions import FOLDS

    runs = [(op, 1) for op in OPS] + [(op, 2) for op in OPS if op in FOLDS]
    for op, version in runs:
        name = op if version == 1 else f"{op}@v2"
        t = time.perf_counter()
        try:
            failures = check_backend(backend("triton", version), backend("cpu", version), op, SEED, small=small)
        except Exception as e:
            failures = [f"error: {type(e).__name__}: {e}"[:500]]
        report.data["cases"][name] = failures[:5]
        log(f"cases {name}: {len(failures)} differ ({time.perf_counter() - t:.1f}s)")
    report.save()


def check_lab_functions(report: Report) -> None:
    """Stage 5: the lab functions' Triton kernels against kernels/lab_math.py (numpy), bit for bit."""
    from tests.lab.triton_probe import probe_functions

    t = time.perf_counter()
    try:
        counts = {k: v for k, v in probe_functions().items() if not k.startswith("baseline")}
    except Exception as e:
        counts = {"error": f"{type(e).__name__}: {e}"[:500]}
    for name, differ in counts.items():
        report.data["cases"][f"lab {name}"] = [f"{differ} elements differ"] if differ else []
    log(
        f"lab functions: {sum(1 for v in counts.values() if v)} of {len(counts)} differ ({time.perf_counter() - t:.1f}s)"
    )
    report.save()


def _lab_records(case: str, backend_name: str, arithmetic: int) -> list:
    """The two steps' records (state and trace digests, value trace) of a golden case on a backend."""
    import torch

    from p2paudit.lab import LabRun
    from tests.lab import models
    from tests.lab.test_lab_golden import CASES

    factory, (b, t), vocab = CASES[case]
    torch.manual_seed(0)
    model, opt = factory()
    run = LabRun(model, opt, backend=backend_name, arithmetic=arithmetic, values=True)
    for i, tokens in enumerate(models.batches(2, b=b, t=t, vocab=vocab)):
        with run.step(i):
            models.train_step(model, opt, tokens)
    return run.records


def check_lab_steps(report: Report, quick: bool, backend_name: str = "triton") -> None:
    """Stage 6: two lab steps of each tiny model of tests/lab/test_lab_golden.py (Llama, grouped-query Llama,
    GPT-2, a 2,000-token vocabulary) under the lab mode on the Triton backend, in both versions, against the
    golden state, dataflow-trace and value-trace digests every backend must give (quick: one case, one
    version). Where they differ, the value traces of the Triton and cpu backends, made here, name the first
    op whose output differs. (`backend_name`: the tests run the stage on the cpu backend.)"""
    from p2paudit.lab.trace import first_value_departure
    from tests.lab.test_lab_golden import CASES, GOLDEN

    wanted = [("llama", 2)] if quick else [(case, v) for case in sorted(CASES) for v in (1, 2)]
    for case, arithmetic in wanted:
        t = time.perf_counter()
        try:
            golden = GOLDEN[(case, arithmetic)]
            differ = []
            for i, r in enumerate(_lab_records(case, backend_name, arithmetic)):
                h = hashlib.sha256()
                for name, d in r.values or ():
                    h.update(name.encode() + b"\0" + d)
                if (r.state.text(), r.trace.hex(), h.hexdigest()) != golden[i]:
                    cpu = _lab_records(case, "cpu", arithmetic)[i]
                    first = first_value_departure(list(r.values or ()), list(cpu.values or ()))
                    same = "not the golden digests, yet every op's output is the cpu backend's"
                    differ.append(f"step {i}: {first or same}")
        except Exception as e:
            differ = [f"{type(e).__name__}: {e}"[:500]]
        report.data["cases"][f"lab step {case}@v{arithmetic}"] = differ
        log(f"lab step {case}@v{arithmetic}: {'equal' if not differ else '; '.join(differ)} "
            f"({time.perf_counter() - t:.1f}s)")  # fmt: skip
        report.save()


def golden_state_digest(backend_name: str, arithmetic: int) -> tuple[str, float]:
    """The state digest after the golden tiny run on `backend_name`, and the mean seconds per step.

    The run of p2paudit/run/golden.py and tests/engine/test_golden_backends.py:
    train_config("tiny", steps=8, seed=0) on the shipped corpus, stepped by the engine alone.
    """
    from p2paudit.engine.config import train_config
    from p2paudit.engine.schedule import batch_for_step
    from p2paudit.engine.state import init_state
    from p2paudit.engine.step import train_step
    from p2paudit.run.digest import digest_bytes, digest_state
    from p2paudit.run.golden import GOLDEN_TINY_STEPS
    from p2paudit.run.shards import corpus_tokens

    be = backend(backend_name, arithmetic)
    cfg = train_config("tiny", steps=GOLDEN_TINY_STEPS, seed=0)
    tokens = corpus_tokens()
    data_key = digest_bytes(tokens.tobytes())  # the manifest's data.data_key
    state = init_state(cfg)
    t = time.perf_counter()
    for n in range(GOLDEN_TINY_STEPS):
        state = train_step(state, batch_for_step(tokens, data_key, cfg, n), cfg, be).state
    return digest_state(state).text(), (time.perf_counter() - t) / GOLDEN_TINY_STEPS


def check_golden(report: Report, backend_name: str = "triton") -> None:
    """Stage 3: the golden tiny run on `backend_name` in each version, against the committed digests."""
    from p2paudit.run.golden import GOLDEN_TINY_DIGESTS

    for version, want in sorted(GOLDEN_TINY_DIGESTS.items()):
        try:
            got, s_per_step = golden_state_digest(backend_name, version)
            row = {"equal": got == want, "digest": got, "want": want, "s_per_step": s_per_step}
            log(f"golden tiny run v{version} on {backend_name}: equal={row['equal']} ({s_per_step:.2f} s/step)")
        except Exception as e:
            row = {"equal": False, "want": want, "error": f"{type(e).__name__}: {e}"[:500]}
            log(f"golden tiny run v{version} on {backend_name}: ERROR {row['error']}")
        report.data["golden"][f"v{version}"] = row
        report.save()


def time_ms(fn: Callable, device: str, budget_s: float = 0.25, max_iter: int = 100) -> float:
    """Mean milliseconds per call of fn, after a warm-up, over enough calls to fill budget_s."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()
    sync()
    t = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t, 1e-6)
    n = int(max(1, min(max_iter, budget_s / once)))
    t = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t) / n * 1e3


def _to_device(args: tuple, device: str) -> tuple:
    import torch

    return tuple(torch.from_numpy(a).to(device) if isinstance(a, np.ndarray) else a for a in args)


def _host(result):
    return tuple(r.cpu().numpy() for r in result) if isinstance(result, tuple) else result.cpu().numpy()


def _check_op(w: Workload, size: str, device: str, stored: dict, cpu_live: bool) -> dict:
    """Digest comparison and timings of workload `w`; a mismatch is described."""
    from kernel_cases import compare_outputs

    cpu, triton_backend = backend("cpu", w.arithmetic), backend("triton", w.arithmetic)
    args = make_inputs(w, size)
    dev = _to_device(args, device)
    out = _host(getattr(triton_backend, w.op)(*dev))
    got = digest(out)
    want, source = stored.get(w.name), "prepared"
    if cpu_live or want is None:
        want, source = digest(getattr(cpu, w.op)(*args)), "live"
    row = {
        "name": w.name,
        "arithmetic": w.arithmetic,
        "shapes": [list(np.shape(a)) for a in args if isinstance(a, np.ndarray)],
        "equal": got == want,
        "cpu_digest": source,
        "digest": got[:16],
    }
    if not row["equal"]:  # say where: recompute the CPU output here
        cpu_out = getattr(cpu, w.op)(*args)
        if source == "prepared" and digest(cpu_out) == got:
            # Inputs made by another numpy than the prepared digests' one.
            row.update(equal=True, cpu_digest="live (the prepared digest is stale)")
        else:
            row["difference"] = compare_outputs(out, cpu_out)
    iters = 100 if device == "cuda" else 1  # the interpreter's timings mean nothing: one call
    row["triton_ms"] = time_ms(lambda: getattr(triton_backend, w.op)(*dev), device, max_iter=iters)
    row["torch_ms"] = time_ms(w.torch_op(*dev), device, max_iter=iters)
    row["ratio"] = row["triton_ms"] / row["torch_ms"]
    return row


def check_ops(report: Report, size: str, device: str, cpu_live: bool) -> None:
    """Stage 2: each op at size `size`: digest against the CPU backend's, and time against torch."""
    stored = json.loads(DIGESTS.read_text())["digests"].get(size, {}) if DIGESTS.exists() else {}
    for w in workloads():
        try:
            row = _check_op(w, size, device, stored, cpu_live)
            log(
                f"{w.name:24s} equal={row['equal']} ({row['cpu_digest']})  triton {row['triton_ms']:.3f} ms  "
                f"torch {row['torch_ms']:.3f} ms  x{row['ratio']:.2f}"
            )
        except Exception as e:  # one failing op must not stop the run
            row = {"name": w.name, "shapes": [], "equal": False, "error": f"{type(e).__name__}: {e}"[:500]}
            log(f"{w.name:24s} ERROR {row['error']}")
        report.data["ops"].append(row)
        report.save()


def markdown(d: dict) -> str:
    """The report as markdown: meta, audit and case summaries, the timing table."""
    m = d["meta"]
    lines = [
        f"GPU check on {m['device']} ({m['mode']}), torch {m['torch']}, triton {m['triton']}, "
        f"sizes `{m['size']}`, {m['when']}.",
        "",
    ]
    bad = {k: v["problems"] for k, v in d["audit"].items() if v["problems"]}
    lines.append(f"PTX audit: {len(d['audit'])} kernels, {len(bad)} with forbidden instructions {bad or ''}")
    diff = {k: v for k, v in d["cases"].items() if v}
    lines.append(f"Shared cases against kernels.cpu: {len(d['cases'])} ops, {len(diff)} with differences {diff or ''}")
    for version, g in sorted(d.get("golden", {}).items()):
        seen = g.get("error") or f"{g['digest']}, {g['s_per_step']:.2f} s/step"
        lines.append(f"Golden tiny run {version}: {'equal' if g['equal'] else 'DIFFERENT'} ({seen}; want {g['want']})")
    lines += [
        "",
        "| op | shapes | bitwise equal to cpu | triton ms | torch fp32 ms | triton / torch |",
        "|---|---|---|---|---|---|",
    ]
    for o in d["ops"]:
        shapes = " ".join("x".join(map(str, s)) for s in o["shapes"])
        if "error" in o:
            lines.append(f"| {o['name']} | | ERROR {o['error']} | | | |")
            continue
        lines.append(
            f"| {o['name']} | {shapes} | {'yes' if o['equal'] else 'NO'} ({o['cpu_digest']}) | "
            f"{o['triton_ms']:.3f} | {o['torch_ms']:.3f} | {o['ratio']:.2f} |"
        )
    lines += [f"- {o['name']}: {o['difference']}" for o in d["ops"] if o.get("difference")]
    return "\n".join(lines) + "\n"


def prepare(backend_name: str) -> None:
    """Write a CPU backend's digests of every workload (each at its version), both sizes, to DIGESTS.

    "cpu" and "reference" are held bitwise equal by the test suite, so either
    gives the same digests; "reference" is slower but needs no numba.
    """
    out = {"seed": SEED, "sizes": SIZES, "backend": backend_name, "machine": platform.platform(), "digests": {}}
    for size in SIZES:
        out["digests"][size] = {}
        for w in workloads():
            t = time.perf_counter()
            be = backend(backend_name, w.arithmetic)
            out["digests"][size][w.name] = digest(getattr(be, w.op)(*make_inputs(w, size)))
            log(f"{backend_name} {size} {w.name}: {time.perf_counter() - t:.1f}s")
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(json.dumps(out, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("out/gpu_check"), help="directory for gpu_check.json/.md")
    ap.add_argument("--quick", action="store_true", help="small shapes (the interpreter dry run uses these)")
    ap.add_argument("--cpu-live", action="store_true", help="recompute CPU digests here instead of the prepared ones")
    ap.add_argument("--skip-cases", action="store_true", help="skip stages 4-6 (the shared cases, the lab's)")
    ap.add_argument("--skip-golden", action="store_true", help="skip stage 3 (the golden tiny run; --quick skips it)")
    ap.add_argument("--prepare", action="store_true", help=f"compute CPU digests into {DIGESTS.relative_to(REPO)}")
    ap.add_argument("--backend", choices=("cpu", "reference"), default="cpu", help="backend for --prepare")
    args = ap.parse_args(argv)
    if args.prepare:
        prepare(args.backend)
        return 0
    import torch

    interpret = os.environ.get("TRITON_INTERPRET") == "1"
    if not torch.cuda.is_available() and not (interpret and args.quick):
        print(
            "gpu_check needs a CUDA GPU: torch.cuda.is_available() is False "
            "(a CPU dry run is TRITON_INTERPRET=1 ... --quick)",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if interpret else "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's baseline in true fp32 too
    torch.backends.cudnn.allow_tf32 = False
    import triton

    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (TRITON_INTERPRET=1, timings are not GPU figures)"
    size = "quick" if args.quick else "full"
    report = Report(
        args.out,
        {
            "device": name,
            "mode": "interpret" if interpret else "cuda",
            "size": size,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        },
    )
    if device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        audit_kernels(report, 10 * major + minor)
    # The training-size figures first: if the run is cut short, they are what
    # matter most, and the report on disk already holds them.
    check_ops(report, size, device, args.cpu_live)
    if not (args.skip_golden or args.quick):
        check_golden(report)
    if not args.skip_cases:
        check_cases(report, small=args.quick)
        check_lab_functions(report)
        check_lab_steps(report, args.quick)
    report.save()
    print(markdown(report.data))
    return 1 if report.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
