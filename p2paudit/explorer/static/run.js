// The run page: a dense coverage strip over any number of steps (one bucket per column), zoom by clicking,
// filters by redundancy and trusted keys, the range's totals, and the run's disputed steps.
"use strict";

const STRIP_BUCKETS = 1000;
const COLORS = { unchecked: "#d9d9d9", under: "#9ad19a", covered: "#2e8b3a", mismatch: "#d62728", disputed: "#7b1fa2" };
let strip = null;

function coveragePath(runId, params) {
  const q = new URLSearchParams({ buckets: String(STRIP_BUCKETS) });
  for (const name of ["from", "to", "min", "trusted"]) if (params.get(name)) q.set(name, params.get(name));
  return `/runs/${runId}/coverage?${q.toString()}`;
}

function drawStrip(canvas, data) {
  const ctx = canvas.getContext("2d");
  const n = data.buckets.length;
  const width = canvas.width / n;
  const height = canvas.height - 10;
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  data.buckets.forEach((b, i) => {
    const x = i * width;
    const w = Math.max(1, width);
    const parts = [["unchecked", b.unchecked_steps], ["under", b.checked_steps - b.covered_steps], ["covered", b.covered_steps]];
    let y = 0;
    for (const [name, count] of parts) {
      const h = (height * count) / b.steps;
      ctx.fillStyle = COLORS[name];
      ctx.fillRect(x, y, w, h);
      y += h;
    }
    if (b.mismatch_steps || b.disputed_steps) {
      ctx.fillStyle = b.disputed_steps ? COLORS.disputed : COLORS.mismatch;
      ctx.fillRect(x - 1, height, Math.max(3, w), 10);  // at least 3 px: one disputed step in 100,000 stays visible
    }
  });
}

function bucketAt(canvas, event) {
  const rect = canvas.getBoundingClientRect();
  const i = Math.floor(((event.clientX - rect.left) / rect.width) * strip.buckets.length);
  return strip.buckets[Math.max(0, Math.min(strip.buckets.length - 1, i))];
}

function describe(b) {
  const range = b.steps === 1 ? `step ${b.start}` : `steps ${b.start}–${b.stop - 1} (${b.steps} steps)`;
  return `${range}: ${b.checked_steps} checked, ${b.covered_steps} checked ≥ ${strip.min}×, ${b.unchecked_steps} unchecked; ` +
    `${b.checks} checks: ${b.matches} matches, ${b.mismatches} mismatches, ${b.errors} errors; ` +
    `${b.mismatch_steps} steps with a mismatch, ${b.disputed_steps} disputed`;
}

function setParams(changes) {
  const params = query();
  for (const [name, value] of Object.entries(changes)) {
    if (value === null || value === "") params.delete(name);
    else params.set(name, String(value));
  }
  history.pushState(null, "", "run.html?" + params.toString());
  return loadCoverage();
}

function stepTable(runId, data) {
  if (data.buckets.some((b) => b.steps !== 1)) return el("p", { id: "step-table-hint" }, "Zoom in to 1,000 steps or fewer to list them one by one.");
  const rows = data.buckets.map((b) => [
    stepLink(runId, "step", b.start),
    String(b.checks), String(b.matches), String(b.mismatches), String(b.errors),
    b.disputed_steps ? el("span", { class: "bad" }, "disputed") : b.mismatch_steps ? el("span", { class: "bad" }, "mismatch") : b.checked_steps ? "checked" : "unchecked",
  ]);
  return table("step-table", ["Step", "Checks", "Matches", "Mismatches", "Errors", "State"], rows);
}

async function loadCoverage() {
  const params = query();
  const runId = params.get("run");
  const data = await getJSON(coveragePath(runId, params));
  strip = data;
  const t = data.totals;
  const filter = data.trusted_only ? `${data.trusted_keys} trusted keys known to the ledger` : "all keys (untrusted: keys are free to make)";
  document.getElementById("range").textContent =
    `Steps ${data.from}–${data.to - 1} of ${data.steps} in ${data.bucket_count} columns (${data.steps_per_bucket.toFixed(1)} steps each); counting ${filter}; R = ${data.min}; as of ledger entry ${data.ledger_size}`;
  document.getElementById("totals").textContent =
    `${t.checked_steps} of ${t.steps} steps checked (${pct(t.checked_steps, t.steps)}), ${t.covered_steps} checked by ≥ ${data.min} keys, ` +
    `${t.unchecked_steps} unchecked; ${t.checks} checks: ${t.matches} matches, ${t.mismatches} mismatches, ${t.errors} errors; ` +
    `${t.mismatch_steps} steps with a mismatch, ${t.disputed_steps} disputed`;
  drawStrip(document.getElementById("strip"), data);
  clear(document.getElementById("steps-in-view")).appendChild(stepTable(runId, data));
  for (const name of ["from", "to", "min", "trusted"]) document.getElementById("f-" + name).value = params.get(name) || "";
  const glossary = clear(document.getElementById("run-glossary"));
  for (const term of ["redundancy", "finding", "disputed"]) glossary.appendChild(explain(term));
}

async function loadRunSummary(runId) {
  const run = await getJSON(`/runs/${runId}`);
  document.getElementById("title").textContent = `Run ${run.label || short(run.run_id)}`;
  document.getElementById("run-id").textContent = run.run_id;
  const sentence = document.getElementById("verdict-sentence");
  sentence.textContent = run.verdict.sentence;
  sentence.className = "sentence " + run.verdict.tone;
  const init = run.init;
  const initText = init.attestations ? `${init.match} match, ${init.mismatch} mismatch, ${init.error} error` : "not attested yet";
  clear(document.getElementById("init")).appendChild(el("span", { class: init.mismatch ? "bad" : "" }, "Initial state: ", stepLink(runId, "init", 0, initText)));
}

// The run's disputed claims: a pass of their own over the index, so they do not hold back the strip.
async function loadRunDisputes(runId) {
  const disputes = await getJSON(`/disputes?run=${runId}&limit=50`);
  const list = clear(document.getElementById("run-disputes"));
  const item = (d) => el("li", {}, stepLink(runId, d.subject, d.step), `: ${d.keys} keys, ${d.sides.length} outcomes`);
  list.appendChild(el("p", {}, `${disputes.disputed_total} disputed claims`));
  list.appendChild(el("ul", { id: "dispute-links" }, disputes.disputes.filter((d) => d.disputed).map(item)));
  list.appendChild(el("p", { id: "run-finding-count" }, `${disputes.total - disputes.disputed_total} more claims with a finding no key disputes`));
  list.appendChild(el("ul", { id: "finding-links" }, disputes.disputes.filter((d) => !d.disputed).map(item)));
}

function wireControls(runId) {
  const canvas = document.getElementById("strip");
  canvas.addEventListener("mousemove", (event) => { if (strip) document.getElementById("bucket-info").textContent = describe(bucketAt(canvas, event)); });
  canvas.addEventListener("click", (event) => {
    const b = bucketAt(canvas, event);
    if (b.steps === 1) window.location.href = localHref(`step.html?run=${runId}&step=${b.start}`);
    else setParams({ from: b.start, to: b.stop }).catch(showError);
  });
  document.getElementById("filters").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = (name) => document.getElementById("f-" + name).value.trim();
    setParams({ from: value("from"), to: value("to"), min: value("min"), trusted: value("trusted") }).catch(showError);
  });
  document.getElementById("zoom-out").addEventListener("click", () => {
    const width = strip.to - strip.from;
    const from = Math.max(0, strip.from - width);
    setParams({ from: from, to: Math.min(strip.steps, strip.to + width) }).catch(showError);
  });
  document.getElementById("reset").addEventListener("click", () => setParams({ from: null, to: null }).catch(showError));
  window.addEventListener("popstate", () => loadCoverage().catch(showError));
}

window.explorerPage = async function pageRun() {
  const runId = query().get("run");
  if (!runId || !/^[0-9a-f]{64}$/i.test(runId)) throw new Error("no run given: run.html?run=<64 hex digits>");
  wireControls(runId);
  await Promise.all([loadRunSummary(runId), loadCoverage()]);
  // After the strip: on a cold server the two passes over the index would otherwise share the CPU.
  loadRunDisputes(runId).then(() => (document.body.dataset.disputes = "1"), showError);
};
