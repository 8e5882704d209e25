"""A dial-back answer says "reached" or "not reached", never why (docs/network.md, "Dial-back").

The requester names its own address, so an answer that said *why* a dial failed (a reset, no route,
a time-out, a handshake that went wrong), or that came back sooner for one cause than for another,
would let it map which of its ports are open, closed or filtered through us. Here one real server
(py-libp2p's TCP transport and Noise, a real node at the target for the reached case) dials the
same address in five worlds built in a network namespace of the test's own (dialback_worlds.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from p2paudit.node.net._dialback import FAILED, OK, decode_response
from tests.ci_gate import skip_or_fail

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 1.5  # the server's dial time-out here (the daemon's is 5 s)


def _worlds() -> dict[str, tuple[str, float]]:
    missing = [tool for tool in ("unshare", "ip", "nft") if shutil.which(tool) is None]
    if os.geteuid() != 0 or missing:
        why = f"it needs root and {', '.join(missing) or 'nothing else'} to build a network namespace"
        skip_or_fail("the dial-back answers test", why)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    script = Path(__file__).with_name("dialback_worlds.py")
    done = subprocess.run(
        ["unshare", "--net", "--", sys.executable, str(script), str(TIMEOUT)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, f"dialback_worlds.py failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return {name: (bytes.fromhex(hexed), seconds) for name, (hexed, seconds) in json.loads(done.stdout).items()}


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(180)
def test_closed_other_protocol_unroutable_and_filtered_get_one_answer_at_one_time():
    worlds = _worlds()
    failed = {name: worlds[name] for name in ("closed", "other protocol", "unroutable", "filtered")}
    answers = {answer for answer, _ in failed.values()}
    assert len(answers) == 1, {name: decode_response(answer) for name, (answer, _) in failed.items()}
    (answer,) = answers
    decoded = decode_response(answer)
    assert (decoded.code, decoded.addr, decoded.reason) == (FAILED, "/ip4/192.0.2.1/tcp/4001", "not reached")
    # None answered before the dial's deadline: a reset (closed), an error at once (unroutable) and a
    # handshake refused (HTTP) look like the silence of a filtered port. A lower bound: a loaded machine
    # only makes an answer later.
    early = {name: round(seconds, 3) for name, (_, seconds) in failed.items() if seconds < TIMEOUT}
    assert not early, f"answered before the {TIMEOUT} s deadline: {early}"
    # The one thing an answer tells: this address reached the requester's own key.
    reached = decode_response(worlds["reached"][0])
    assert (reached.code, reached.addr, reached.reason) == (OK, "/ip4/192.0.2.1/tcp/4001", "reached")
