"""p2paudit.durable: whole-file writes that never leave a half-written or over-permissive file."""

import stat

import pytest

from p2paudit.durable import write_durably


def test_create_only_never_touches_an_existing_file(tmp_path):
    path = tmp_path / "f"
    write_durably(path, b"first", replace=False)
    with pytest.raises(FileExistsError):
        write_durably(path, b"second", replace=False)
    assert path.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temp file left behind


def test_replace_swaps_the_whole_file(tmp_path):
    path = tmp_path / "f"
    write_durably(path, b"a much longer first version")
    write_durably(path, b"short")
    assert path.read_bytes() == b"short"


def test_a_stale_wide_temp_file_cannot_widen_a_private_file(tmp_path, monkeypatch):
    monkeypatch.setattr("os.getpid", lambda: 4242)
    stale = tmp_path / ".key.4242.tmp"
    stale.write_bytes(b"stale")
    stale.chmod(0o666)
    write_durably(tmp_path / "key", b"secret", mode=0o600, replace=False)
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600
    assert not stale.exists()
