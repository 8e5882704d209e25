"""Make docs/explorer.png, the README's picture of the explorer: the run page of a synthetic 100,000-step run.

    .venv/bin/python scripts/explorer_screenshot.py                 # writes docs/explorer.png
    .venv/bin/python scripts/explorer_screenshot.py --out FILE --steps N --keep DIR

It builds a ledger of signed v2 attestations (benchmarks/synthetic_attestations.py; the shape below) in a
temporary folder, starts a real `p2paudit explore` process on 127.0.0.1 (a free port, $P2PAUDIT_HOME in that
folder, so no cache lands in ~/.p2paudit) over it, opens the run page in Debian's headless Chromium through
Selenium (the flags of tests/explorer/test_explorer_browser.py), waits until the page says it is ready and the
run's disputes are listed, and saves a PNG 1200 px wide, as tall as the page (at most 2,000 px). It stops the
browser and the server and removes the folder (`--keep DIR`: build the ledger in DIR and leave it there). The
picture is written whole or not at all; the same ledger and browser make the same bytes.

The run, as a reader of the README should see one mid-audit: the first 45 % of the steps checked by two keys
each (the network's aim, R = 2), then fewer and fewer checks up to 90 %, the newest 10 % not checked yet; the
initial state checked by three keys; three replays that failed (errors) among the newest steps; and a
dishonest key that signed a different state for four steps two honest keys reproduced: four disputes, so the
run's sentence is amber. 100,000 steps are 142,292 attestations, each signed and then checked as the ledger
stores it: about 30 s of CPU (docs/benchmarks.md has the machine).

Needs chromium and chromedriver (apt-get install chromium chromium-driver) and the test extras (selenium).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]  # this repository's code first, then the shared records

from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.identity import Identity, identity_from_seed  # noqa: E402

RUN = hashlib.sha256(b"explorer screenshot run").digest()
LABEL = "gpt-350m pretraining (synthetic)"
STEPS = 100_000
HONEST = 6  # keys 0..5 audit honestly; key 6 is the dishonest one
DISHONEST = HONEST
PUBLISHER = HONEST + 1  # the key that signed the run's manifest (the runs page shows it)
DISPUTED_AT = (0.0617, 0.12345, 0.2961, 0.4088)  # fractions of the run: inside the part every step has two keys
# A replay that failed (an error), on a step nobody has checked yet. Not on a checked step: there a match beside
# an error counts as a disputed step (explorer/coverage.py), and the picture is of the dishonest key's 4 disputes.
ERRORS_AT = (0.9123, 0.9456, 0.9789)
FULL, FADE = 0.45, 0.90  # two keys per step up to FULL; fewer up to FADE; none after
WIDTH = 1200  # px, as the picture in the README has always been
MAX_HEIGHT = 2000  # px: a run of 1,000 steps or fewer lists every step below the strip, 30,000 px of table
BATCH = 10_000  # attestations per append_many (one transaction)
READY_SECONDS = 60


@dataclass(frozen=True)
class Check:
    """One attestation the ledger gets: who signs it, of which step (or the initial state), with which verdict."""

    key: int
    step: int
    verdict: str = "match"
    subject: str = "step"


def _uniform(step: int) -> float:
    """A number in [0, 1) fixed by the step: which steps get fewer checks looks scattered, yet is the same each time."""
    return int.from_bytes(hashlib.sha256(b"screenshot step %d" % step).digest()[:8], "big") / 2**64


def checks_per_step(step: int, steps: int) -> int:
    """2 keys up to FULL; from FULL to FADE the share with 2 falls linearly from 1 to 0 and the share with
    none grows as its square (the rest have 1); no key after FADE."""
    where = step / steps
    if where < FULL:
        return 2
    if where >= FADE:
        return 0
    fade = (where - FULL) / (FADE - FULL)
    u = _uniform(step)
    return 2 if u < 1 - fade else 1 if u < 1 - fade * fade else 0


def planned_checks(steps: int) -> Iterator[Check]:
    """Every attestation of the picture's ledger, in the order they are stored."""
    for key in range(3):
        yield Check(key, 0, subject="init")
    disputed = {int(at * steps) for at in DISPUTED_AT}
    errors = {int(at * steps) for at in ERRORS_AT}
    for step in range(steps):
        for k in range(checks_per_step(step, steps)):
            yield Check((step + k) % HONEST, step)
        if step in disputed:
            yield Check(DISHONEST, step, "mismatch")
        if step in errors:
            yield Check((step + 2) % HONEST, step, "error")


def keys() -> list[Identity]:
    return [identity_from_seed(hashlib.sha256(b"explorer screenshot key %d" % k).digest()) for k in range(HONEST + 2)]


def build_ledger(path: Path, steps: int) -> int:
    """The picture's ledger at `path` (a new file): the run registered with its publisher, every planned check
    signed and stored, one signed checkpoint. Returns the number of attestations."""
    identities = keys()
    count = 0
    with AttestationStore.open(path, origin_for(identities[0].public_key)) as store:
        store.register_run(RUN, steps, LABEL, identities[PUBLISHER].public_key)
        batch: list[bytes] = []
        for check in planned_checks(steps):
            signed = synthetic_attestation(
                identities[check.key], RUN, check.step, count, verdict=check.verdict, subject=check.subject
            )
            batch.append(signed.encoded)
            count += 1
            if len(batch) == BATCH:
                store.append_many(batch)
                batch = []
        if batch:
            store.append_many(batch)
        store.checkpoint(identities[0])
    return count


@dataclass(frozen=True)
class ExploreProcess:
    """A `p2paudit explore` this script started: the process, the URL it serves, the file its stderr goes to."""

    process: subprocess.Popen
    url: str
    stderr_path: Path


def start_explorer(ledger: Path, home: Path) -> ExploreProcess:
    """`p2paudit explore` as its own process on a free loopback port; its URL read from the line it prints."""
    stderr_path = home / "explore.stderr"
    env = {**os.environ, "P2PAUDIT_HOME": str(home), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "p2paudit", "explore", "--listen", "127.0.0.1:0", "--ledger", str(ledger)]
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:  # drains stdout for the process's life, so its pipe never fills
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, name="explore-stdout", daemon=True).start()
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        if line.startswith("explorer at "):
            return ExploreProcess(process, line.split()[2], stderr_path)
    stop_explorer(ExploreProcess(process, "", stderr_path))
    raise SystemExit(f"explorer_screenshot: p2paudit explore did not say where it listens: {_tail(stderr_path)}")


def stop_explorer(explorer: ExploreProcess) -> None:
    """Ctrl-C, as a user stops it (it saves its overviews and exits 130); killed if it has not gone in 10 s."""
    if explorer.process.poll() is None:
        explorer.process.send_signal(signal.SIGINT)
        try:
            explorer.process.wait(10)
        except subprocess.TimeoutExpired:
            explorer.process.kill()
            explorer.process.wait()


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace").strip() if path.exists() else ""
    return " | ".join(text.splitlines()[-3:]) or "(nothing on stderr)"


def find_browser() -> tuple[str, str]:
    """Chromium's and chromedriver's paths, and Selenium importable; SystemExit(2) naming what is missing (checked
    before the ledger is built, so a missing browser costs nothing)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        _say("no chromium and chromedriver here (apt-get install chromium chromium-driver)")
        raise SystemExit(2)
    if importlib.util.find_spec("selenium") is None:
        _say("no selenium in this Python (the test extras: pip install -e '.[test]')")
        raise SystemExit(2)
    return chromium, driver_path


def browser(chromium: str, driver_path: str):
    """Headless Chromium through Selenium, with the flags the explorer's browser tests use."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={WIDTH},800")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(READY_SECONDS)
    return driver


def _say(line: str) -> None:
    print(f"explorer_screenshot: {line}", file=sys.stderr)


def _viewport(driver, height: int) -> None:
    """The page laid out exactly WIDTH css px wide at one device pixel per css px, `height` tall."""
    metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)


def shoot_run_page(driver, url: str) -> tuple[bytes, str, str]:
    """The run page once drawn (ready mark set, disputes listed), as PNG bytes the whole page tall; with the
    page's verdict sentence and its tone."""
    _viewport(driver, 800)
    driver.get(f"{url}run.html?run={RUN.hex()}")
    deadline = time.monotonic() + READY_SECONDS
    ready = "return [document.body && document.body.dataset.ready, document.body && document.body.dataset.disputes]"
    while (state := driver.execute_script(ready)) != ["1", "1"]:
        if state[0] == "error" or time.monotonic() > deadline:
            shown = driver.execute_script("return document.getElementById('error').textContent")
            why = f"ready={state[0]}, disputes={state[1]}: {shown}"
            raise SystemExit(f"explorer_screenshot: the run page is not ready ({why}; waited up to {READY_SECONDS} s)")
        time.sleep(0.05)
    sentence, tone = driver.execute_script(
        "const s = document.getElementById('verdict-sentence'); return [s.textContent, s.className];"
    )
    height = driver.execute_script("return document.documentElement.scrollHeight")
    _viewport(driver, min(height, MAX_HEIGHT))
    return driver.get_screenshot_as_png(), sentence, tone


def shoot(chromium: str, driver_path: str, url: str) -> tuple[bytes, str, str]:
    """shoot_run_page in a browser of its own, quit afterwards; the browser's failure as one line."""
    from selenium.common.exceptions import WebDriverException

    try:
        driver = browser(chromium, driver_path)
        try:
            return shoot_run_page(driver, url)
        finally:
            driver.quit()
    except WebDriverException as exc:
        first = (exc.msg or type(exc).__name__).strip().splitlines()[0]
        raise SystemExit(f"explorer_screenshot: the browser failed: {first}") from None


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's header chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise SystemExit("explorer_screenshot: the browser's screenshot is not a PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def write_whole(path: Path, data: bytes) -> None:
    """Replace `path` with `data` at once: an interrupted run leaves the old picture, never half a new one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "explorer.png", help="the PNG to write")
    parser.add_argument("--steps", type=int, default=STEPS, help="steps of the synthetic run (default 100,000)")
    parser.add_argument("--keep", type=Path, default=None, help="build the ledger in this new folder and keep it")
    args = parser.parse_args()
    if args.steps < 100:
        parser.error(f"--steps {args.steps}: want at least 100 (the disputes sit at fractions of the run)")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep}: exists already; name a new folder")
    if not args.out.parent.is_dir():
        parser.error(f"--out {args.out}: no folder {args.out.parent}")
    chromium, driver_path = find_browser()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="explorer-screenshot-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        began = time.perf_counter()
        count = build_ledger(folder / "ledger.db", args.steps)
        print(f"ledger: {count:,} attestations over {args.steps:,} steps in {time.perf_counter() - began:.1f} s")
        explorer = start_explorer(folder / "ledger.db", folder)
        try:
            png, sentence, tone = shoot(chromium, driver_path, explorer.url)
        finally:
            stop_explorer(explorer)
        width, height = png_size(png)
        if width != WIDTH:
            raise SystemExit(f"explorer_screenshot: the screenshot is {width} px wide, want {WIDTH}")
        write_whole(args.out, png)
        print(f"{args.out}: {width} x {height} px; the page says ({tone}): {sentence}")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
