"""A step that every key attested with "error" (no observed digest at all) counts as checked by nobody and
disputed by nobody: it once made the bucket's dispute count NULL, and `ledger coverage --png`, the explorer's
strip and the demo's picture failed with exit 3 (TypeError)."""

from __future__ import annotations

import hashlib

from click.testing import CliRunner

from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.explorer.coverage import bucket_coverage
from tests.attest.attest_helpers import RUN, key, make_signed

NODE = hashlib.sha256(b"errors only").digest()


def test_a_step_attested_only_with_errors_is_neither_checked_nor_disputed(tmp_path):
    path = tmp_path / "ledger.db"
    with AttestationStore.open(path, origin_for(NODE)) as store:
        store.register_run(RUN, 4, "errors")
        for signer in (key(1), key(2)):
            store.append(make_signed(signer, step=2, verdict="error").encoded)
        store.append(make_signed(key(1), step=0).encoded)
        strip = bucket_coverage(store, RUN, buckets=4)
    assert [b.disputed_steps for b in strip.buckets] == [0, 0, 0, 0]
    assert (strip.totals.checked_steps, strip.totals.attested_steps, strip.totals.errors) == (1, 2, 2)
    png = tmp_path / "coverage.png"
    result = CliRunner().invoke(cli, ["ledger", "coverage", "--ledger", str(path), "--png", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
