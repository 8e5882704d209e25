"""A lab script as p2paudit reads it: the interface it must define, and its bytes checked before any of them runs.

Replays run in a child process (tests/lab/test_lab_isolation.py): an honest step's match there and in
test_lab_publish_replay.py, a forged state in test_lab_verify_range.py, a forged op named as the first
departure in test_lab_daemon.py, another op graph and another torch build in test_lab_verify_range.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from p2paudit.errors import InputError
from p2paudit.lab import load_script

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "examples" / "lab_llama.py"


def test_a_script_without_the_interface_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build():\n    pass\n")
    with pytest.raises(InputError, match="does not define batch, train_step"):
        load_script(bad)


def test_a_script_whose_bytes_are_not_the_signed_ones_is_not_run(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    other = tmp_path / "other.py"
    other.write_text(LLAMA.read_text() + f"\nopen({str(marker)!r}, 'w').close()\n")
    signed = load_script(LLAMA).digest
    with pytest.raises(InputError, match="its SHA-256 is not the manifest's \\(the script was not run\\)"):
        load_script(other, signed)
    assert not marker.exists()
    load_script(other)  # the control: unchecked, it runs
    assert marker.exists()
