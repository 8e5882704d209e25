"""The dataflow trace of one step: every op in order, with its shapes, dtypes and where each input came from.

A record is canonical JSON: [op name, inputs, outputs, constants] where
each tensor input is ["op", i, j] (output j of the step's op i),
["named", name] (a parameter, gradient or optimizer tensor named at the
step's start) or ["ext", k, shape, dtype] (the k-th tensor first seen from
outside, such as the batch); outputs are [shape, dtype]; constants are the
op's non-tensor arguments. The step's trace digest is

    SHA-256( b"p2paudit lab trace v1\\0" || for each record: u32(len) || record bytes )

so two runs that executed a different op graph (another op, another shape,
another input wiring, another order of autograd's accumulation) have
different digests, and `first_departure` names the first op where they part.
A value trace (optional: `Tracer(values=[])`) keeps, per op, the SHA-256 of
its outputs' tensor digests, so `first_value_departure` names the first op
whose values differ between two executions of the same graph.
"""

from __future__ import annotations

import hashlib
import json
import struct
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from p2paudit.tensor_digest import digest_tensor

TRACE_DOMAIN = b"p2paudit lab trace v1\x00"
_encode_str = json.encoder.encode_basestring_ascii  # json.dumps's own string encoder (ensure_ascii)


def _constant(x: object) -> object:
    """A non-tensor argument as JSON: numbers, strings, bools, None, lists, dtypes and devices; else its type."""
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return repr(x)  # exact text of the binary64 value
    if isinstance(x, (list, tuple)):
        return [_constant(i) for i in x]
    if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(x)
    return type(x).__name__  # a handle (the profiler's ScriptObject): its repr holds an address


def _json(x: object) -> str:
    """x as json.dumps(x, separators=(",", ":"), ensure_ascii=True) writes it, for what _constant and the
    records hold (None, bools, ints, strings, lists): the same bytes without the encoder's per-call setup."""
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    if isinstance(x, int):
        return int.__repr__(x)
    if isinstance(x, str):
        return _encode_str(x)
    if isinstance(x, list):
        return "[" + ",".join(map(_json, x)) + "]"
    return json.dumps(x, separators=(",", ":"), ensure_ascii=True)  # anything else: the encoder itself


_OUTPUTS: dict[tuple[torch.Size, torch.dtype], str] = {}  # (shape, dtype) -> its encoded [shape, dtype]


def _output(key: tuple[torch.Size, torch.dtype]) -> str:
    """An output's [shape, dtype], encoded (formatted once per shape and dtype)."""
    text = _OUTPUTS.get(key)
    if text is None:
        if len(_OUTPUTS) > 100_000:  # a bound: a script of ever new shapes does not grow it without end
            _OUTPUTS.clear()
        shape, dtype = key
        text = _OUTPUTS[key] = "[[" + ",".join(map(str, shape)) + "]," + _encode_str(str(dtype)) + "]"
    return text


class _Text(str):
    """A constant already encoded (a keyword's name): written as it is."""


# What an op's record holds until the trace is read: its name, its inputs' labels (encoded text, or (i, j) for
# output j of op i), its constants (an int, a tuple of ints, encoded _Text, or _constant's JSON value) and its
# outputs' (shape, dtype). Formatting them waits: done op by op, between the step's kernels, each record cost
# three to four times what it costs in one pass at the end (the interpreter's data out of cache by then).
_Pending = tuple[str, list[str | tuple[int, int]], list[object], list[tuple[torch.Size, torch.dtype]]]


TensorCheck = Callable[[object], None]  # raises for a tensor (or a list, tuple or dict holding one) the op may not take
Inputs = tuple[list[str | tuple[int, int]], list[object]]  # an op's input labels and constants (Tracer.inputs)


def _encode_constant(c: object) -> str:
    if type(c) is int:
        return int.__repr__(c)
    if type(c) is tuple:
        return "[" + ",".join(map(int.__repr__, c)) + "]"
    if type(c) is _Text:
        return c
    return _json(c)


def _encode_label(label: str | tuple[int, int]) -> str:
    if isinstance(label, str):
        return label
    return f'["op",{label[0]},{label[1]}]'


@dataclass
class Tracer:
    """Labels tensors as the step's ops make them and keeps each op's canonical record.

    A named or external label is kept as its JSON text, an op's output as (op, output); `records` formats
    the ops recorded since it was last read.
    """

    values: list[tuple[str, bytes]] | None = None  # with a list: (op name, digest of its outputs) per op
    _records: list[bytes] = field(default_factory=list)
    _pending: list[_Pending] = field(default_factory=list)
    _labels: dict[int, tuple[weakref.ref[torch.Tensor], str | tuple[int, int]]] = field(default_factory=dict)
    _external: int = 0

    @property
    def records(self) -> list[bytes]:
        """Every op's record so far, in order (canonical JSON bytes)."""
        if self._pending:
            for name, inputs, constants, outs in self._pending:
                body = (
                    f"[{_encode_str(name)},[{','.join(map(_encode_label, inputs))}],"
                    f"[{','.join(map(_output, outs))}],[{','.join(map(_encode_constant, constants))}]]"
                )
                self._records.append(body.encode("ascii"))
            self._pending.clear()
        return self._records

    def name(self, t: torch.Tensor, name: str) -> None:
        """Label `t` (a parameter, gradient or optimizer tensor) by its name."""
        self._labels[id(t)] = (weakref.ref(t), _json(["named", name]))

    def _label_of(self, t: torch.Tensor) -> str | tuple[int, int]:
        known = self._labels.get(id(t))
        if known is not None and known[0]() is t:
            return known[1]
        label = _json(["ext", self._external, list(t.shape), str(t.dtype)])
        self._external += 1
        self._labels[id(t)] = (weakref.ref(t), label)
        return label

    def _walk(
        self, x: object, inputs: list[str | tuple[int, int]], constants: list[object], check: TensorCheck
    ) -> None:
        if isinstance(x, torch.Tensor):
            check(x)
            inputs.append(self._label_of(x))
        elif type(x) is int:  # the most common constants first: an int, a list of ints (kept as a tuple)
            constants.append(x)
        elif type(x) is list and all(type(i) is int for i in x):
            constants.append(tuple(x))
        elif isinstance(x, (list, tuple)) and any(isinstance(i, torch.Tensor) for i in x):
            for i in x:
                self._walk(i, inputs, constants, check)
        else:
            if isinstance(x, (list, tuple, dict)):
                check(x)  # a tensor deeper in (no aten op takes one): checked, recorded as a type
            constants.append(_constant(x))

    def inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any], check: TensorCheck) -> Inputs:
        """An op's inputs as its record will hold them (each tensor passed to `check` first, which may raise),
        taken before the op runs: its in-place outputs are relabelled only by `record`."""
        inputs: list[str | tuple[int, int]] = []
        constants: list[object] = []
        for x in args:
            self._walk(x, inputs, constants, check)
        for key in sorted(kwargs):
            constants.append(_Text(_encode_str(key)))
            self._walk(kwargs[key], inputs, constants, check)
        return inputs, constants

    def record(self, name: str, seen: Inputs, args: tuple[Any, ...], out: object) -> None:
        """Append the record of op `name` (its `inputs` taken before it ran) and label its outputs (in-place
        ops relabel their targets)."""
        outs = [out] if type(out) is torch.Tensor else [o for o in _flatten(out) if isinstance(o, torch.Tensor)]
        if not outs and name.endswith("_"):  # in-place list ops return nothing: their targets changed
            outs = [t for t in _flatten(args[0]) if isinstance(t, torch.Tensor)] if args else []
        index = len(self._records) + len(self._pending)
        for j, o in enumerate(outs):
            self._labels[id(o)] = (weakref.ref(o), (index, j))
        self._pending.append((name, seen[0], seen[1], [(o.shape, o.dtype) for o in outs]))
        if self.values is not None:
            h = hashlib.sha256()
            for j, o in enumerate(outs):
                h.update(digest_tensor(f"{name}/{j}", np.asarray(o.detach().numpy())))
            self.values.append((name, h.digest()))

    def digest(self) -> bytes:
        """The step's trace digest (raw SHA-256)."""
        return digest_records(self.records)


def _flatten(x: object) -> list[object]:
    if isinstance(x, (list, tuple)):
        return [i for item in x for i in _flatten(item)]
    return [x]


def digest_records(records: list[bytes]) -> bytes:
    """SHA-256 over the domain and every length-prefixed record, in order."""
    h = hashlib.sha256(TRACE_DOMAIN)
    for r in records:
        h.update(struct.pack("<I", len(r)))
        h.update(r)
    return h.digest()


def first_value_departure(ours: list[tuple[str, bytes]], theirs: list[tuple[str, bytes]]) -> str | None:
    """None when every op's outputs are equal; else one line naming the first op whose outputs differ."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"op {i} ({a[0]}) is the first whose outputs differ" + ("" if a[0] == b[0] else f" (there: {b[0]})")
    if len(ours) != len(theirs):
        return f"the value traces have {len(ours)} and {len(theirs)} ops"
    return None


def first_departure(ours: list[bytes], theirs: list[bytes]) -> str | None:
    """None when the traces are equal; else one line naming the first op where they differ."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"the op sequence differs at op {i}: {_describe(a)} here, {_describe(b)} there"
    if len(ours) != len(theirs):
        i = min(len(ours), len(theirs))
        extra = _describe(ours[i]) if len(ours) > i else _describe(theirs[i])
        return f"the op sequence differs at op {i}: {len(ours)} ops here, {len(theirs)} there (first extra: {extra})"
    return None


def _describe(record: bytes) -> str:
    """One op of a trace in words; a record that is not one (a publisher signs whatever it likes) says so."""
    try:
        name, inputs, outputs, _ = json.loads(record)
        return f"{name} of {len(inputs)} inputs -> {[tuple(o[0]) for o in outputs]}"
    except (ValueError, TypeError, IndexError, KeyError, RecursionError):
        return f"a record that is not a trace entry ({len(record)} bytes)"
