"""What bounds a remote run's fetch (issue 19, item 1): a deadline and a rate floor on every request, headers
included; redirects kept on the run's origin; no connection to this machine unless the run lives here; the
publisher's key checked from the signature before anything else; the manifest never held whole in memory
before its size and digest are checked.

The servers are real (tests/slow_http.py on 127.0.0.1); each test times what it waits for with a margin
far below the time the old code would take.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import tracemalloc

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.errors import EXIT_USAGE, InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run.cache import KEY_WAIT_S, BlobCache
from p2paudit.run.http_guard import Budget, GuardedBackend, RefusedAddress, TransferLimits, is_local_host
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE
from p2paudit.run.remote import RemoteRun
from tests.slow_http import SlowServer

FAST = TransferLimits(connect_timeout=2.0, read_timeout=1.0)


def _manifest(url: str, tmp_path, limits: TransferLimits = FAST, **kw) -> None:
    with RemoteRun(url, BlobCache(tmp_path / "cache", 1 << 30), limits=limits, **kw) as remote:
        remote.manifest  # noqa: B018 (the fetch is the point)


@pytest.mark.parametrize("behavior", ["trickle-head", "trickle"])
def test_a_server_trickling_bytes_is_cut_off_by_the_rate_floor(published_run, tmp_path, behavior):
    # One byte every 0.2 s: never silent for the 1 s read timeout, so only a rate floor ends it (the old
    # code waited for the whole file: over a minute for the signature alone).
    with SlowServer(published_run, {SIGNATURE_FILE: behavior}, gap=0.2) as server:
        began = time.monotonic()
        with pytest.raises(InputError, match="under the floor of 1024 bytes/s") as caught:
            _manifest(server.url, tmp_path)
        took = time.monotonic() - began
    assert took < 5.0, f"cut off after {took:.1f} s"
    message = str(caught.value)
    assert message.startswith(server.url + SIGNATURE_FILE) and "\n" not in message


def test_a_request_is_cut_off_at_its_deadline_even_above_the_rate_floor(published_run, tmp_path):
    # 64 KiB every 0.05 s (above any floor), for ever, no Content-Length: only the deadline ends it before
    # the 256 MiB cap.
    limits = TransferLimits(connect_timeout=2.0, read_timeout=1.0, deadline=1.5)
    with SlowServer(published_run, {MANIFEST_FILE: "endless"}, gap=0.05, chunk=64 * 1024) as server:
        began = time.monotonic()
        with pytest.raises(InputError, match="deadline of 1.5 s") as caught:
            _manifest(server.url, tmp_path, limits)
        took = time.monotonic() - began
    assert took < 4.0, f"cut off after {took:.1f} s"
    assert str(caught.value).startswith(server.url + MANIFEST_FILE)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.is_file()]  # the spooled body is gone


def test_a_redirect_to_another_port_is_refused_unless_allowed(published_run, tmp_path):
    with SlowServer(published_run) as real, SlowServer(published_run, {"*": f"redirect:{real.url}"}) as hop:
        with pytest.raises(InputError, match="another host or port than the run's") as caught:
            _manifest(hop.url, tmp_path)
        assert real.log == []  # never asked
        assert "--allow-other-hosts" in str(caught.value) and "\n" not in str(caught.value)
        _manifest(hop.url, tmp_path, TransferLimits(read_timeout=5.0, other_hosts=True))
        assert {MANIFEST_FILE, SIGNATURE_FILE} <= set(real.paths())


def test_a_name_that_resolves_to_this_machine_is_refused(published_run, tmp_path):
    # lab.example is not this machine's name, so its DNS answer may not be: every connection's resolved
    # address is checked, the first as well as those of redirects.
    with SlowServer(published_run) as server:
        url = f"http://lab.example:{server.port}/run/"
        with pytest.raises(InputError, match=r"lab\.example resolves to 127\.0\.0\.1 \(loopback\): refused"):
            _manifest(url, tmp_path, resolve=lambda host, port: ["127.0.0.1"])
        assert server.log == []


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("::", "unspecified"),
    ],
)
def test_addresses_of_this_machine_and_its_link_are_refused(address, kind):
    backend = GuardedBackend(Budget(FAST), allow_local=False, resolve=lambda host, port: [address])
    with pytest.raises(RefusedAddress, match=f"{address} \\({kind}\\)"):
        backend.connect_tcp("lab.example", 80, timeout=1.0)


@pytest.mark.parametrize(
    "host, local",
    [("127.0.0.1", True), ("localhost", True), ("[::1]", True), ("169.254.1.2", True), ("lab.example", False)],
)
def test_a_run_url_on_this_machine_may_be_fetched_from_it(host, local):
    assert is_local_host(host) is local


def test_publisher_is_checked_from_the_signature_before_the_manifest_or_any_file(published_run, tmp_path):
    other = identity_from_seed(b"\x77" * 32).public_key.hex()
    with SlowServer(published_run) as server:
        env = {"P2PAUDIT_HOME": str(tmp_path / "home")}
        cmd = ["verify-range", "1", "--run", server.url, "--publisher", other, "--backend", "reference"]
        result = CliRunner().invoke(cli, [*cmd, "--cache-dir", str(tmp_path / "cache")], env=env)
    assert result.exit_code == EXIT_USAGE, result.output
    assert server.paths() == [SIGNATURE_FILE]  # nothing else was asked for
    line = result.output.strip().splitlines()[-1]
    assert server.url + SIGNATURE_FILE in line and f"not by the expected publisher {other}" in line
    assert str(tmp_path / "cache") not in line


def test_the_manifest_is_checked_against_the_run_id_as_it_arrives_not_held_whole(published_run, tmp_path):
    # A body of 48 MiB whose digest is not the run id the signature names: refused with at most a few
    # chunks in memory (the old code held all 48 MiB, then found the digest wrong).
    served = tmp_path / "served"
    served.mkdir()
    (served / SIGNATURE_FILE).write_bytes((published_run / SIGNATURE_FILE).read_bytes())
    (served / MANIFEST_FILE).write_bytes(b" " * (48 << 20))
    with SlowServer(served) as server:
        tracemalloc.start()
        try:
            with pytest.raises(InputError, match="is not the run id") as caught:
                _manifest(server.url, tmp_path, TransferLimits(read_timeout=10.0))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < 8 << 20, f"held {peak} bytes at once"
    assert str(caught.value).startswith(server.url + MANIFEST_FILE)
    run_id = json.loads((published_run / SIGNATURE_FILE).read_bytes())["run_id"]
    assert run_id == "sha256:" + hashlib.sha256((published_run / MANIFEST_FILE).read_bytes()).hexdigest()


def test_a_file_another_thread_is_stuck_fetching_is_fetched_from_this_servers_copy(published_run, tmp_path):
    # Two runs that share blobs (here the same run on two servers), fetched by two threads of one process
    # into one cache: the thread whose server stalls holds the shared partial of the first shard; the other
    # fetches its own copy after KEY_WAIT_S instead of waiting out the stall (30 s here).
    stalls = {p.relative_to(published_run).as_posix(): "stall" for p in (published_run / "shards").iterdir()}
    slow_limits = TransferLimits(connect_timeout=2.0, read_timeout=30.0)
    outcome: list[BaseException | None] = []

    def stuck() -> None:
        try:
            with RemoteRun(stalled.url, BlobCache(tmp_path / "cache", 1 << 30), limits=slow_limits) as remote:
                with remote.local_view(None, None):
                    outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            outcome.append(exc)

    with SlowServer(published_run, stalls) as stalled, SlowServer(published_run) as healthy:
        thread = threading.Thread(target=stuck, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not any(p.startswith("shards/") for p in stalled.paths()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(p.startswith("shards/") for p in stalled.paths()), stalled.paths()
        began = time.monotonic()
        with RemoteRun(healthy.url, BlobCache(tmp_path / "cache", 1 << 30), limits=slow_limits) as remote:
            with remote.local_view(None, None) as view:
                assert all((view / p).is_file() for p in stalls)
        took = time.monotonic() - began
    thread.join(timeout=10)
    assert took < KEY_WAIT_S + 10.0, f"waited {took:.1f} s behind the stalled thread"
    assert outcome and isinstance(outcome[0], InputError)  # the stalled one fails when its server stops
    assert not [p.name for p in (tmp_path / "cache" / "blobs").iterdir() if ".partial." in p.name]
