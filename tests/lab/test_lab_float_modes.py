"""A lab replay starts from the standard floating-point control word, whatever an earlier replay left.

A daemon replays many runs on its worker threads; a lab script's code may change the thread's MXCSR
(torch.set_flush_denormal(True), fesetround) and leave it so. The lab mode refuses to compute under a
non-standard control word, so without a reset an honest run replayed next on that thread would be refused:
one publisher's script could keep a volunteer from auditing every other lab run. The replay's child writes the
standard word before its task (audit.lab_task), and so does the parent before the steps that warm the kernels'
cache (lab.warm: alone in a fresh process, this test failed there); a step whose own code changes it is still
refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernels.cpu_float_modes import nonstandard_modes
from p2paudit.audit.lab_replay import lab_audits
from p2paudit.audit.records import MATCH
from p2paudit.identity import identity_from_seed
from p2paudit.run.lab_run import open_lab_run
from tests.float_modes import flushing_denormals
from tests.lab.lab_runs import publish_tiny


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return publish_tiny(tmp_path_factory.mktemp("float-modes"), identity_from_seed(b"\x33" * 32), steps=2)


def test_a_replay_after_another_script_left_flush_to_zero_on_still_matches(honest):
    with flushing_denormals():
        assert nonstandard_modes() == ["flush-to-zero", "denormals-are-zero"]  # as a script left it
        audits = lab_audits(open_lab_run(honest), True, range(0, 2))
    assert [a.verdict for a in audits] == [MATCH, MATCH, MATCH]  # state 0 rebuilt, steps 0 and 1 replayed
