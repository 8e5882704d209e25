"""The pages in a real browser: Debian's headless Chromium driven by Selenium (no browser is downloaded).

Skipped only when Chromium is absent and CI is unset; under CI they run (and
fail without a browser). Screenshots go to $P2PAUDIT_TEST_ARTIFACTS (default:
a folder under pytest's tmp path), one per page visited.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.explorer.explorer_helpers import BIG, BIG_DISPUTED, MARKUP, NAME_MARKUP, PUBLISHER, SMALL

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and CHROMEDRIVER) and not os.environ.get("CI"),
        reason="no chromium and chromedriver (apt-get install chromium chromium-driver); CI unset",
    ),
]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = os.environ.get("P2PAUDIT_TEST_ARTIFACTS")
    path = Path(folder) / "explorer" if folder else tmp_path_factory.mktemp("explorer-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM or "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER or "/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def open_page(browser, server, page: str, artifacts: Path, shot: str):
    """Load a page and wait until its script says it is ready; a screenshot of it; no error shown."""
    browser.get(server.url + page)
    return wait_ready(browser, artifacts, shot)


def wait_ready(browser, artifacts: Path, shot: str):
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + 20
    while browser.execute_script("return document.body && document.body.dataset.ready") is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"page {browser.current_url} never became ready")
        time.sleep(0.05)
    browser.save_screenshot(str(artifacts / f"{shot}.png"))
    assert browser.execute_script("return document.body.dataset.ready") == "1", browser.find_element(
        By.ID, "error"
    ).text
    assert browser.execute_script("return window.__pwned") is None
    return browser.find_element(By.TAG_NAME, "main")


def wait_for(browser, script: str, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not browser.execute_script(script):
        assert time.monotonic() < deadline, f"waited {seconds} s for: {script}"
        time.sleep(0.05)


def assert_inert(browser, main) -> None:
    """Planted markup is shown as text: no element of it exists, and nothing it carried ran."""
    from selenium.webdriver.common.by import By

    assert main.find_elements(By.TAG_NAME, "marquee") == []
    assert main.find_elements(By.TAG_NAME, "img") == []
    assert main.find_elements(By.TAG_NAME, "script") == []
    assert browser.execute_script("return window.__pwned") is None


def test_click_from_a_run_to_a_disputed_step_to_its_evidence(browser, server, artifacts):
    from selenium.webdriver.common.by import By

    main = open_page(browser, server, "index.html", artifacts, "01-runs")
    rows = main.find_elements(By.CSS_SELECTOR, "#runs tbody tr")
    assert len(rows) == 2
    assert "small " + MARKUP in main.text  # the label, as text
    publishers = [cell.text for cell in main.find_elements(By.CSS_SELECTOR, "#runs .publisher")]
    assert publishers == [PUBLISHER.public_key.hex()[:24] + "…", "unknown"]
    assert_inert(browser, main)
    main.find_element(By.LINK_TEXT, "small " + MARKUP).click()
    main = wait_ready(browser, artifacts, "02-small-run")
    assert "3 disputed" in main.find_element(By.ID, "totals").text
    wait_for(browser, "return document.body.dataset.disputes === '1'")
    assert "4 disputed claims" in main.find_element(By.ID, "run-disputes").text  # init, 3, 5, 7
    main.find_element(By.CSS_SELECTOR, "#dispute-links").find_element(By.LINK_TEXT, "step 3").click()
    main = wait_ready(browser, artifacts, "03-step-3")
    assert main.find_element(By.ID, "title").text == "Step 3"
    assert main.find_element(By.ID, "dispute-banner").text.startswith("Disputed: 2 outcomes from 3 keys")
    assert len(main.find_elements(By.CSS_SELECTOR, "#attestations tbody tr")) == 3
    assert MARKUP in main.find_element(By.ID, "attestations").text  # the hardware string, as text
    assert_inert(browser, main)
    evidence = main.find_element(By.ID, "evidence")
    assert len(evidence.find_elements(By.CSS_SELECTOR, ".outcome")) == 2
    raw = evidence.find_elements(By.CSS_SELECTOR, "a.download-raw")[1]
    assert raw.get_attribute("href").startswith(server.url + "api/v1/entries/")
    signed = browser.execute_async_script(
        "const done = arguments[1]; fetch(arguments[0]).then(r => r.arrayBuffer()).then(b => done(b.byteLength));",
        raw.get_attribute("href"),
    )
    assert signed > 300  # a v2 signed attestation
    assert "state" in main.find_element(By.ID, "attestations").text  # the mismatch's finding
    summary = main.find_element(By.ID, "diagnosis-summary").text
    assert summary.startswith("First departure: state, in the backward pass or the optimizer update")
    rows = [row.text for row in main.find_elements(By.CSS_SELECTOR, "#diagnosis-parts tbody tr")]
    assert [row.split(":")[0] for row in rows] == ["data", "loss", "state"] and "state: differ" in rows[2]
    assert "per-tensor digests" in main.find_element(By.ID, "diagnosis-missing").text


def test_coverage_of_a_100000_step_run_loads_fast_and_zooms_to_a_step(browser, server, artifacts):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    began = time.monotonic()
    main = open_page(browser, server, f"run.html?run={BIG.hex()}", artifacts, "04-big-run")
    loaded = time.monotonic() - began
    assert loaded < 10, f"the coverage page of 100,000 steps took {loaded:.2f} s"
    assert main.find_element(By.ID, "range").text.startswith("Steps 0–99999 of 100000 in 1000 columns")
    assert "4000 of 100000 steps checked" in main.find_element(By.ID, "totals").text
    canvas = main.find_element(By.ID, "strip")
    width = canvas.size["width"]

    def click_column(index: int, columns: int) -> None:
        offset = round((index + 0.5) * width / columns - width / 2)  # round: int() fell a column short at odd widths
        ActionChains(browser).move_to_element_with_offset(canvas, offset, 0).click().perform()

    browser.execute_script("document.body.dataset.ready = null")
    click_column(999, 1000)  # the last column: steps 99900..99999
    deadline = time.monotonic() + 10
    while "Steps 99900–99999" not in browser.find_element(By.ID, "range").text:
        assert time.monotonic() < deadline, browser.find_element(By.ID, "range").text
        time.sleep(0.05)
    browser.save_screenshot(str(artifacts / "05-big-run-zoomed.png"))
    assert len(main.find_elements(By.CSS_SELECTOR, "#step-table tbody tr")) == 100
    click_column(BIG_DISPUTED - 99_900, 100)
    main = wait_ready(browser, artifacts, "06-big-disputed-step")
    assert main.find_element(By.ID, "title").text == f"Step {BIG_DISPUTED}"
    assert "Disputed" in main.find_element(By.ID, "dispute-banner").text


def test_initial_state_ledger_node_and_disputes_pages(browser, server, artifacts, built):
    from selenium.webdriver.common.by import By

    main = open_page(browser, server, f"step.html?run={SMALL.hex()}&init=1", artifacts, "07-init")
    assert main.find_element(By.ID, "title").text == "Initial state"
    assert "Disputed" in main.find_element(By.ID, "dispute-banner").text
    assert "init" in main.find_element(By.ID, "attestations").text
    main = open_page(browser, server, "ledger.html", artifacts, "08-ledger")
    assert len(main.find_elements(By.CSS_SELECTOR, "#checkpoints tbody tr")) == 2
    assert built.witness.name in main.find_element(By.ID, "checkpoints").text
    assert NAME_MARKUP in main.find_element(By.ID, "split-views").text
    assert "consistent" in main.find_element(By.ID, "checkpoints").text
    assert_inert(browser, main)
    main.find_element(By.ID, "proof-index").send_keys("20")
    main.find_element(By.CSS_SELECTOR, "#proof-form button").click()
    deadline = time.monotonic() + 10
    while not browser.find_elements(By.ID, "proof-summary"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert "Entry 20 in the tree of size 26" in browser.find_element(By.ID, "proof-summary").text
    main = open_page(browser, server, "node.html", artifacts, "09-node")
    assert MARKUP in main.find_element(By.ID, "node").text  # a peer, a ban's reason, the stall task
    busy = main.find_element(By.ID, "busy")
    assert "step 4" in busy.text and busy.find_elements(By.CSS_SELECTOR, ".bar-fill")
    assert re.fullmatch(r"40\.0%: micro-batch 2/4, layer 3/8; 40:\d\d elapsed, (59:\d\d|1:00:00) left",
                        main.find_element(By.ID, "busy-progress").text)  # fmt: skip
    assert MARKUP in main.find_element(By.ID, "bans").text and "left)" in main.find_element(By.ID, "bans").text
    sync = [row.text for row in main.find_elements(By.CSS_SELECTOR, "#sync tbody tr")]
    assert len(sync) == 2 and "ok" in sync[0] and "backing-off" in sync[1] and MARKUP in sync[1]
    assert MARKUP in main.find_element(By.ID, "events").text
    assert_inert(browser, main)
    main = open_page(browser, server, "disputes.html", artifacts, "10-disputes")
    assert main.find_element(By.ID, "dispute-count").text == "5 disputed claims"
    assert len(main.find_elements(By.CSS_SELECTOR, "#disputes > li")) == 5


@pytest.fixture(scope="module")
def extreme_server(tmp_path_factory):
    from p2paudit.explorer.server import make_server, start_in_thread
    from tests.explorer.extreme_helpers import build_extreme_ledger

    made = make_server("127.0.0.1:0", build_extreme_ledger(tmp_path_factory.mktemp("extreme")))
    start_in_thread(made)
    yield made
    made.shutdown()
    made.server_close()


def test_every_page_renders_records_at_their_limits(browser, extreme_server, artifacts):
    """Times past JavaScript's Date and Python's datetime, NaN and infinite losses, the longest text fields,
    the last step of a 2^32-step run: each page loads whole and shows them as text."""
    from selenium.webdriver.common.by import By

    from tests.explorer.extreme_helpers import EXTREME, HARDWARE, LABEL, LAST_STEP

    run = EXTREME.hex()
    main = open_page(browser, extreme_server, "index.html", artifacts, "20-extreme-runs")
    assert "292278994-08-17 07:12:55.807 UTC" in main.find_element(By.ID, "runs").text
    link = main.find_element(By.CSS_SELECTOR, "#runs a.run-link")
    assert browser.execute_script("return arguments[0].textContent", link) == LABEL
    assert_inert(browser, main)
    main = open_page(browser, extreme_server, f"run.html?run={run}", artifacts, "21-extreme-run")
    assert main.find_element(By.ID, "range").text.startswith(f"Steps 0–{LAST_STEP} of {LAST_STEP + 1}")
    main = open_page(browser, extreme_server, f"step.html?run={run}&step={LAST_STEP}", artifacts, "22-extreme-step")
    table = main.find_element(By.ID, "attestations").text
    assert "292278994-08-17 07:12:55.806 UTC" in table and "1970-01-01 00:00:00 UTC" in table
    assert HARDWARE in table and "nan" in table
    assert_inert(browser, main)
    main = open_page(browser, extreme_server, f"step.html?run={run}&step=0", artifacts, "23-extreme-step-0")
    table = main.find_element(By.ID, "attestations").text
    assert "275760-09-13 00:00:00.001 UTC" in table and "10000-01-01 00:00:00 UTC" in table
    main = open_page(browser, extreme_server, f"step.html?run={run}&init=1", artifacts, "24-extreme-init")
    for page in ("disputes.html", "ledger.html", "node.html"):
        main = open_page(browser, extreme_server, page, artifacts, "25-extreme-" + page.split(".")[0])
        assert_inert(browser, main)
        if page == "ledger.html":  # a witness's cosignature at the largest timestamp; a peer's split view
            assert "292277026596-12-04 15:30:07 UTC" in main.find_element(By.ID, "checkpoints").text
            assert f"size {2**63 - 1}: 2 roots" in main.find_element(By.ID, "split-views").text


# Words of every table cell outside codes (hashes, keys, machine strings) that the layout broke across lines.
BROKEN_WORDS = """
const broken = [];
for (const cell of document.querySelectorAll("table.grid td, table.grid th")) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest("code, small, .machine, pre")) continue;
    const words = /\\S{2,}/g;
    let m;
    while ((m = words.exec(node.data))) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      if (new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size > 1) broken.push(m[0]);
    }
  }
}
return broken;
"""
RED, GREEN = "rgb(179, 21, 27)", "rgb(46, 139, 58)"


@pytest.fixture(scope="module")
def verdict_server(tmp_path_factory):
    from p2paudit.explorer.server import make_server, start_in_thread
    from tests.explorer.verdict_helpers import build_verdict_ledger

    made = make_server("127.0.0.1:0", build_verdict_ledger(tmp_path_factory.mktemp("verdicts")))
    start_in_thread(made)
    yield made
    made.shutdown()
    made.server_close()


def _border(browser, element_id: str) -> str:
    return browser.execute_script(f"return getComputedStyle(document.getElementById('{element_id}')).borderLeftColor")


def test_the_verdict_in_words_and_colours_that_agree(browser, verdict_server, artifacts):
    from selenium.webdriver.common.by import By

    from tests.explorer.verdict_helpers import LONE, MOSTLY, UPHELD, VERDICT_RUN

    run = VERDICT_RUN.hex()
    main = open_page(browser, verdict_server, f"step.html?run={run}&step={LONE}", artifacts, "30-lone-finding")
    first = main.find_element(By.CSS_SELECTOR, "#content > p")
    assert first.get_attribute("id") == "verdict-sentence" and "1 key reported a different state" in first.text
    banner = main.find_element(By.ID, "dispute-banner")
    assert not banner.text.startswith("Not disputed") and banner.text.startswith("A finding")
    assert _border(browser, "dispute-banner") == RED and _border(browser, "verdict-sentence") == RED
    main = open_page(browser, verdict_server, f"step.html?run={run}&step={MOSTLY}", artifacts, "31-mostly-upheld")
    assert main.find_element(By.ID, "verdict-sentence").text.startswith(
        "3 of 4 independent checks reproduced step 1 exactly; 1 key reported a different state"
    )
    assert main.find_element(By.ID, "dispute-banner").text.startswith("Disputed: 2 outcomes from 4 keys")
    assert _border(browser, "dispute-banner") not in (RED, GREEN)  # amber: neither faked nor clean
    assert main.find_element(By.CSS_SELECTOR, "p.explain[data-term=disputed]").text.startswith("Disputed: two or more")
    main = open_page(browser, verdict_server, f"step.html?run={run}&step={UPHELD}", artifacts, "32-upheld")
    assert _border(browser, "dispute-banner") == GREEN
    main = open_page(browser, verdict_server, f"run.html?run={run}", artifacts, "33-verdict-run")
    assert main.find_element(By.ID, "verdict-sentence").text.startswith("The publisher claims 10 training steps")
    assert "R, the redundancy" in main.find_element(By.ID, "run-glossary").text
    main = open_page(browser, verdict_server, "disputes.html", artifacts, "34-findings")
    assert main.find_element(By.ID, "dispute-count").text == "1 disputed claims"
    assert len(main.find_elements(By.CSS_SELECTOR, "#findings > li")) == 2


def test_jargon_explained_dates_shown_and_no_word_broken_in_a_cell(browser, server, artifacts):
    from selenium.webdriver.common.by import By

    browser.set_window_size(1000, 1000)
    try:
        main = open_page(browser, server, "ledger.html", artifacts, "35-ledger-glossary")
        for term in ("split view", "equivocation", "witness", "inclusion proof"):
            assert main.find_elements(By.CSS_SELECTOR, f'p.explain[data-term="{term}"]'), term
        recorded = main.find_elements(By.CSS_SELECTOR, "#checkpoints tbody tr td:nth-child(4)")
        assert recorded and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", c.text) for c in recorded)
        for page, shot in (("index.html", "36-runs-narrow"), (f"step.html?run={SMALL.hex()}&step=3", "37-step-narrow")):
            open_page(browser, server, page, artifacts, shot)
            assert browser.execute_script(BROKEN_WORDS) == [], page
    finally:
        browser.set_window_size(1400, 1000)
