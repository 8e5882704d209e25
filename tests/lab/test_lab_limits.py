"""A lab script that takes time, memory, disk or the parent's attention costs one failed replay, not the node
(p2paudit/audit/lab_limits.py, lab_child.py, lab_isolation.py).

The run is honest; its script misbehaves in a step when P2PAUDIT_TEST_ABUSE names how (never while the test
publishes it). Each abuse fails the replay in one line (LabChildRaised or InputError, exit 2); the control is
the same run replayed without it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from p2paudit.audit.lab_isolation import LabChildRaised
from p2paudit.audit.lab_limits import DEFAULT_SCRATCH_BYTES, DEFAULT_TIMEOUT_S, lab_limits
from p2paudit.audit.lab_replay import lab_audits
from p2paudit.errors import InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run import lab_run
from p2paudit.run.checkpoint_layout import parse_layout
from p2paudit.run.lab_run import open_lab_run
from p2paudit.sizes import parse_bytes, physical_memory
from tests.lab.lab_runs import publish_tiny

PUBLISHER = identity_from_seed(b"\x6b" * 32)

ABUSES = """
_kind_step = train_step


def train_step(model, opt, tokens):
    import json
    import os
    import resource
    import struct
    import subprocess
    import sys
    import tempfile
    import time

    abuse = os.environ.get("P2PAUDIT_TEST_ABUSE", "")
    if abuse == "hang":  # writing its log without end, and with a process of its own that would outlive it
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", os.environ["P2PAUDIT_TEST_TOKEN"]])
        while True:
            sys.stderr.write("x" * 65536)
    if abuse == "memory":
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        except (ValueError, OSError):
            pass  # a hard limit, lowered by the child before the script ran: not ours to raise
        hoard = bytearray(4 << 30)
    if abuse == "disk":
        for where in (tempfile.gettempdir(), os.getcwd()):
            with open(os.path.join(where, "filler"), "wb") as f:
                for _ in range(64):
                    f.write(b"x" * (1 << 20))
    if abuse == "linger":  # a process of its own holds the pipe the state goes on, after the state has gone
        if os.fork() == 0:
            time.sleep(600)
            os._exit(0)
    if abuse.startswith("flood"):  # on the pipe the child sends its state on: a short result, then bytes without
        # end after a header that is not one (junk), claims more than the start's size (big), or is true (long)
        data_fd = json.loads(sys.argv[1])["data_fd"]
        result = json.dumps({"names": ["a"], "ops": [], "values": None, "error": None}).encode()
        os.write(data_fd, struct.pack("<Q", len(result)) + result)
        count = {"flood-junk": 0, "flood-big": 1 << 31, "flood-long": 4}[abuse]
        meta = {"format": "p2paudit-checkpoint", "version": "1", "step": "1", "state_digest": "sha256:" + "0" * 64}
        entry = {"dtype": "F32", "shape": [count], "data_offsets": [0, 4 * count]}
        header = json.dumps({"__metadata__": meta, "a": entry}).encode()
        if count:
            os.write(data_fd, struct.pack("<Q", len(header)) + header)
        while True:
            os.write(data_fd, b"x" * (1 << 20))
    return _kind_step(model, opt, tokens)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return publish_tiny(tmp_path_factory.mktemp("abused"), PUBLISHER, steps=1, extra_source=ABUSES)


def _replay(run: Path) -> list[str]:
    return [a.verdict for a in lab_audits(open_lab_run(run), False, range(1))]


def _living(token: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and token.encode() in (entry / "cmdline").read_bytes():
                found.append(entry.name)
        except OSError:
            continue
    return found


@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
def test_the_control_replays_under_tight_limits(run, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_LAB_MEMORY", "2G")
    monkeypatch.setenv("P2PAUDIT_LAB_SCRATCH", "16M")
    monkeypatch.setenv("P2PAUDIT_LAB_TIMEOUT", "300")
    assert _replay(run) == ["match"]


@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
def test_a_step_past_its_time_is_stopped_with_what_it_started(run, monkeypatch):
    token = f"p2paudit-test-hang-{os.getpid()}"
    monkeypatch.setenv("P2PAUDIT_TEST_ABUSE", "hang")
    monkeypatch.setenv("P2PAUDIT_TEST_TOKEN", token)
    monkeypatch.setenv("P2PAUDIT_LAB_TIMEOUT", "12")
    with pytest.raises(LabChildRaised, match=r"^the lab replay of step 0 ran past its 12 s \(P2PAUDIT_LAB_TIMEOUT\)"):
        _replay(run)
    # The sandbox's processes end with it: bwrap is killed and waited for, the kernel then ends every process
    # of its pid namespace (not waited for: within moments; CI once saw the sleeper still there at once).
    deadline = time.monotonic() + 15
    while _living(token) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _living(token) == []


@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_a_process_that_holds_the_pipe_open_does_not_hold_the_replay(run, monkeypatch, sandbox):
    """The state came whole: the verdict is made without waiting for the pipe's end (before, without the
    sandbox, whose processes end with it, the replay ran into its timeout)."""
    monkeypatch.setenv("P2PAUDIT_LAB_SANDBOX", sandbox)
    monkeypatch.setenv("P2PAUDIT_TEST_ABUSE", "linger")
    monkeypatch.setenv("P2PAUDIT_LAB_TIMEOUT", "20")
    assert _replay(run) == ["match"]  # not LabChildRaised, "ran past its 20 s"


@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
def test_memory_past_the_limit_fails_in_the_script_which_cannot_lift_it(run, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_TEST_ABUSE", "memory")
    monkeypatch.setenv("P2PAUDIT_LAB_MEMORY", "2G")
    message = "^the lab replay raised MemoryError: the step needs more than the 2147483648 bytes of data memory it may use \\(P2PAUDIT_LAB_MEMORY"
    with pytest.raises(LabChildRaised, match=message):
        _replay(run)


@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
def test_the_sandbox_has_no_disk_to_fill(run, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_TEST_ABUSE", "disk")
    monkeypatch.setenv("P2PAUDIT_LAB_SCRATCH", "16M")
    with pytest.raises(LabChildRaised, match=r"No space left on device"):
        _replay(run)


@pytest.mark.parametrize(
    ("abuse", "message"),
    [
        ("flood-junk", "its state is not a valid safetensors file: header length [0-9]+, want 2..[0-9]+$"),
        ("flood-big", "its state: its header gives 8589934[0-9]+ bytes, more than the [0-9]+ the state its step st"),
        ("flood-long", "its state: more bytes than the [0-9]+ its header gives$"),
    ],
)
@pytest.mark.slow  # a sandboxed child per replay (fast tier: pytest -m 'not slow')
def test_a_state_sent_without_end_is_refused_by_its_header_and_the_size_of_the_start(run, monkeypatch, abuse, message):
    monkeypatch.setenv("P2PAUDIT_TEST_ABUSE", abuse)
    with pytest.raises(InputError, match="the lab replay of step 0: " + message):
        _replay(run)


def test_a_manifest_claiming_more_tensors_than_a_state_may_have_is_refused(run, monkeypatch):
    """Each claimed tensor lets a checkpoint's header be 256 bytes longer: a state's count is bounded
    (run.checkpoint_layout.MAX_STATE_TENSORS, here lowered to below the tiny model's)."""
    monkeypatch.setattr(lab_run, "MAX_STATE_TENSORS", 3)
    with pytest.raises(InputError, match=r"manifest.json initial_state has [0-9]+ tensors, more than the 3 allowed$"):
        open_lab_run(run)


def test_a_header_of_many_small_objects_is_refused_before_it_is_parsed():
    entries = {f"t{i}": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(3)}
    honest = json.dumps(entries).encode()
    assert set(parse_layout(honest, None, "h", ["t0", "t1", "t2"]).tensors) == {"t0", "t1", "t2"}
    bomb = json.dumps({**entries, "__metadata__": {"x": "y"}, "pad": [{}] * 1000}).encode()
    with pytest.raises(
        InputError, match=r"^h header has 2024 JSON arrays, objects and separators, more than the 1120 allowed$"
    ):
        parse_layout(bomb, None, "h", ["t0", "t1", "t2"])


def test_the_limits_default_and_refuse_a_malformed_value_in_one_line(monkeypatch):
    for name in ("P2PAUDIT_LAB_TIMEOUT", "P2PAUDIT_LAB_MEMORY", "P2PAUDIT_LAB_SCRATCH"):
        monkeypatch.delenv(name, raising=False)
    limits = lab_limits()
    assert (limits.timeout_s, limits.memory_bytes, limits.scratch_bytes) == (
        DEFAULT_TIMEOUT_S, physical_memory(), DEFAULT_SCRATCH_BYTES
    )  # fmt: skip
    assert [parse_bytes(t, "X") for t in ("4096", "512M", "8g", "1GiB", "2 T")] == [
        4096,
        512 << 20,
        8 << 30,
        1 << 30,
        2 << 40,
    ]
    for name, bad in [("P2PAUDIT_LAB_TIMEOUT", "soon"), ("P2PAUDIT_LAB_TIMEOUT", "-1"), ("P2PAUDIT_LAB_TIMEOUT", "nan"),
                      ("P2PAUDIT_LAB_TIMEOUT", "inf"), ("P2PAUDIT_LAB_MEMORY", "0"), ("P2PAUDIT_LAB_MEMORY", "lots"),
                      ("P2PAUDIT_LAB_SCRATCH", "1.5G")]:  # fmt: skip
        monkeypatch.setenv(name, bad)
        with pytest.raises(InputError, match=f"^{name}='{bad}': want a positive") as e:
            lab_limits()
        assert "\n" not in str(e.value)
        monkeypatch.delenv(name)
