"""Why a replayed step differs from its claim: which tensors, by how much, and where it departs.

Tensor comparison needs the claimed tensors (a checkpoint of the step's
output); without one, the per-tensor digests still name the tensors. The
bisect re-runs the step with the engine's trace hook on two backends (and
reads the published trace, if any) and finds the first operation whose
output digest differs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from p2paudit.run.digest import StateDigest

MAX_NAMES_SHOWN = 8  # in printed lines; to_dict keeps them all


class TensorDiffDict(TypedDict):
    name: str
    differing: int
    size: int
    max_ulps: int | None


class DivergenceDict(TypedDict):
    a: str
    b: str
    index: int | None
    op: str | None
    compared: int


class DiagnosisDict(TypedDict):
    """Diagnosis.to_dict: the JSON view `verify-range --json` prints."""

    step: int
    tensors: list[str]
    diffs: list[TensorDiffDict]
    divergences: list[DivergenceDict]
    conclusion: str


@dataclass(frozen=True)
class TensorDiff:
    """How one tensor differs: elements that differ (of `size`), largest distance in ulps.

    NaN equals NaN. max_ulps is None when a NaN faces a number (no finite distance).
    """

    name: str
    differing: int
    size: int
    max_ulps: int | None

    def to_dict(self) -> TensorDiffDict:
        return {"name": self.name, "differing": self.differing, "size": self.size, "max_ulps": self.max_ulps}

    def line(self) -> str:
        ulps = "NaN vs number" if self.max_ulps is None else f"max {self.max_ulps} ulp"
        return f"{self.name}: {self.differing} of {self.size} elements differ, {ulps}"


@dataclass(frozen=True)
class Divergence:
    """The first operation where two traces of one step differ (None: they agree on all `compared` ops)."""

    source_a: str
    source_b: str
    index: int | None
    op_name: str | None
    compared: int

    def to_dict(self) -> DivergenceDict:
        return {
            "a": self.source_a,
            "b": self.source_b,
            "index": self.index,
            "op": self.op_name,
            "compared": self.compared,
        }

    def line(self) -> str:
        if self.index is None:
            return f"{self.source_a} and {self.source_b} agree on all {self.compared} operations"
        return f"{self.source_a} and {self.source_b} first depart at operation #{self.index} {self.op_name}"


@dataclass(frozen=True)
class Diagnosis:
    """Everything known about one mismatching step, and the conclusion drawn."""

    step: int
    tensors: tuple[str, ...]
    diffs: tuple[TensorDiff, ...]
    divergences: tuple[Divergence, ...]
    conclusion: str

    def to_dict(self) -> DiagnosisDict:
        return {
            "step": self.step,
            "tensors": list(self.tensors),
            "diffs": [d.to_dict() for d in self.diffs],
            "divergences": [d.to_dict() for d in self.divergences],
            "conclusion": self.conclusion,
        }

    def lines(self) -> list[str]:
        shown = ", ".join(self.tensors[:MAX_NAMES_SHOWN])
        more = f" and {len(self.tensors) - MAX_NAMES_SHOWN} more" if len(self.tensors) > MAX_NAMES_SHOWN else ""
        out = [f"step {self.step}: {len(self.tensors)} tensor(s) differ: {shown}{more}"]
        out += [f"  {d.line()}" for d in self.diffs]
        if not self.diffs:
            out.append(f"  (state {self.step + 1} has no published checkpoint: element counts and ulps need one)")
        out += [f"  {d.line()}" for d in self.divergences]
        out.append(f"  conclusion: {self.conclusion}")
        return out


def ordered_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> int64 on a line where adjacent floats are 1 apart (+0 and -0 both 0)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)


def compare_tensor(name: str, claimed: np.ndarray, observed: np.ndarray) -> TensorDiff:
    """Count differing elements and the largest ulp distance (float32) or absolute difference (integers)."""
    if claimed.shape != observed.shape or claimed.dtype != observed.dtype:
        return TensorDiff(name, max(claimed.size, observed.size), max(claimed.size, observed.size), None)
    if claimed.dtype.kind != "f":
        diff = np.abs(claimed.astype(np.int64) - observed.astype(np.int64)).reshape(-1)
        return TensorDiff(name, int(np.count_nonzero(diff)), int(claimed.size), int(diff.max(initial=0)))
    a, b = claimed.reshape(-1), observed.reshape(-1)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    both_nan = nan_a & nan_b
    one_nan = nan_a ^ nan_b
    ulps = np.abs(ordered_bits(a) - ordered_bits(b))
    ulps[both_nan | one_nan] = 0
    differing = int(np.count_nonzero(ulps) + np.count_nonzero(one_nan))
    max_ulps = None if one_nan.any() else int(ulps.max(initial=0))
    return TensorDiff(name, differing, int(a.size), max_ulps)


def compare_states(
    claimed: dict[str, np.ndarray], observed: dict[str, np.ndarray], names: list[str]
) -> tuple[TensorDiff, ...]:
    """TensorDiff for each name in `names` (the tensors whose digests differ)."""
    return tuple(compare_tensor(n, claimed[n], observed[n]) for n in names if n in claimed and n in observed)


def differing_names(claimed: StateDigest, observed: StateDigest) -> tuple[str, ...]:
    """Tensor names whose digests differ (or that only one side has)."""
    a, b = claimed.tensor_map(), observed.tensor_map()
    return tuple(sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n)))


def first_divergence(
    name_a: str, ops_a: list[tuple[str, bytes]], name_b: str, ops_b: list[tuple[str, bytes]]
) -> Divergence:
    """The first index where the two traces differ in op name or digest (or where one ends early)."""
    for i, (op_a, op_b) in enumerate(zip(ops_a, ops_b)):
        if op_a != op_b:
            label = op_a[0] if op_a[0] == op_b[0] else f"{op_a[0]} (vs {op_b[0]})"
            return Divergence(name_a, name_b, i, label, i + 1)
    if len(ops_a) != len(ops_b):
        i = min(len(ops_a), len(ops_b))
        longer = ops_a if len(ops_a) > len(ops_b) else ops_b
        return Divergence(
            name_a, name_b, i, f"{longer[i][0]} (one trace has {len(ops_a)} ops, the other {len(ops_b)})", i
        )
    return Divergence(name_a, name_b, None, None, len(ops_a))


def conclude(divergences: tuple[Divergence, ...], backends: tuple[str, str]) -> str:
    """The verdict on where the fault lies, from the backend-vs-backend and vs-published comparisons."""
    between = divergences[0]
    if between.index is not None:
        return (
            f"backends {backends[0]} and {backends[1]} disagree from operation {between.op_name}: "
            f"a backend departs from the canonical arithmetic; the verifier cannot judge the claim"
        )
    agree = f"backends {backends[0]} and {backends[1]} agree on all {between.compared} operations"
    published = [d for d in divergences[1:] if d.index is not None]
    if published:
        return (
            f"{agree}, the published trace departs at operation {published[0].op_name}: "
            f"the fault is in the claim, not the verifier"
        )
    return f"{agree} but not with the published state: the fault is in the claim, not the verifier"
