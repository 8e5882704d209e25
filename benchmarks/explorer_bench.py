"""The explorer at size: a 100,000-step run on a ledger of 1,000,000 attestations (10 keys per step).

Times the coverage page's API call (1,000 buckets over the whole run: one SQL
pass over the run's index rows), cold (a fresh Explorer, nothing cached) and
warm (the answer kept for this ledger size), a zoom to 1,000 steps, the runs
list, one step, the disputes list; and, when Debian's Chromium is installed,
the coverage page loaded in headless Chromium until its script says it is
ready, on a server just started (with nothing saved, and with the overviews
a previous server saved) and on one warmed up. Baselines in the same run, on the same file: COUNT(*) over the index
table and over the entries table.

    python benchmarks/explorer_bench.py                 # 1,000,000 attestations (builds the ledger: minutes)
    python benchmarks/explorer_bench.py --quick         # 100,000 attestations over 10,000 steps
    python benchmarks/explorer_bench.py --ledger FILE   # keep (or reuse) the ledger it builds
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, then this folder

from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.explorer.api import Explorer  # noqa: E402
from p2paudit.explorer.server import make_server, start_in_thread  # noqa: E402
from p2paudit.identity import identity_from_seed  # noqa: E402

RUN = hashlib.sha256(b"explorer benchmark run").digest()
KEYS = 10


def build(path: Path, steps: int) -> None:
    """steps x KEYS synthetic attestations (every 97th an error, every 89th a mismatch: disputes), in batches."""
    keys = [identity_from_seed(hashlib.sha256(b"explorer bench key %d" % k).digest()) for k in range(KEYS)]
    began = time.perf_counter()
    with AttestationStore.open(path, origin_for(keys[0].public_key)) as store:
        store.register_run(RUN, steps, "benchmark")
        chunk = 10_000
        for first in range(0, steps * KEYS, chunk):
            items = [
                synthetic_attestation(keys[n % KEYS], RUN, n // KEYS, n).encoded for n in range(first, first + chunk)
            ]
            store.append_many(items)
            if (first + chunk) % 100_000 == 0:
                print(f"  {first + chunk:>9,} attestations, {time.perf_counter() - began:.0f} s", flush=True)
        store.checkpoint(keys[0])


def timed(what: Callable[[], object], repeat: int = 3) -> tuple[float, float]:
    """(best, median) wall seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        what()
        times.append(time.perf_counter() - began)
    return min(times), statistics.median(times)


def sql_baselines(path: Path) -> dict[str, tuple[float, float]]:
    with AttestationStore.open_readonly(path) as store:
        return {
            "baseline: SELECT COUNT(*) FROM attest_index": timed(
                lambda: store.conn.execute("SELECT COUNT(*) FROM attest_index").fetchone()
            ),
            "baseline: SELECT COUNT(*) FROM entries": timed(
                lambda: store.conn.execute("SELECT COUNT(*) FROM entries").fetchone()
            ),
        }


def api_figures(path: Path, steps: int) -> dict[str, tuple[float, float]]:
    run = RUN.hex()

    def cold(route: str, params: dict[str, str]) -> Callable[[], object]:
        def call() -> None:
            answer = Explorer(path).answer(route, params)  # a fresh Explorer: nothing cached
            if answer.status != 200:
                raise SystemExit(f"{route}: HTTP {answer.status} {answer.body[:200]!r}")

        return call

    warm = Explorer(path)
    warm.answer(f"/runs/{run}/coverage", {"buckets": "1000"})
    mid = steps // 2
    return {
        "coverage, 1,000 buckets of the whole run (cold)": timed(cold(f"/runs/{run}/coverage", {"buckets": "1000"})),
        "coverage, same, min=3 (cold)": timed(cold(f"/runs/{run}/coverage", {"buckets": "1000", "min": "3"})),
        "coverage, same (warm: kept for this ledger size)": timed(
            lambda: warm.answer(f"/runs/{run}/coverage", {"buckets": "1000"}), repeat=5
        ),
        "coverage, zoom to 1,000 steps (cold)": timed(
            cold(f"/runs/{run}/coverage", {"from": str(mid), "to": str(mid + 1000), "buckets": "1000"})
        ),
        "runs list (cold)": timed(cold("/runs", {})),
        "one step, 10 attestations verified (cold)": timed(cold(f"/runs/{run}/steps/{mid}", {})),
        "disputes, first page of 100 (cold)": timed(cold("/disputes", {}), repeat=1),
    }


def saved_overviews(path: Path) -> dict:
    """What a server that has warmed up saves for the next start (the CLI writes it to its cache folder)."""
    explorer = Explorer(path)
    explorer.overviews.warm_in_background().join()
    return json.loads(json.dumps(explorer.overviews.to_save()))  # through JSON, as the file holds it


def browser_load(path: Path, warm: bool, repeat: int = 3, saved: dict | None = None) -> list[float] | None:
    """Seconds from navigation to the coverage page's ready mark, each time on a fresh server: at once (racing
    its warm-up: nothing computed yet), or once it has made every run's overview (`warm`); with `saved`, the
    fresh server first takes back what a previous one saved (as `explore` does at start)."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    loads = []
    try:
        for _ in range(repeat):
            server = make_server("127.0.0.1:0", path, saved=saved)
            start_in_thread(server)
            if warm:
                server.warming.join()
            began = time.perf_counter()
            driver.get(f"{server.url}run.html?run={RUN.hex()}")
            while driver.execute_script("return document.body.dataset.ready") is None:
                time.sleep(0.01)
            loads.append(time.perf_counter() - began)
            if driver.execute_script("return document.body.dataset.ready") != "1":
                raise SystemExit("the coverage page showed an error")
            server.shutdown()
            server.server_close()
    finally:
        driver.quit()
    return loads


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 steps (100,000 attestations)")
    parser.add_argument("--ledger", type=Path, default=None, help="build the ledger here, or reuse it if it exists")
    args = parser.parse_args()
    steps = 10_000 if args.quick else 100_000
    folder = None
    path = args.ledger
    if path is None:
        folder = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
        path = folder / "ledger.db"
    try:
        if not path.exists():
            print(f"building a ledger of {steps * KEYS:,} attestations over {steps:,} steps at {path}", flush=True)
            build(path, steps)
        print(f"CPU: {cpu_model()}")
        figures = {**sql_baselines(path), **api_figures(path, steps)}
        for name, (best, median) in figures.items():
            print(f"  {name:<52} best {best * 1000:8.1f} ms   median {median * 1000:8.1f} ms")
        saved = saved_overviews(path)
        cases = (
            (False, None, "a server just started, nothing saved (its first start)"),
            (False, saved, "a server just started with what the previous one saved"),
            (True, None, "once the server has warmed up"),
        )
        for warm, kept, what in cases:
            loads = browser_load(path, warm, saved=kept)
            if loads is None:
                print("  page load: no chromium and chromedriver here (apt-get install chromium chromium-driver)")
                break
            print(f"  coverage page in headless Chromium, to ready, {what}: {', '.join(f'{s:.2f}' for s in loads)} s")
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
