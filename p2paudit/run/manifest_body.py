"""The manifest body: its fields, their strict check, and its one canonical encoding.

The body is canonical JSON (keys sorted, no whitespace, UTF-8, no
NaN/Infinity), exactly as `canonical_json` writes it. Every field is checked
strictly (exact keys, exact JSON types, ranges, and consistency between
fields: see docs/run-format.md), and the parsed body must re-encode to
exactly the stored bytes, so one run has one encoding and one run id. Steps
are 0-based, as in the engine: step n reads `batch_for_step(..., n)` and
turns state n (n updates done) into state n + 1. The body lists the digest
of state 0 and, for every step, the data digest, the loss and the digest of
the state it produces. run.manifest signs and reads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np

from kernels.versions import VERSIONS
from p2paudit.engine import ENGINE_VERSION
from p2paudit.engine.config import MAX_SCHEDULE_STEPS, TrainConfig, check_preset_name
from p2paudit.engine.schedule import SCHEDULE_FUNCTION
from p2paudit.engine.state import state_names
from p2paudit.errors import InputError
from p2paudit.run.digest import StateDigest, StateDigestDict, format_digest, parse_digest
from p2paudit.run.shards import TOKENIZER, DataSpec
from p2paudit.run.storage import parse_json, read_file

RUN_FORMAT = "p2paudit-run"
RUN_VERSION = 1
MAX_CONFIG_BYTES = 64 * 1024
MAX_STEPS = MAX_SCHEDULE_STEPS  # steps_planned; the schedule counts steps below 2^32
BODY_KEYS = (
    "arithmetic_version",
    "checkpoint_every",
    "checkpoints",
    "config",
    "created_by",
    "data",
    "engine_version",
    "format",
    "initial_state",
    "loss_curve",
    "schedule",
    "steps",
    "steps_planned",
    "traces",
    "version",
)
SCHEDULE_KEYS = ("batch_size", "data_key", "function", "micro_batches", "seed", "seq_len")
STEP_KEYS = ("data", "loss", "output", "step")  # and "trace" exactly when the body's "traces" is true
CREATED_BY = re.compile(r"p2paudit [0-9A-Za-z][0-9A-Za-z.+!_-]{0,63}")


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8, NaN and infinities refused."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )
    except ValueError as exc:
        raise InputError(f"manifest body cannot be canonical JSON: {exc}") from None


def canonical_pieces(value: Mapping[str, object]) -> Iterator[bytes]:
    """canonical_json(value) in pieces: the object key by key, a list (or iterator) value item by item.

    JSON nests, so the pieces join to exactly canonical_json(value): this only
    frames the top level ("{", '"key":', ",", "[", "]", "}"); every value and
    item is canonical_json's own. A body is compared piece by piece with its
    stored bytes (same_bytes), so no second encoding of a large body is ever held.
    """
    if not value:
        yield b"{}"
        return
    for number, key in enumerate(sorted(value)):
        yield (b"," if number else b"{") + canonical_json(key) + b":"
        item = value[key]
        if isinstance(item, (list, Iterator)):
            yield b"["
            for index, element in enumerate(item):
                yield (b"," if index else b"") + canonical_json(element)
            yield b"]"
        else:
            yield canonical_json(item)
    yield b"}"


def same_bytes(pieces: Iterable[bytes], stored: bytes) -> bool:
    """True when the pieces join to exactly `stored` (compared as they come, none of them kept)."""
    view, at = memoryview(stored), 0
    for piece in pieces:
        if view[at : at + len(piece)] != piece:
            return False
        at += len(piece)
    return at == len(stored)


def show_value(value: object) -> str:
    """A value for an error message: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _keys(value: object, keys: tuple[str, ...], where: str) -> dict[str, Any]:
    """`value` as a dict with exactly `keys`; InputError naming `where` otherwise."""
    if not isinstance(value, dict):
        raise InputError(f"{where} is {show_value(value)}, want an object")
    if set(value) != set(keys):
        unknown, missing = sorted(set(value) - set(keys)), sorted(set(keys) - set(value))
        raise InputError(f"{where} has unknown keys {[k[:80] for k in unknown[:4]]} and lacks {missing}")
    return value


def _int(value: object, low: int, high: int, where: str) -> int:
    """`value` if it is a JSON integer (not a bool, not a float) in [low, high]."""
    if type(value) is not int or not low <= value <= high:
        raise InputError(f"{where} is {show_value(value)}, want an integer {low}..{high}")
    return value


def _equal(value: object, want: object, where: str) -> None:
    """InputError unless `value` is `want`, of the same exact type (1.0 and true are not 1)."""
    if type(value) is not type(want) or value != want:
        raise InputError(f"{where} is {show_value(value)}, want {show_value(want)}")


def _loss(value: object, where: str) -> float:
    """A loss: a finite binary64 that is exactly a float32 (the engine's loss, widened)."""
    if type(value) is not float or not np.isfinite(value) or float(np.float32(value)) != value:
        raise InputError(f"{where} is {show_value(value)}, want a finite float32 value written as a float")
    return value


class StepDict(TypedDict):
    """StepRecord.to_dict: one of the body's "steps" ("trace" only when the publisher wrote traces)."""

    step: int
    data: str
    loss: float
    output: StateDigestDict
    trace: NotRequired[str]


@dataclass(frozen=True)
class StepRecord:
    """What the publisher claims for one step: batch digest, loss, digest of the state it produces."""

    step: int
    data_digest: bytes  # the batch digest: tensor digest of the step's batch (not the data key)
    loss: float
    output: StateDigest
    trace: bytes | None = None  # SHA-256 of the published trace file, if the publisher wrote one

    def to_dict(self) -> StepDict:
        out: StepDict = {
            "step": self.step,
            "data": format_digest(self.data_digest),
            "loss": self.loss,
            "output": self.output.to_dict(),
        }
        if self.trace is not None:
            out["trace"] = format_digest(self.trace)
        return out

    @staticmethod
    def from_dict(item: object, step: int, names: list[str] | None = None, traces: bool | None = None) -> StepRecord:
        """Parse steps[step] strictly: its keys ("trace" exactly when `traces`; either when None),
        `step`, the batch digest, the loss, and the output state (with `names`, exactly those tensors)."""
        where = f"steps[{step}]"
        has_trace = isinstance(item, dict) and "trace" in item
        if traces is not None and has_trace != traces:
            raise InputError(
                f"{where} {'has' if has_trace else 'lacks'} a trace digest but traces is {str(traces).lower()}"
            )
        item = _keys(item, STEP_KEYS + (("trace",) if has_trace else ()), where)
        _equal(item["step"], step, f"{where}.step")
        trace = parse_digest(item["trace"], f"{where}.trace") if has_trace else None
        return StepRecord(
            step,
            parse_digest(item["data"], f"{where}.data"),
            _loss(item["loss"], f"{where}.loss"),
            StateDigest.from_dict(item["output"], f"{where}.output", names),
            trace,
        )


@dataclass(frozen=True)
class Body:
    """A checked manifest body (complete, or a publisher's progress so far)."""

    created_by: str
    arithmetic: int  # the arithmetic version (docs/arithmetic.md) every state of the run is computed in
    config: TrainConfig
    steps_planned: int
    checkpoint_every: int
    traces: bool
    data: DataSpec
    initial_state: StateDigest
    steps: tuple[StepRecord, ...]
    checkpoints: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        """The body as the publisher writes it; canonical_json of this is the one encoding."""
        return self._fields([r.to_dict() for r in self.steps])

    def encoded_pieces(self) -> Iterator[bytes]:
        """canonical_json(self.to_dict()) in pieces, one step record at a time (never the whole body at once)."""
        return canonical_pieces(self._fields(r.to_dict() for r in self.steps))

    def head(self) -> dict[str, Any]:
        """The body's fields but the per-step ones ("steps" and "loss_curve"), as to_dict writes them."""
        fields = self._fields([])
        del fields["steps"], fields["loss_curve"]
        return fields

    def _fields(self, steps: list[StepDict] | Iterator[StepDict]) -> dict[str, Any]:
        return {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "arithmetic_version": self.arithmetic,
            "engine_version": ENGINE_VERSION,
            "created_by": self.created_by,
            "config": self.config.to_dict(),
            "steps_planned": self.steps_planned,
            "checkpoint_every": self.checkpoint_every,
            "data": self.data.to_dict(),
            "schedule": schedule_object(self.config, self.data),
            "initial_state": self.initial_state.to_dict(),
            "steps": steps,
            "loss_curve": [r.loss for r in self.steps],
            "checkpoints": list(self.checkpoints),
            "traces": self.traces,
        }


def schedule_object(cfg: TrainConfig, data: DataSpec) -> dict[str, Any]:
    """The manifest's "schedule": what batch_for_step reads, each value a copy of the config's or data's."""
    return {
        "function": SCHEDULE_FUNCTION,
        "data_key": format_digest(data.data_key),
        "seed": cfg.seed,
        "micro_batches": cfg.micro_batches,
        "batch_size": cfg.batch_size,
        "seq_len": cfg.model.seq_len,
    }


def expected_checkpoints(done: int, steps_planned: int, every: int) -> list[int]:
    """The states a run checkpoints up to state `done`: 0, every K-th, and the last (steps_planned)."""
    return [0] + list(range(every, done + 1, every)) + ([done] if done == steps_planned and done % every else [])


def check_body(body: object, complete: bool = True, encoded: bytes | None = None) -> Body:
    """Check every field of a manifest body and their consistency; the parsed Body.

    `complete`: a published manifest (every planned step present); otherwise a
    publisher's progress (steps so far, ending at a checkpoint). The body must
    also re-encode to itself (Body.to_dict), so no second encoding of a run passes;
    `encoded`: the body's canonical bytes when the caller holds them (else they are made here).
    """
    body = _keys(body, BODY_KEYS, "manifest body")
    _equal(body["format"], RUN_FORMAT, "format")
    _equal(body["version"], RUN_VERSION, "version")
    arithmetic = body["arithmetic_version"]
    if type(arithmetic) is not int or arithmetic not in VERSIONS:
        raise InputError(
            f"arithmetic_version (the version this verifier implements) is {show_value(arithmetic)}, "
            f"want {' or '.join(map(str, VERSIONS))}"
        )
    _equal(body["engine_version"], ENGINE_VERSION, "engine_version (the version this verifier runs)")
    created_by = body["created_by"]
    if not isinstance(created_by, str) or not CREATED_BY.fullmatch(created_by):
        raise InputError(f"created_by is {show_value(created_by)}, want 'p2paudit <version>'")
    cfg = _check_config(body["config"])
    planned = _int(body["steps_planned"], 1, MAX_STEPS, "steps_planned")
    every = _int(body["checkpoint_every"], 1, planned, "checkpoint_every (at most steps_planned)")
    traces = body["traces"]
    if type(traces) is not bool:
        raise InputError(f"traces is {show_value(traces)}, want true or false")
    data = _check_data(body["data"], cfg)
    _check_schedule(body["schedule"], cfg, data)
    names = state_names(cfg)
    initial = StateDigest.from_dict(body["initial_state"], "initial_state", names)
    steps = _check_steps(body["steps"], planned, complete, names, traces)
    _check_loss_curve(body["loss_curve"], steps)
    checkpoints = body["checkpoints"]
    want = expected_checkpoints(len(steps), planned, every)
    if not isinstance(checkpoints, list) or any(type(c) is not int for c in checkpoints) or checkpoints != want:
        raise InputError(
            f"checkpoints is {show_value(checkpoints)}, want {show_value(want)} (state 0, every "
            f"{every}-th state, and state {planned})"
        )
    if want[-1] != len(steps):  # only a progress body can end between checkpoints, and it must not
        raise InputError(
            f"steps has {len(steps)} records, but its last checkpoint is state {want[-1]}: "
            f"progress is saved only at a checkpoint"
        )
    parsed = Body(created_by, arithmetic, cfg, planned, every, traces, data, initial, steps, tuple(checkpoints))
    if not same_bytes(parsed.encoded_pieces(), encoded if encoded is not None else canonical_json(body)):
        raise InputError("manifest body does not re-encode to the same bytes (a value in a second encoding)")
    return parsed


def _check_config(value: object) -> TrainConfig:
    cfg = TrainConfig.from_dict(value)
    check_preset_name(cfg)
    return cfg


def read_config_file(path: Path) -> TrainConfig:
    """A TrainConfig from a JSON file (`train --config FILE.json`), checked exactly as a manifest's config.

    The file holds {"model": {...}, "optim": {...}, "batch_size", "micro_batches", "seed"}
    (TrainConfig.to_dict); a bounded regular file, strict JSON; InputError (one line) naming what is wrong.
    """
    blob = read_file(path, "config file", MAX_CONFIG_BYTES, path.parent)
    try:
        return _check_config(parse_json(blob, str(path)))
    except InputError as exc:
        raise InputError(f"config file {path}: {exc}") from None


def check_data_for_config(data: DataSpec, cfg: TrainConfig) -> None:
    """InputError unless the model's vocabulary covers the data's token ids and a window fits in the data."""
    if data.vocab_size > cfg.model.vocab_size:
        raise InputError(
            f"config.model.vocab_size is {cfg.model.vocab_size}, but the data's "
            f"{'token ids lie below' if data.token_ids else TOKENIZER + ' tokens need'} {data.vocab_size}"
        )
    if data.tokens < cfg.model.seq_len + 1:
        raise InputError(f"data.tokens is {data.tokens}, fewer than seq_len + 1 = {cfg.model.seq_len + 1}")


def _check_data(value: object, cfg: TrainConfig) -> DataSpec:
    data = DataSpec.from_dict(value)
    check_data_for_config(data, cfg)
    return data


def _check_schedule(value: object, cfg: TrainConfig, data: DataSpec) -> None:
    schedule = _keys(value, SCHEDULE_KEYS, "schedule")
    for key, want in schedule_object(cfg, data).items():
        source = {
            "function": "this verifier's schedule",
            "data_key": "data.data_key",
            "seed": "config.seed",
            "micro_batches": "config.micro_batches",
            "batch_size": "config.batch_size",
            "seq_len": "config.model.seq_len",
        }[key]
        if type(schedule[key]) is not type(want) or schedule[key] != want:
            raise InputError(f"schedule.{key} is {show_value(schedule[key])}, want {show_value(want)} ({source})")


def _check_steps(value: object, planned: int, complete: bool, names: list[str], traces: bool) -> tuple[StepRecord, ...]:
    if not isinstance(value, list):
        raise InputError(f"steps is {show_value(value)}, want a list")
    if complete and len(value) != planned:
        raise InputError(f"steps has {len(value)} records, want steps_planned = {planned}")
    if len(value) > planned:
        raise InputError(f"steps has {len(value)} records, more than steps_planned = {planned}")
    return tuple(StepRecord.from_dict(item, n, names, traces) for n, item in enumerate(value))


def _check_loss_curve(value: object, steps: tuple[StepRecord, ...]) -> None:
    want = [r.loss for r in steps]
    if (
        not isinstance(value, list)
        or len(value) != len(want)
        or any(type(x) is not float or x.hex() != w.hex() for x, w in zip(value, want, strict=True))
    ):
        raise InputError(f"loss_curve is {show_value(value)}, want the steps' losses in order {show_value(want)}")
