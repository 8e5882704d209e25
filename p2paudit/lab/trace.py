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


def _output(o: torch.Tensor) -> str:
    """An output's [shape, dtype], encoded (formatted once per shape and dtype)."""
    key = (o.shape, o.dtype)
    text = _OUTPUTS.get(key)
    if text is None:
        if len(_OUTPUTS) > 100_000:  # a bound: a script of ever new shapes does not grow it without end
            _OUTPUTS.clear()
        text = _OUTPUTS[key] = "[[" + ",".join(map(str, o.shape)) + "]," + _encode_str(str(o.dtype)) + "]"
    return text


@dataclass
class Tracer:
    """Labels tensors as the step's ops make them and keeps each op's canonical record.

    A label is kept with its JSON text, so a record is joined from ready pieces.
    """

    records: list[bytes] = field(default_factory=list)
    values: list[tuple[str, bytes]] | None = None  # with a list: (op name, digest of its outputs) per op
    _labels: dict[int, tuple[weakref.ref[torch.Tensor], str]] = field(default_factory=dict)
    _external: int = 0

    def name(self, t: torch.Tensor, name: str) -> None:
        """Label `t` (a parameter, gradient or optimizer tensor) by its name."""
        self._labels[id(t)] = (weakref.ref(t), _json(["named", name]))

    def _label_of(self, t: torch.Tensor) -> str:
        known = self._labels.get(id(t))
        if known is not None and known[0]() is t:
            return known[1]
        label = _json(["ext", self._external, list(t.shape), str(t.dtype)])
        self._external += 1
        self._labels[id(t)] = (weakref.ref(t), label)
        return label

    def _walk(self, x: object, inputs: list[str], constants: list[str]) -> None:
        if isinstance(x, torch.Tensor):
            inputs.append(self._label_of(x))
        elif type(x) is int:  # the most common constants first: an int, a list of ints (as _json writes them)
            constants.append(int.__repr__(x))
        elif type(x) is list and all(type(i) is int for i in x):
            constants.append("[" + ",".join(map(int.__repr__, x)) + "]")
        elif isinstance(x, (list, tuple)) and any(isinstance(i, torch.Tensor) for i in x):
            for i in x:
                self._walk(i, inputs, constants)
        else:
            constants.append(_json(_constant(x)))

    def record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: object) -> None:
        """Append the record of op `name` and label its outputs (in-place ops relabel their targets)."""
        inputs: list[str] = []
        constants: list[str] = []
        for x in args:
            self._walk(x, inputs, constants)
        for key in sorted(kwargs):
            constants.append(_encode_str(key))
            self._walk(kwargs[key], inputs, constants)
        outs = [out] if type(out) is torch.Tensor else [o for o in _flatten(out) if isinstance(o, torch.Tensor)]
        if not outs and name.endswith("_"):  # in-place list ops return nothing: their targets changed
            outs = [t for t in _flatten(args[0]) if isinstance(t, torch.Tensor)] if args else []
        index = len(self.records)
        for j, o in enumerate(outs):
            self._labels[id(o)] = (weakref.ref(o), f'["op",{index},{j}]')
        body = f"[{_encode_str(name)},[{','.join(inputs)}],[{','.join(map(_output, outs))}],[{','.join(constants)}]]"
        self.records.append(body.encode("ascii"))
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
