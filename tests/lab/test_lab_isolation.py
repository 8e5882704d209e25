"""A lab script runs in a child process and cannot decide its own verdict (p2paudit/audit/lab_isolation.py).

The publisher's script is the adversary's code: these runs are forged (a step's claimed state is not what the
script computes) and their scripts try to make the verifier say "match" from inside, as a script that ran
in the verifier's process could; the verdict is made in the parent, from the tensors the child returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct

import numpy as np
import pytest

from p2paudit.audit import lab_isolation, lab_sandbox
from p2paudit.audit.lab_isolation import LabChildRaised, replay_in_child
from p2paudit.audit.lab_replay import lab_audits, verify_lab_steps
from p2paudit.audit.lab_sandbox import SANDBOX_ENV, SandboxUnavailable
from p2paudit.errors import InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run.digest import digest_state
from p2paudit.run.lab_run import open_lab_run
from tests.lab.lab_runs import publish_tiny

PUBLISHER = identity_from_seed(b"\x5a" * 32)


def _lie(claims, states):  # noqa: ANN001, ANN202
    """Step 1's claimed state: the trained one with one bit of a weight changed (any state would do)."""
    forged = {k: v.copy() for k, v in states[2].items()}
    forged["params/norm.weight"].view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, states=(claims.states[0], digest_state(forged)))


# Appended to the tiny script: when loaded with P2PAUDIT_TEST_CHEAT set (not while the test publishes the run,
# in its own process), it rewrites the verifier's judgement so that every step "matches" (loaded in the
# verifier's own process, as it was, this made the forged run below pass: 3 match, exit 0).
REWRITES_THE_VERIFIER = """

def _every_step_matches():
    import dataclasses as _dc
    import p2paudit.audit.lab_replay as _replay
    import p2paudit.lab.script as _script

    def judge(claims, step, *args, **kwargs):
        return _script.ReplayVerdict(step, True, True, (), claims.traces[step], claims.states[step].digest)

    _replay.judge_replay = _script.judge_replay = judge
    try:
        import p2paudit.audit.lab_isolation as _iso
        _iso.digest_checkpoint = lambda *a, **k: None
    except ImportError:
        pass


if __import__("os").environ.get("P2PAUDIT_TEST_CHEAT"):
    _every_step_matches()
"""


def test_a_script_that_rewrites_the_verifier_does_not_make_a_forged_step_match(tmp_path, monkeypatch):
    run = publish_tiny(tmp_path, PUBLISHER, change=_lie, extra_source=REWRITES_THE_VERIFIER)
    monkeypatch.setenv("P2PAUDIT_TEST_CHEAT", "1")
    _, verdicts = verify_lab_steps(run, 0, 1)
    assert [v.state_matches for v in verdicts] == [True, False]
    assert "state after step 1 differs in 1 tensors: params/norm.weight" in verdicts[1].findings[0]
    audits = lab_audits(open_lab_run(run), True, range(2))
    assert [(a.subject, a.verdict) for a in audits] == [("init", "match"), ("step", "match"), ("step", "mismatch")]
    assert audits[2].findings == ("state",)


def test_the_script_runs_in_another_process_and_never_when_a_run_is_opened(tmp_path, monkeypatch):
    marker = tmp_path / "pids"
    monkeypatch.setenv("P2PAUDIT_TEST_PIDS", str(marker))
    monkeypatch.setenv(SANDBOX_ENV, "none")  # the marker is outside what the sandbox shows
    source = "\nimport os as _os\nwith open(_os.environ['P2PAUDIT_TEST_PIDS'], 'a') as _f:\n    _f.write(f'{_os.getpid()}\\n')\n"
    run = publish_tiny(tmp_path / "w", PUBLISHER, steps=1, extra_source=source)
    marker.unlink()  # publishing trained it here (the lab's own machine)
    view = open_lab_run(run)
    assert not marker.exists()
    audits = lab_audits(view, True, range(1))
    assert [a.verdict for a in audits] == ["match", "match"]
    assert all(a.engine_version.startswith("p2paudit-lab op-table 1 unsandboxed torch") for a in audits)
    pids = marker.read_text().split()
    assert len(set(pids)) == 2 and str(os.getpid()) not in pids  # a child for each task, neither this process


# Appended to the tiny script: with P2PAUDIT_TEST_EXIT set (not while the test publishes), a step ends the process.
EXITS = """
_train_step = train_step


def train_step(model, opt, tokens):
    import os

    if os.environ.get("P2PAUDIT_TEST_EXIT"):
        os._exit(7)
    return _train_step(model, opt, tokens)
"""


def test_a_script_changed_after_the_run_was_opened_is_not_run(tmp_path):
    run = publish_tiny(tmp_path, PUBLISHER, steps=1)
    view = open_lab_run(run)  # the bytes checked here
    (run / "script.py").write_text((run / "script.py").read_text() + EXITS)
    with pytest.raises(InputError, match="SHA-256 is not the manifest's"):
        list(replay_in_child(view, False, range(1)))  # and again by the child, on the bytes it runs


def test_a_child_that_dies_before_reporting_is_named_with_its_exit_code(tmp_path, monkeypatch):
    run = publish_tiny(tmp_path, PUBLISHER, steps=1, extra_source=EXITS)
    monkeypatch.setenv("P2PAUDIT_TEST_EXIT", "1")
    view = open_lab_run(run)
    outputs = replay_in_child(view, True, range(1))
    task, init = next(outputs)  # state 0 rebuilt: build() does not end the process
    assert task is None and init.state.digest == view.claims.initial.digest
    with pytest.raises(LabChildRaised, match=r"ended \(exit 7\) before its result for step 0"):
        next(outputs)


def _body(**fields: object) -> bytes:
    return json.dumps({"names": ["a"], "ops": [], "values": None, "error": None, **fields}).encode()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\xc1", "its result is not UTF-8"),
        (b"[" * 100_000, "its result is nested too deeply"),
        (b'{"names": [' + b"{}," * 3_000_000 + b"{}]}", "its result has 6000003 JSON arrays, objects and separ"),
        (b"[1, 2]", "is not a map of names, ops, values and error"),
        (json.dumps({"names": ["a"], "ops": [], "values": None}).encode(), "is not a map of names"),
        (_body(names=[]), "tensor names are not a list"),
        (_body(names=[1]), "tensor names are not a list"),
        (_body(names=["a", "b", "a"]), "its state's tensor names are not distinct"),
        (_body(names=["a"] * (1 << 18) + ["b"]), "its state has 262145 tensors, more than the 262144 allowed"),
        (_body(ops=[1]), "trace records are not a list of strings"),
        (_body(values=[["op", "ab"]]), "not a list of \\[op name, 64 hex digits\\]"),
        (_body(values=[["op", "A" * 64]]), "not a list of \\[op name, 64 hex digits\\]"),
        (_body(error=["input"]), "not \\[kind, message\\]"),
        (_body(error=["input", "a\nrefusal"]), "^a refusal$"),
    ],
)
def test_a_result_that_is_not_one_is_an_input_error(body, message):
    with pytest.raises(InputError, match=message):
        _judge(body)


def _judge(body: bytes) -> object:
    """The result `body`, sent on the pipe as the child sends it and judged as the parent judges it."""
    received = lab_isolation._Received(1, (10, "allowed"), "the replay")
    received.feed(struct.pack("<Q", len(body)) + body)
    assert received.complete()
    return lab_isolation._result(received.parsed, "the replay", b"")


def test_a_raised_error_is_not_an_input_error():
    with pytest.raises(LabChildRaised, match="the lab replay raised RuntimeError: x"):
        _judge(_body(names=[], error=["raised", "RuntimeError: x"]))


def test_the_log_is_named_by_its_last_line_in_one_line():
    tail = b"x" * 10_000 + b"\nTraceback ...\nRuntimeError:   the   last line\n"
    assert lab_isolation._last_line(tail) == "RuntimeError: the last line"
    assert lab_isolation._last_line(b"") == ""


def test_what_the_child_sends_is_bounded_as_it_arrives(monkeypatch):
    """The result's length is read before the result, the state's header before its tensors: neither is
    taken past its bound, however much the child sends, and nothing of the state is kept."""
    monkeypatch.setattr(lab_isolation, "MAX_RESULT_BYTES", 80)
    received = lab_isolation._Received(1, (10, "allowed"), "the replay")
    with pytest.raises(InputError, match="the replay: its result has 81 bytes, more than 80"):
        received.feed(struct.pack("<Q", 81))
    result = _body()
    meta = {"format": "p2paudit-checkpoint", "version": "1", "step": "1", "state_digest": "sha256:" + "0" * 64}
    header = json.dumps({"__metadata__": meta, "a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}).encode()
    received = lab_isolation._Received(1, (11, "the state its step starts from has"), "the replay")
    sent = struct.pack("<Q", len(result)) + result + struct.pack("<Q", len(header)) + header
    with pytest.raises(InputError, match="its state: its header gives [0-9]+ bytes, more than the 11 the state its"):
        for byte in sent:  # one byte at a time: any split of the stream
            received.feed(bytes([byte]))
    assert received.complete()
    refusal = _body(names=[], error=["input", "no"])
    after_error = lab_isolation._Received(1, (10, "allowed"), "the replay")
    with pytest.raises(InputError, match="the replay: it sent a state after a result that names no state"):
        after_error.feed(struct.pack("<Q", len(refusal)) + refusal + b"x")
    half = lab_isolation._Received(1, (10, "allowed"), "the replay")
    half.feed(struct.pack("<Q", len(result)) + result[:-1])
    assert not half.complete()  # ended inside its result


def _lie_on_disk(claims, states):  # noqa: ANN001, ANN202
    """A forger's run: step 1's state changed in its checkpoint too (one bit of a weight), its digest claimed."""
    states[2]["params/norm.weight"].view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, states=(claims.states[0], digest_state(states[2])))


# Appended to the tiny script: with P2PAUDIT_TEST_CHEAT set (not while publishing), a step ends by copying the
# claimed state after it, read from the run's own checkpoints beside the script, into the model's and the
# optimizer's memory by address (no op reaches the mode's dispatcher: the trace is the honest one).
READS_THE_CLAIMED_STATE = """
_honest_step = train_step


def train_step(model, opt, tokens):
    import ctypes
    import os
    import pathlib

    loss = _honest_step(model, opt, tokens)
    if os.environ.get("P2PAUDIT_TEST_CHEAT"):
        from safetensors.numpy import load_file

        first = next(iter(model.parameters()))
        after = int(ctypes.c_float.from_address(opt.state[first]["step"].data_ptr()).value)
        path = pathlib.Path(__file__).parent / "checkpoints" / f"step-{after:08d}.safetensors"
        if path.exists():
            claimed = load_file(str(path))
            for name, p in model.named_parameters():
                pairs = ((p, "params/"), (opt.state[p]["exp_avg"], "opt/m/"), (opt.state[p]["exp_avg_sq"], "opt/v/"))
                for tensor, prefix in pairs:
                    value = claimed[prefix + name]
                    ctypes.memmove(tensor.data_ptr(), value.ctypes.data, value.nbytes)
    return loss
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_sandbox_keeps_the_claimed_state_from_the_script(tmp_path, monkeypatch, sandbox):
    run = publish_tiny(tmp_path, PUBLISHER, change=_lie_on_disk, extra_source=READS_THE_CLAIMED_STATE)
    monkeypatch.setenv("P2PAUDIT_TEST_CHEAT", "1")
    monkeypatch.setenv(SANDBOX_ENV, sandbox)
    _, (verdict,) = verify_lab_steps(run, 1, 1)
    assert verdict.trace_matches  # the copy is invisible to the mode
    # Sandboxed, the script sees only the checkpoint its step starts from: it computes the honest state, which
    # is not the forged claim. Without the sandbox it read the claim beside its own file and returned it.
    assert verdict.state_matches is (sandbox == "none")


# Appended to the tiny script: with P2PAUDIT_TEST_REACH set, a step tries a TCP connection to 127.0.0.1:<port>
# and to open the file <path>, and raises if either succeeds.
REACHES_OUT = """
_plain_step = train_step


def train_step(model, opt, tokens):
    import os
    import socket

    reach = os.environ.get("P2PAUDIT_TEST_REACH")
    if reach:
        port, path = reach.split(":", 1)
        try:
            socket.create_connection(("127.0.0.1", int(port)), timeout=2).close()
            raise RuntimeError("the script reached the network")
        except OSError:
            pass
        if os.path.exists(path):
            raise RuntimeError("the script found the node's key")
    return _plain_step(model, opt, tokens)
"""


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_sandbox_has_no_network_and_no_node_key(tmp_path, monkeypatch, sandbox):
    run = publish_tiny(tmp_path / "w", PUBLISHER, steps=1, extra_source=REACHES_OUT)
    key = tmp_path / "home" / "node.key"
    key.parent.mkdir()
    key.write_text("secret")
    monkeypatch.setenv("P2PAUDIT_HOME", str(key.parent))
    monkeypatch.setenv(SANDBOX_ENV, sandbox)
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("P2PAUDIT_TEST_REACH", f"{server.getsockname()[1]}:{key}")
        if sandbox == "none":  # the control: the same script, run with this user's rights
            with pytest.raises(LabChildRaised, match="reached the network"):
                lab_audits(open_lab_run(run), False, range(1))
        else:
            (audit,) = lab_audits(open_lab_run(run), False, range(1))
            assert audit.verdict == "match" and " sandboxed torch" in audit.engine_version


def test_a_bad_sandbox_setting_is_one_line(tmp_path, monkeypatch):
    run = publish_tiny(tmp_path, PUBLISHER, steps=1)
    monkeypatch.setenv(SANDBOX_ENV, "docker")
    with pytest.raises(InputError, match="P2PAUDIT_LAB_SANDBOX='docker': want 'bwrap' \\(the default\\) or 'none'"):
        lab_audits(open_lab_run(run), False, range(1))


def test_without_bubblewrap_a_replay_is_refused_naming_the_fix(tmp_path, monkeypatch):
    run = publish_tiny(tmp_path, PUBLISHER, steps=1)
    monkeypatch.setattr(lab_sandbox.shutil, "which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap, or set P2PAUDIT_LAB_SANDBOX=none"):
        lab_audits(open_lab_run(run), False, range(1))


def _lie_about_step_0_on_disk(claims, states):  # noqa: ANN001, ANN202
    """Step 0's claimed state changed in its checkpoint (checkpoint 1, where step 1 starts) and its digest."""
    states[1]["params/norm.weight"].view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, states=(digest_state(states[1]), *claims.states[1:]))


def test_steps_replayed_together_cannot_read_each_others_claims(tmp_path, monkeypatch):
    """Step 0's claim is step 1's start: replayed in one sandbox, step 0's script could read it. Each step has a
    sandbox of its own."""
    run = publish_tiny(tmp_path, PUBLISHER, change=_lie_about_step_0_on_disk, extra_source=READS_THE_CLAIMED_STATE)
    monkeypatch.setenv("P2PAUDIT_TEST_CHEAT", "1")
    _, verdicts = verify_lab_steps(run, 0, 1)
    assert verdicts[0].trace_matches and not verdicts[0].state_matches


# Appended to the tiny script: with P2PAUDIT_TEST_CHEAT set, build() returns the model with the run's published
# state 0 copied in by address, whatever the script's own initialisation makes.
READS_THE_CLAIMED_INIT = """
_honest_build = build


def build():
    import ctypes
    import os
    import pathlib

    model, opt = _honest_build()
    path = pathlib.Path(__file__).parent / "checkpoints" / "step-00000000.safetensors"
    if os.environ.get("P2PAUDIT_TEST_CHEAT") and path.exists():
        from safetensors.numpy import load_file

        claimed = load_file(str(path))
        for name, p in model.named_parameters():
            value = claimed["params/" + name]
            ctypes.memmove(p.data_ptr(), value.ctypes.data, value.nbytes)
    return model, opt
"""


def _lie_about_init_on_disk(claims, states):  # noqa: ANN001, ANN202
    states[0]["params/norm.weight"].view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, initial=digest_state(states[0]))


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_rebuild_of_state_0_cannot_read_the_claimed_state_0(tmp_path, monkeypatch, sandbox):
    run = publish_tiny(
        tmp_path, PUBLISHER, steps=1, change=_lie_about_init_on_disk, extra_source=READS_THE_CLAIMED_INIT
    )
    monkeypatch.setenv("P2PAUDIT_TEST_CHEAT", "1")
    monkeypatch.setenv(SANDBOX_ENV, sandbox)
    init, _ = lab_audits(open_lab_run(run), True, range(1))
    assert init.subject == "init" and init.verdict == ("match" if sandbox == "none" else "mismatch")
