"""One encoding per run: every signed manifest field is checked for type, range and consistency.

Each case edits one field of a genuine body, re-signs it with the publisher's
key (so only the field checks can refuse it) and expects an InputError that
names the field and the value.
"""

import json
from pathlib import Path

import pytest
from run_helpers import sign_raw

from p2paudit.engine.schedule import SCHEDULE_FUNCTION
from p2paudit.errors import InputError
from p2paudit.run import publisher
from p2paudit.run.manifest import MANIFEST_FILE, read_manifest, write_manifest
from p2paudit.run.manifest_body import canonical_json, check_body


def _body(run_dir: Path) -> dict:
    return json.loads((run_dir / MANIFEST_FILE).read_bytes())


def _set(path: str, value):
    """An edit that sets body[path] (dotted, with list indices) to `value`."""

    def edit(body: dict) -> None:
        *parents, last = path.split(".")
        node = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def _add_key(path: str):
    def edit(body: dict) -> None:
        node = body
        for key in [k for k in path.split(".") if k]:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node["extra"] = 1

    return edit


def _shift_loss(body: dict) -> None:
    body["steps"][1]["loss"] += 1e-12  # not a float32 any more
    body["loss_curve"][1] = body["steps"][1]["loss"]


def _extra_tensor(body: dict) -> None:
    body["initial_state"]["tensors"]["params/evil"] = body["initial_state"]["digest"]


CASES = [
    # The reproductions.
    ("schedule.seed", _set("schedule.seed", 1), r"schedule.seed is 1, want 0 \(config.seed\)"),
    ("batch_size", _set("config.batch_size", 999), r"schedule.batch_size is 4, want 999 \(config.batch_size\)"),
    ("schedule.batch_size", _set("schedule.batch_size", 999), "schedule.batch_size is 999, want 4"),
    ("steps_planned", _set("steps_planned", 1000), "steps has 4 records, want steps_planned = 1000"),
    ("checkpoint_every<0", _set("checkpoint_every", -5), r"checkpoint_every \(at most steps_planned\) is -5"),
    ("traces", _set("traces", True), "steps\\[0\\] lacks a trace digest but traces is true"),
    ("corpus", _set("data.corpus", "../../etc/passwd"), "data.corpus is '../../etc/passwd'"),
    ("version float", _set("version", 1.0), "version is 1.0, want 1"),
    ("unknown key", _add_key(""), r"manifest body has unknown keys \['extra'\]"),
    # Exact types: a bool or a float is never an int, an int never a float.
    ("version bool", _set("version", True), "version is True, want 1"),
    ("arithmetic float", _set("arithmetic_version", 1.0), "arithmetic_version .* is 1.0, want 1"),
    ("traces int", _set("traces", 1), "traces is 1, want true or false"),
    ("step float", _set("steps.0.step", 0.0), r"steps\[0\].step is 0.0, want 0"),
    ("loss int", _set("steps.0.loss", 5), r"steps\[0\].loss is 5, want a finite float32"),
    ("loss float64", _shift_loss, r"steps\[1\].loss is .*, want a finite float32"),
    ("loss_curve int", _set("loss_curve.0", 5), "loss_curve is"),
    ("lr int", _set("config.optim.lr", 1), "optim key lr is a int, want float"),
    ("checkpoint float", _set("checkpoints.1", 2.0), r"checkpoints is \[0, 2.0, 4\]"),
    ("seq_len bool", _set("schedule.seq_len", True), "schedule.seq_len is True, want 64"),
    # Unknown keys anywhere.
    ("config key", _add_key("config"), "train config has unknown key"),
    ("model key", _add_key("config.model"), "model has unknown key"),
    ("optim key", _add_key("config.optim"), "optim has unknown key"),
    ("data key", _add_key("data"), r"manifest data has unknown keys \['extra'\]"),
    ("shard key", _add_key("data.shards.0"), r"data.shards\[0\] has unknown keys \['extra'\]"),
    ("schedule key", _add_key("schedule"), r"schedule has unknown keys \['extra'\]"),
    ("step key", _add_key("steps.0"), r"steps\[0\] has unknown keys \['extra'\]"),
    ("output key", _add_key("steps.0.output"), r"steps\[0\].output: state digest must be an object with exactly"),
    ("initial key", _add_key("initial_state"), "initial_state: state digest must be an object with exactly"),
    ("extra tensor", _extra_tensor, r"initial_state: tensors are not the config's state tensors .*params/evil"),
    # Ranges and consistency between fields.
    ("checkpoint_every 3", _set("checkpoint_every", 3), r"checkpoints is \[0, 2, 4\], want \[0, 3, 4\]"),
    ("checkpoint_every > N", _set("checkpoint_every", 100), r"checkpoint_every \(at most steps_planned\) is 100"),
    ("steps_planned 0", _set("steps_planned", 0), "steps_planned is 0, want an integer 1..4294967296"),
    ("config seed", _set("config.seed", 7), r"schedule.seed is 0, want 7 \(config.seed\)"),
    ("micro_batches", _set("schedule.micro_batches", 8), "schedule.micro_batches is 8, want 4"),
    ("data_key", _set("schedule.data_key", "sha256:" + "0" * 64), "schedule.data_key is 'sha256:000"),
    ("function", _set("schedule.function", "mine/v1"), "schedule.function is 'mine/v1'"),
    ("data.data_key", _set("data.data_key", "sha256:" + "0" * 64), "data does not describe corpus"),
    ("data.tokens", _set("data.tokens", 7), "data.tokens is 7, want the shards' total"),
    ("shard tokens", _set("data.shards.0.tokens", 65535), r"shards\[0\].tokens is 65535, want 65536"),
    ("shard digest", _set("data.shards.0.digest", "sha256:" + "1" * 64), "a shard digest differs"),
    ("shard path", _set("data.shards.0.path", "shards/../shards/shard-00000.bin"), r"shards\[0\].path is"),
    ("tokenizer", _set("data.tokenizer", "gpt2"), "data.tokenizer is 'gpt2'"),
    ("created_by", _set("created_by", "someone else"), "created_by is 'someone else'"),
    ("preset shape", _set("config.model.n_layer", 3), "named 'tiny' but is not that preset's shape"),
    (
        "trace digest without traces",
        _set("steps.0.trace", "sha256:" + "2" * 64),
        r"steps\[0\] has a trace digest but traces is false",
    ),
    ("state digest", _set("steps.0.output.digest", "sha256:" + "3" * 64), "does not match its"),
]


@pytest.mark.parametrize("edit, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_signed_but_inconsistent_field_is_refused(run_copy, publisher, edit, message):
    body = _body(run_copy)
    edit(body)
    write_manifest(run_copy, body, publisher)
    with pytest.raises(InputError, match=message) as info:
        read_manifest(run_copy)
    assert "\n" not in str(info.value) and str(run_copy / MANIFEST_FILE) in str(info.value)


@pytest.mark.parametrize(
    "old, new",
    [
        (b'"eps":1e-08', b'"eps":1e-8'),  # the same binary64, a second spelling
        (b'"eps":1e-08', b'"eps":0.00000001'),
        (b'"version":1', b'"version":1.0'),
        (b'"seed":0', b'"seed":-0'),
    ],
)
def test_a_second_spelling_of_a_number_is_refused(run_copy, publisher, old, new):
    blob = (run_copy / MANIFEST_FILE).read_bytes()
    assert old in blob
    sign_raw(run_copy, blob.replace(old, new, 1), publisher)
    with pytest.raises(InputError, match="not canonical JSON|version is 1.0"):
        read_manifest(run_copy)


def test_what_the_publisher_writes_is_exactly_what_is_accepted(published_run, traced_run):
    for run_dir in (published_run, traced_run):
        manifest = read_manifest(run_dir)
        parsed = check_body(json.loads(manifest.body_bytes))
        assert canonical_json(parsed.to_dict()) == manifest.body_bytes == b"".join(parsed.encoded_pieces())
        assert manifest.head == {k: v for k, v in parsed.to_dict().items() if k not in ("steps", "loss_curve")}
    assert publisher.SCHEDULE_NAME == SCHEDULE_FUNCTION


def test_a_progress_body_is_checked_as_partial(published_run):
    body = _body(published_run)
    for done, checkpoints in ((0, [0]), (2, [0, 2])):
        partial = dict(body, steps=body["steps"][:done], loss_curve=body["loss_curve"][:done], checkpoints=checkpoints)
        assert len(check_body(partial, complete=False).steps) == done
        with pytest.raises(InputError, match=f"steps has {done} records, want steps_planned = 4"):
            check_body(partial, complete=True)
    # Progress is written only right after a checkpoint: 1 step done with K = 2 is not a progress file.
    odd = dict(body, steps=body["steps"][:1], loss_curve=body["loss_curve"][:1], checkpoints=[0])
    with pytest.raises(InputError, match="steps has 1 records, but its last checkpoint is state 0"):
        check_body(odd, complete=False)
