"""Measure the worst error (in ulps) and the monotonicity of reference exp, log, silu.

Not a test: a measurement behind the bounds stated in test_kernels_accuracy.py
and test_kernels_exp_log_props.py. Walks every float32 of each domain in
increasing order (or every `--stride`-th one), in chunks:

    python tests/kernels/measure_exp_log.py            # exhaustive, minutes
    python tests/kernels/measure_exp_log.py --stride 97  # a quick sample

The float64 results of numpy's exp/log are the yardstick (they are accurate
to well under a float32 ulp). An ulp is that of the float32 nearest the exact
value; below 2^-126 it is 2^-149.
"""

from __future__ import annotations

import argparse
import struct

import numpy as np

from kernels import reference as R

CHUNK = 1 << 22


def bits_of(x: float) -> int:
    """The bit pattern of float32(x)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def ascending(lo: float, hi: float, stride: int):
    """Yield float32 arrays that together hold every stride-th float32 in [lo, hi], in increasing order."""
    runs = []
    if lo < 0:  # negative floats: larger patterns are smaller values
        runs.append((bits_of(lo), bits_of(-0.0) if hi >= 0 else bits_of(hi), -stride))
    if hi >= 0:
        runs.append((bits_of(0.0) if lo < 0 else bits_of(lo), bits_of(hi), stride))
    for start, stop, step in runs:
        for first in range(start, stop + np.sign(step), step * CHUNK):
            last = first + step * CHUNK
            last = min(last, stop + 1) if step > 0 else max(last, stop - 1)
            yield np.arange(first, last, step, dtype=np.int64).astype(np.uint32).view(np.float32)


def ulp_errors(y: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|y - exact| in ulps of the float32 nearest `exact` (finite entries only)."""
    ok = np.isfinite(exact) & np.isfinite(y)
    e = np.abs(exact[ok])
    _, ex = np.frexp(e)  # e = f * 2^ex, f in [0.5, 1)
    ulp = np.ldexp(1.0, np.maximum(ex - 1, -126) - 23)
    return np.abs(y[ok].astype(np.float64) - exact[ok]) / ulp


def measure(name, fn, exact_fn, lo, hi, stride, monotone) -> None:
    """Print the worst ulp error of fn on [lo, hi] and whether it is non-decreasing there."""
    worst, at, prev, mono_ok, count = 0.0, None, -np.inf, True, 0
    for x in ascending(lo, hi, stride):
        y = fn(x)
        with np.errstate(all="ignore"):
            err = ulp_errors(y, exact_fn(x.astype(np.float64)))
        if err.size and err.max() > worst:
            worst = float(err.max())
            at = float(x[np.isfinite(y) & np.isfinite(exact_fn(x.astype(np.float64)))][err.argmax()])
        if monotone:
            mono_ok &= bool(y[0] >= prev) and bool(np.all(np.diff(y) >= 0))
            prev = y[-1]
        count += x.size
    mono = f", non-decreasing: {mono_ok}" if monotone else ""
    print(f"{name} on [{lo}, {hi}], {count} points: worst {worst:.4f} ulp at x = {at!r}{mono}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stride", type=int, default=1, help="take every stride-th float32 (1 = all)")
    stride = parser.parse_args().stride
    fmax = float(np.finfo(np.float32).max)
    measure("exp", R.exp, np.exp, -104.0, 88.72283172607421875, stride, True)
    measure("log", R.log, np.log, 1e-45, fmax, stride, True)
    measure("silu", R.silu, lambda x: x / (1.0 + np.exp(-x)), -88.0, 89.0, stride, False)


if __name__ == "__main__":
    main()
