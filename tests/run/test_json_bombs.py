"""Hostile JSON in run files is one line of InputError (exit 2), never a traceback.

Numbers beyond binary64 (1e400 would become inf), integers with thousands of
digits (Python's int-string limit), NaN and Infinity, duplicate keys, invalid
UTF-8, and nesting 200,000 deep (RecursionError) — in the manifest, its
signature file, the publisher's progress file and a trace.
"""

import json
import os
import subprocess
import sys

import pytest
from run_helpers import sign_raw

from p2paudit.errors import InputError
from p2paudit.identity import identity_from_seed, sign
from p2paudit.run import traces
from p2paudit.run.digest import digest_bytes, format_digest
from p2paudit.run.lab_format import manifest_format
from p2paudit.run.lab_run import LAB_SIGNATURE_DOMAIN, lab_manifest_from_bytes
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest, sign_body
from p2paudit.run.manifest_body import canonical_json
from p2paudit.run.publisher import publish_run
from p2paudit.run.storage import json_structure, parse_json
from p2paudit.run.traces import load_trace
from p2paudit.run.training import PROGRESS_FILE, TrainPlan

pytestmark = pytest.mark.timeout(60)

BOMBS = {
    "huge float": (b'{"a":1e400}', "out of the binary64 range"),
    "huge negative float": (b'{"a":-1e400}', "out of the binary64 range"),
    "long int": (b'{"a":' + b"9" * 5000 + b"}", "5000 digits"),
    "long float": (b'{"a":0.' + b"1" * 5000 + b"}", "5002 characters"),
    "NaN": (b'{"a":NaN}', "NaN is not a JSON number"),
    "Infinity": (b'{"a":-Infinity}', "-Infinity is not a JSON number"),
    "duplicate key": (b'{"a":1,"a":2}', "key 'a' appears twice"),
    "not UTF-8": (b'{"a":"\xff"}', "is not UTF-8"),
    "deep arrays": (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    "deep objects": (b'{"a":' * 200_000 + b"1" + b"}" * 200_000, "nested too deeply"),
    "truncated": (b'{"a":', "not acceptable JSON"),
}


@pytest.mark.parametrize("blob, message", BOMBS.values(), ids=BOMBS.keys())
def test_parse_json_refuses_in_one_line(blob, message):
    with pytest.raises(InputError, match=message) as info:
        parse_json(blob, "thing")
    assert "\n" not in str(info.value) and str(info.value).startswith("thing ")


def test_parse_json_keeps_ordinary_numbers():
    assert parse_json(b'{"a":[1e-08,-0.0,18446744073709551615,5.48427677154541]}', "t") == {
        "a": [1e-08, -0.0, 2**64 - 1, 5.48427677154541]
    }


@pytest.mark.parametrize("blob, message", BOMBS.values(), ids=BOMBS.keys())
def test_a_signed_manifest_bomb_is_refused(run_copy, publisher, blob, message):
    sign_raw(run_copy, blob, publisher)  # the signature is valid: only the parser can refuse it
    with pytest.raises(InputError, match=message) as info:
        read_manifest(run_copy)
    assert "\n" not in str(info.value) and str(run_copy / MANIFEST_FILE) in str(info.value)


@pytest.mark.parametrize("blob, message", BOMBS.values(), ids=BOMBS.keys())
def test_a_signature_file_bomb_is_refused(run_copy, blob, message):
    if len(blob) > 4096:
        message = "more than the 4096 allowed"  # too long to be a signature file at all
    (run_copy / SIGNATURE_FILE).write_bytes(blob)
    with pytest.raises(InputError, match=message) as info:
        read_manifest(run_copy)
    assert "\n" not in str(info.value) and str(run_copy / SIGNATURE_FILE) in str(info.value)


@pytest.mark.parametrize("blob, message", BOMBS.values(), ids=BOMBS.keys())
def test_a_progress_file_bomb_is_refused(tmp_path, blob, message):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / PROGRESS_FILE).write_bytes(blob)
    with pytest.raises(InputError, match=f"{run_dir / PROGRESS_FILE} is damaged .*{message}") as info:
        publish_run(TrainPlan(run_dir, steps=1, backend="reference"), identity_from_seed(bytes(32)))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("blob, message", BOMBS.values(), ids=BOMBS.keys())
def test_a_trace_bomb_is_refused(tmp_path, blob, message):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "step-00000000.json").write_bytes(blob)
    with pytest.raises(InputError, match=message):
        load_trace(tmp_path, 0, digest_bytes(blob))  # the digest matches: only the parser can refuse it


def test_a_trace_of_many_small_objects_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    """`{},` is three bytes and a 64-byte object once parsed: a 64 MiB trace of them made 1.6 GiB. The structure
    outside its strings is counted first (escaped brackets and commas inside a string are not structure)."""
    assert json_structure(b'{"a": [1, 2, "x,[{\\"y", {}]}') == 6
    monkeypatch.setattr(traces, "MAX_TRACE_STRUCTURE", 1000)
    (tmp_path / "traces").mkdir()
    honest = json.dumps({"format": "x", "ops": ['[",", "[{"]' * 50] * 300}).encode()  # 301 outside strings
    bomb = b'{"ops":[' + b"{}," * 999 + b"{}]}"
    for blob, message in ((honest, "is not a p2paudit-trace"), (bomb, "has 2001 JSON arrays, objects and sep")):
        (tmp_path / "traces" / "step-00000000.json").write_bytes(blob)
        with pytest.raises(InputError, match=message):
            load_trace(tmp_path, 0, digest_bytes(blob))


def test_the_structure_is_counted_in_one_pass_whatever_the_strings_hold():
    """Strings are skipped whole, escapes and all, an unterminated one to the end: 8 MiB of escaped quotes took
    no time to count (a first pattern backtracked: 32 KB of them took 17 s, 8 MiB would have taken days;
    this module's 60 s timeout is the bound)."""
    assert json_structure(b'"' + b'\\"' * (1 << 22)) == 0  # one unterminated string
    assert json_structure(b'["a\\\\", 1, "b\\"c"]') == 3  # an escaped backslash ends "a\\"; \" is inside "b\"c"
    assert json_structure(b'[1, "x\\') == 2  # a trailing lone backslash inside an unterminated string
    assert json_structure(b"[" + b'"[{,",' * 100_000 + b"0]") == 100_001


def test_a_signed_manifest_of_many_small_objects_is_refused_before_it_is_parsed(run_copy, publisher):
    """12 MB of `{},` signed as an engine and as a lab manifest: 8,000,001 structures, past the bound (an honest
    manifest has one per 70 bytes); parsed, they would have been 0.3 GiB of objects (6.5 GiB at 256 MiB)."""
    bomb = b'{"a":[' + b"{}," * 4_000_000 + b"0]}"
    sign_raw(run_copy, bomb, publisher)
    message = "has 8000002 JSON arrays, objects and separators, more than the 8000000 allowed"
    with pytest.raises(InputError, match=message):
        read_manifest(run_copy)
    with pytest.raises(InputError, match=message):
        manifest_format(run_copy)
    envelope = sign_body({}, publisher, LAB_SIGNATURE_DOMAIN)[1]
    envelope["run_id"] = format_digest(digest_bytes(bomb))
    envelope["signature"] = sign(publisher, LAB_SIGNATURE_DOMAIN + bomb).hex()
    with pytest.raises(InputError, match=message):
        lab_manifest_from_bytes(bomb, canonical_json(envelope), "the lab manifest", "its signature")


@pytest.mark.slow  # 2 s a case (fast tier: pytest -m 'not slow')
@pytest.mark.parametrize("name", ["huge float", "long int", "deep arrays"])
def test_verify_range_exits_2_in_one_line(run_copy, publisher, tmp_path, name):
    blob, message = BOMBS[name]
    sign_raw(run_copy, blob, publisher)
    env = dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home"))
    out = subprocess.run(
        [sys.executable, "-m", "p2paudit", "verify-range", "0", "--run", str(run_copy), "--backend", "reference"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr, lines[:3]


def test_the_genuine_files_still_parse(published_run):
    body = json.loads((published_run / MANIFEST_FILE).read_bytes())
    assert parse_json((published_run / MANIFEST_FILE).read_bytes(), "m") == body
