"""Where each tensor of a checkpoint lies: the safetensors header parsed strictly, before any data is read.

A safetensors file is u64 little-endian N, N bytes of JSON header, then the
data region. The header maps each tensor name to {"dtype", "shape",
"data_offsets": [begin, end]} (offsets into the data region) and may hold
"__metadata__" (str -> str). Only the format itself is relied on (docs/run-format.md):
keys in any order, tensors laid out in any order, but

- the names are exactly the state's, each with the state's dtype and shape;
- each tensor's byte length is its dtype size times its element count;
- the spans tile the data region with no gap and no overlap, so the file's
  length is 8 + N + the sum of the tensors' bytes.

That is what lets a reader map, read or fetch (HTTP Range) one tensor at a
time: `CheckpointLayout.tensors[name]` gives its absolute byte range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from p2paudit.errors import InputError
from p2paudit.run.storage import parse_json

SAFETENSORS_DTYPES = {"float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "uint8": "U8", "bool": "BOOL"}
HEADER_ALLOWANCE = 64 * 1024  # header bytes allowed beyond 256 per tensor

Shapes = Mapping[str, tuple[tuple[int, ...], np.dtype]]
MAX_ELEMENTS = 2**33  # one tensor's elements when no shapes are given (a 1B-class state's largest is ~2^27)
# The most tensors a state may have: a 1B-parameter Llama's has about 600 (parameters and moments), a mixture
# of experts with a tensor per expert matrix (61 layers of 256 experts) about 140,000; each lets a header be
# 256 bytes longer (max_header_bytes), so a state claimed with millions would let a header run to gigabytes
MAX_STATE_TENSORS = 1 << 18

_CODES = {code: np.dtype(name) for name, code in SAFETENSORS_DTYPES.items()}


@dataclass(frozen=True)
class TensorSpan:
    """One tensor: its dtype and shape, and its bytes [start, end) counted from the file's first byte."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class CheckpointLayout:
    """A parsed header: where the data begins, the metadata, each tensor's span, the file's length."""

    data_start: int
    metadata: dict[str, str]
    tensors: dict[str, TensorSpan]
    file_size: int


def max_header_bytes(count: int) -> int:
    """The largest JSON header accepted for a state of `count` tensors."""
    return HEADER_ALLOWANCE + 256 * count


def max_header_structure(count: int) -> int:
    """The most arrays, objects and separators (run.storage.json_structure) a header of `count` tensors may
    have: an honest entry has 8 and one more a dimension past the first (at most 8 dimensions)."""
    return 1024 + 32 * count


def header_length(prefix: bytes, count: int, where: str) -> int:
    """N from the first 8 bytes; InputError if they are missing or N exceeds max_header_bytes(count)."""
    if len(prefix) < 8:
        raise InputError(f"{where} is not a valid safetensors file: {len(prefix)} bytes, shorter than its header")
    n = int.from_bytes(prefix[:8], "little")
    limit = max_header_bytes(count)
    if n < 2 or n > limit:
        raise InputError(f"{where} is not a valid safetensors file: header length {n}, want 2..{limit}")
    return n


def parse_layout(header: bytes, shapes: Shapes | None, where: str, names: list[str] | None = None) -> CheckpointLayout:
    """The layout from the JSON header bytes (without the 8-byte length), checked against `shapes`.

    Without `shapes`, the tensors must be exactly `names` and each takes the
    dtype and shape its entry states (at most MAX_ELEMENTS elements).
    """
    count = len(shapes) if shapes is not None else len(names or [])
    parsed = parse_json(header.rstrip(b" "), f"{where} header", max_header_structure(count))
    if not isinstance(parsed, dict):
        raise InputError(f"{where}: header is not a JSON object")
    if shapes is None:
        shapes = _shapes_from_header(parsed, names or [], where)
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise InputError(f"{where}: __metadata__ is not an object of strings")
    if set(parsed) != set(shapes):
        missing, extra = sorted(set(shapes) - set(parsed)), sorted(set(parsed) - set(shapes))
        raise InputError(f"{where}: tensors missing {missing[:4]}, unexpected {[n[:80] for n in extra[:4]]}")
    data_start = 8 + len(header)
    spans = [_span(name, parsed[name], shapes[name], data_start, where) for name in shapes]
    offset = data_start
    for span in sorted(spans, key=lambda s: (s.start, s.end)):
        if span.start != offset:
            gap = "overlaps another" if span.start < offset else f"leaves a gap of {span.start - offset} bytes"
            raise InputError(f"{where}: tensor {span.name} {gap}")
        offset = span.end
    return CheckpointLayout(data_start, dict(metadata), {s.name: s for s in spans}, offset)


def _span(name: str, entry: object, want: tuple[tuple[int, ...], np.dtype], data_start: int, where: str) -> TensorSpan:
    shape, dtype = tuple(want[0]), np.dtype(want[1])
    code = SAFETENSORS_DTYPES[dtype.name]
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise InputError(f"{where}: tensor {name} entry is not {{dtype, shape, data_offsets}}")
    got_shape = entry["shape"]
    if (
        entry["dtype"] != code
        or not isinstance(got_shape, list)
        or not all(_is_count(x) for x in got_shape)
        or got_shape != list(shape)
    ):
        raise InputError(f"{where}: tensor {name} is {entry['dtype']} {got_shape}, want {code} {list(shape)}")
    offsets = entry["data_offsets"]
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(x) for x in offsets):
        raise InputError(f"{where}: tensor {name} data_offsets is not two non-negative integers")
    begin, end = offsets
    nbytes = math.prod(shape) * dtype.itemsize
    if end - begin != nbytes:
        raise InputError(f"{where}: tensor {name} spans {end - begin} bytes, want {nbytes}")
    return TensorSpan(name, dtype, shape, data_start + begin, data_start + end)


def _is_count(x: object) -> bool:
    """A JSON non-negative integer (JSON true is not 1 here)."""
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _shapes_from_header(
    parsed: dict[str, object], names: list[str], where: str
) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    shapes = {}
    for name in names:
        entry = parsed.get(name)
        if not isinstance(entry, dict) or entry.get("dtype") not in _CODES or not isinstance(entry.get("shape"), list):
            raise InputError(f"{where}: tensor {name} is missing or has no known dtype and shape")
        shape = entry["shape"]
        if len(shape) > 8 or not all(_is_count(x) for x in shape) or math.prod(shape) > MAX_ELEMENTS:
            raise InputError(f"{where}: tensor {name} has shape {shape[:9]}, not a bounded list of counts")
        shapes[name] = (tuple(shape), _CODES[entry["dtype"]])
    return shapes
