"""One task of a lab replay, as audit.lab_child runs it: state 0 rebuilt by the script's build(), or step n
replayed from the published state n on the published batch n (p2paudit.lab.batch); the state it produced
as checkpoint bytes (made a tensor at a time as they are sent), and its trace records.

It runs the publisher's script: only ever inside the child process (and its sandbox), never where a verdict
is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kernels
from p2paudit.lab import LabRun, LabScript, load_script, load_state
from p2paudit.lab.batch import tokens_tensor
from p2paudit.run.checkpoint import checkpoint_pieces
from p2paudit.run.lab_format import SCRIPT_FILE
from p2paudit.run.lab_run import LabManifest, load_lab_batch, load_lab_state, read_lab_manifest

Produced = tuple[dict[str, Any], Iterator[bytes]]  # the result's fields; the checkpoint's bytes, in pieces


def _init(script: LabScript, m: LabManifest) -> Produced:
    model, opt = script.build()
    run = LabRun(model, opt, backend=m.backend, arithmetic=m.arithmetic_version)
    state = run.state_arrays(copy=False)  # views, streamed out before anything runs again
    return {"names": sorted(state), "ops": None, "values": None}, checkpoint_pieces(0, state, run.initial)


def _step(script: LabScript, m: LabManifest, run_dir: Path, n: int, values: bool) -> Produced:
    model, opt = script.build()
    load_state(model, opt, load_lab_state(run_dir, m, n))
    run = LabRun(model, opt, backend=m.backend, arithmetic=m.arithmetic_version, first_step=n, values=values)
    tokens = tokens_tensor(load_lab_batch(run_dir, m, n))  # the published batch: `batch` is not called
    with run.step(n):
        script.train_step(model, opt, tokens)
    record = run.records[0]
    state = run.state_arrays(copy=False)  # views, streamed out before anything runs again
    kept = None if record.values is None else [[name, digest.hex()] for name, digest in record.values]
    fields = {"names": sorted(state), "ops": [r.decode("ascii") for r in record.ops], "values": kept}
    return fields, checkpoint_pieces(n + 1, state, record.state)


def run_task(run_dir: Path, step: int | None, values: bool) -> Produced:
    """(the result's names, ops and values; the checkpoint's bytes, in pieces made as they are taken) of rebuilding state 0 (`step` None) or
    replaying `step`; the script's bytes checked against the signed manifest before any of them runs."""
    m = read_lab_manifest(run_dir)
    script = load_script(run_dir / SCRIPT_FILE, m.script_digest)
    kernels.standard_float_modes()
    if step is None:
        return _init(script, m)
    return _step(script, m, run_dir, step, values)
