"""A daemon's terminal reads like a tool, and a peer that leaves on purpose is forgotten (issue 19, item 6).

Three daemons (real processes) follow a lab; `p2paudit announce` (a real process with the lab's key, whose
short-lived node joins through the first daemon, publishes and leaves after seconds) announces the lab's
run, served over HTTP by the standard library's server. Afterwards:

- every line a daemon wrote is its own: the start line, one event line each, the closing summary, and
  nothing at all on stderr (py-libp2p's warnings went to stderr, bare, through Python's last-resort
  handler: "fail to upgrade mux", "Failed to read DHT message from stream", six-line "Failed to open
  stream" dumps); py-libp2p's records are in node.log, at DEBUG level;
- no daemon's status (nor `p2paudit status`) lists the announcing node, as a peer or as a failing sync
  (it was listed "backing-off" for good: it serves no sync);
- no daemon's log names the announcing node after it left (each daemon's DHT sent it every provider
  record every 10 s for good, a failed dial each time).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from test_daemon_remote import Server

from p2paudit.identity import ensure_node_identity, peer_id_of
from p2paudit.run.publisher import TrainPlan, publish_run

# The daemons run this long after the announcing node left (two and a half of their DHT rounds), then get SIGINT.
OBSERVE_S = 25.0
DURATION_S = 240.0  # a stop of last resort, should the test die before its SIGINT
# After the announcing node left, its name may still appear in a log for this long (a request already on
# its way when it closed); a redial loop names it again every 10 s (the daemon's DHT round) for good.
GRACE_S = 8.0
EVENT_KINDS = r"[a-z][a-z-]*"
OWN_LINES = [
    re.compile(r"node 12D3KooW\w+ auditing \d+ run\(s\); status in \S+, log in \S+"),
    re.compile(rf" *\d+\.\ds  {EVENT_KINDS} +\S.*"),  # an event: seconds since start, kind, one line of text
    re.compile(
        r"run [0-9a-f]{16}\.\. \(.*\): \d+/\d+ steps checked, \d+/\d+ checked \d+x, "
        r"\d+ with a finding, \d+ of them disputed"
    ),
    re.compile(r"audited \d+ step\(s\), received \d+ attestation\(s\), ledger size \d+"),
    re.compile(r"stopped by signal 2"),
]
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> tuple[Path, Path]:
    """(the lab's home, with its node key; the directory served, holding run/ signed by that key)."""
    root = tmp_path_factory.mktemp("lab")
    home = root / "home"
    identity, _ = ensure_node_identity(home)
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(root / "served" / "run", "tiny", steps=3, ckpt_every=1, backend="reference", arithmetic=1),
        identity,
    )
    return home, root / "served"


def _start(home: Path, lab_key: str, *extra: str) -> subprocess.Popen:
    ensure_node_identity(home)  # its key made here: the daemon itself then has nothing to say on stderr
    env = {**os.environ, "P2PAUDIT_HOME": str(home)}
    cmd = [sys.executable, "-m", "p2paudit", "daemon", "--follow", lab_key, "--backend", "reference"]
    cmd += ["--redundancy", "1", "--duration", str(DURATION_S), *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _status(home: Path) -> dict | None:
    try:
        return json.loads((home / "status.json").read_text())
    except (FileNotFoundError, ValueError):  # not written yet, or being replaced
        return None


def _wait(predicate, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _log_lines_naming(log: Path, peer: str, after: float) -> list[str]:
    """Lines of a daemon's log (rotated parts included) that name `peer` and were written after `after`."""
    found = []
    for part in sorted(log.parent.glob(log.name + "*")):
        for line in part.read_text(errors="replace").splitlines():
            stamp = LOG_TIME.match(line)
            if stamp and peer in line:
                when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local time
                if when > after:
                    found.append(line[:300])
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_daemons_print_only_their_own_lines_and_forget_the_announcing_node_after_it_left(lab, tmp_path):
    lab_home, served = lab
    lab_identity, _ = ensure_node_identity(lab_home)
    lab_key, announcer = lab_identity.public_key.hex(), peer_id_of(lab_identity.public_key)
    homes = {name: tmp_path / name for name in "abc"}
    server = Server(served)
    procs: dict[str, subprocess.Popen] = {}
    try:
        procs["a"] = _start(homes["a"], lab_key)
        _wait(lambda: (_status(homes["a"]) or {}).get("listen"), "daemon a's status", 90)
        first = _status(homes["a"])["listen"][0]
        for name in "bc":
            procs[name] = _start(homes[name], lab_key, "--peer", first)
        _wait(lambda: len((_status(homes["a"]) or {}).get("peers", [])) >= 2, "b and c connected to a", 90)
        env = {**os.environ, "P2PAUDIT_HOME": str(lab_home)}
        cmd = [sys.executable, "-m", "p2paudit", "announce", server.url, "--peer", first, "--wait", "30"]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        left = time.time()
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("announced run sha256:") and done.stderr == "", done.stderr[-2000:]
        time.sleep(OBSERVE_S)
        for proc in procs.values():
            proc.send_signal(signal.SIGINT)
        outputs = {name: proc.communicate(timeout=60) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
        server.close()
    for name, (out, err) in outputs.items():
        assert procs[name].returncode == 130, f"daemon {name}: {err[-2000:]}"
        assert err == "", f"daemon {name} wrote on stderr:\n{err[:3000]}"
        strays = [line for line in out.splitlines() if not any(p.fullmatch(line) for p in OWN_LINES)]
        assert not strays, f"daemon {name} printed lines that are not its own events:\n" + "\n".join(strays[:20])
    assert "following " in outputs["a"][0], outputs["a"][0][-3000:]  # a adopted the announced run
    logs = "".join((homes[name] / "node.log").read_text() for name in "abc")
    assert re.search(r" DEBUG libp2p\.", logs), "py-libp2p's records did not reach the log files"
    for name, home in homes.items():
        status = json.loads((home / "status.json").read_text())
        assert announcer not in status["peers"]
        assert [s for s in status["sync"] if s["peer"] == announcer] == [], f"daemon {name}: {status['sync']}"
        assert _log_lines_naming(home / "node.log", announcer, left + GRACE_S) == [], f"daemon {name} redials it"
    first_peer = first.rsplit("/p2p/", 1)[1]
    for name, home in homes.items():  # what `p2paudit status` shows of the stopped daemon's last status
        env = {**os.environ, "P2PAUDIT_HOME": str(home)}
        shown = subprocess.run([sys.executable, "-m", "p2paudit", "status"], env=env, capture_output=True, text=True)
        assert shown.returncode == 0 and f"sync {announcer}:" not in shown.stdout, shown.stdout
        if name != "a":  # a is their bootstrap peer (redialled): still listed
            assert f"  sync {first_peer}: " in shown.stdout, shown.stdout
