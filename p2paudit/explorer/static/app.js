// p2paudit explorer: shared helpers and the small pages (runs, disputes, node).
// Rule: nothing from the API is ever parsed as HTML. Text goes in with textContent (createTextNode),
// links only ever point at this origin's pages and API with hex ids and numbers in them.
"use strict";

const API = "/api/v1";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (name === "class") node.className = value;
    else if (name === "href") node.setAttribute("href", localHref(value));
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function localHref(value) {
  const text = String(value);
  // Only relative links to our own pages and API: never a scheme (javascript:, data:) or another host.
  if (!/^(\/|[a-z]+\.html)/.test(text) || text.startsWith("//")) throw new Error("refused link " + text);
  return text;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

async function getJSON(path) {
  const response = await fetch(API + path, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || "HTTP " + response.status);
  return body;
}

function query() {
  return new URLSearchParams(window.location.search);
}

function short(hex, n) {
  if (!hex) return "-";
  const text = String(hex).replace(/^sha256:/, "");
  return text.length > (n || 16) ? text.slice(0, n || 16) + "…" : text;
}

// A time as a date: the server's text where it gives one (times.py: exact for every time a record can sign);
// otherwise converted here, and a number Date cannot hold (beyond ±8.64e15 ms) is shown as the number.
function when(ms, text) {
  if (typeof text === "string") return text;
  if (ms === null || ms === undefined) return "-";
  const date = new Date(ms);
  if (!Number.isFinite(date.getTime())) return `${ms} ms after 1970 (not a date this browser can show)`;
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

// A date in a table cell: never broken at its hyphens.
function dateEl(ms, text) {
  return el("span", { class: "time" }, when(ms, text));
}

// One line that says what a word of the trade means, beside where it is used (GLOSSARY's terms only).
const GLOSSARY = {
  "split view": "A split view: the log's key signed two different trees of the same size, so it showed two readers two different histories; an honest log never does.",
  equivocation: "An equivocation: one key signed two different results for the same claim; an honest verifier signs one, so the key is wrong at least once.",
  disputed: "Disputed: two or more keys checked the same claim and signed different results, so at least one of them is wrong.",
  finding: "A finding: a key replayed the claim and got a different result (a mismatch), whether or not any other key checked it.",
  witness: "A witness: another node that checked this log's checkpoint extends every one it saw before, and signed it (a cosignature).",
  checkpoint: "A checkpoint: the log's key signing the size and root hash of its tree; a later one must contain every earlier entry (consistent).",
  "inclusion proof": "An inclusion proof: the few hashes that show an entry is in the signed tree, checkable without the rest of the log.",
  redundancy: "R, the redundancy: how many different keys should check each step; the network aims for it (the default of init and daemon).",
  ulp: "An ulp (unit in the last place): the gap between two neighbouring floating-point numbers; 1 ulp apart is the smallest difference there is.",
};

function explain(term) {
  return el("p", { class: "explain", "data-term": term }, GLOSSARY[term]);
}

// A time the ledger recorded on this node's clock (ISO 8601 in UTC) in the pages' form.
function isoText(text) {
  return typeof text === "string" ? text.replace("T", " ").replace(/(\+00:00|Z)$/, " UTC") : "-";
}

function pct(part, whole) {
  return whole ? ((100 * part) / whole).toFixed(1) + "%" : "-";
}

function table(id, headers, rows) {
  const head = el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h))));
  const body = el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c)))));
  return el("table", { id: id, class: "grid" }, head, body);
}

function runLink(runId, label) {
  return el("a", { href: "run.html?run=" + runId, class: "run-link" }, label || short(runId));
}

function stepLink(runId, subject, step, text) {
  const href = subject === "init" ? "step.html?run=" + runId + "&init=1" : "step.html?run=" + runId + "&step=" + step;
  return el("a", { href: href, class: "step-link" }, text || (subject === "init" ? "initial state" : "step " + step));
}

function bar(fraction) {
  const fill = el("span", { class: "bar-fill" });
  fill.style.width = Math.max(0, Math.min(100, 100 * fraction)).toFixed(1) + "%";
  return el("span", { class: "bar" }, fill);
}

function showError(error) {
  const box = document.getElementById("error");
  box.hidden = false;
  box.textContent = "Error: " + (error && error.message ? error.message : String(error));
}

function navigation() {
  const links = [
    ["index.html", "Runs"],
    ["disputes.html", "Disputes"],
    ["ledger.html", "Ledger"],
    ["node.html", "Node"],
  ];
  const nav = document.getElementById("nav");
  clear(nav).appendChild(el("span", { class: "brand" }, "p2paudit explorer"));
  for (const [href, text] of links) nav.appendChild(el("a", { href: href }, text));
}

// -- runs (index.html) ----------------------------------------------------------------------------

async function pageRuns() {
  const data = await getJSON("/runs");
  const head = data.ledger;
  document.getElementById("ledger-summary").textContent =
    `Ledger ${head.origin}: ${head.size} entries, ${head.runs} runs, ${head.keys} verifier keys, root ${short(head.root)}`;
  const rows = data.runs.map((run) => {
    const t = run.totals;
    return [
      el("span", {}, runLink(run.run_id, run.label || short(run.run_id)), el("br"), el("code", {}, short(run.run_id, 24))),
      publisherCell(run),
      String(run.steps),
      el("span", {}, bar(t.checked_steps / run.steps), " " + pct(t.checked_steps, run.steps)),
      String(t.attestations),
      el("span", { class: t.mismatch_steps ? "bad" : "" }, String(t.mismatch_steps)),
      el("span", { class: t.disputed_steps ? "bad" : "" }, String(t.disputed_steps)),
      initCell(run),
      run.last_leaf === null ? "-" : el("span", {}, dateEl(run.last_time_ms, run.last_time), el("br"), "entry " + run.last_leaf),
    ];
  });
  const headers = ["Run", "Publisher key", "Steps", "Checked", "Attestations", "Steps with a finding", "Disputed steps", "Initial state", "Last activity"];
  const content = clear(document.getElementById("content"));
  content.appendChild(table("runs", headers, rows));
  content.appendChild(explain("finding"));
  content.appendChild(explain("disputed"));
}

function publisherCell(run) {
  if (!run.publisher) return el("span", { class: "publisher note" }, "unknown");
  return el("span", { class: "publisher" }, run.publishers.map((key, n) => el("span", {}, n ? el("br") : null, el("code", { title: key }, short(key, 24)))));
}

function initCell(run) {
  const init = run.init;
  if (!init.attestations) return "not attested";
  const text = `${init.match} match, ${init.mismatch} mismatch, ${init.error} error`;
  return el("span", { class: init.mismatch ? "bad" : "" }, stepLink(run.run_id, "init", 0, text));
}

// -- disputes (disputes.html) ---------------------------------------------------------------------

function disputeItem(item) {
  const sides = item.sides.map((side) =>
    el("li", { class: "side" }, `${side.verdict} (observed ${short(side.observed_output_digest)}) signed by `,
      side.signers.map((s, n) => el("span", {}, n ? ", " : "", el("code", {}, short(s.verifier)), ` (entry ${s.index})`)))
  );
  return el("li", { class: "dispute" }, runLink(item.run_id), " ", stepLink(item.run_id, item.subject, item.step),
    `: ${item.keys} keys, ${item.sides.length} outcomes`, el("ul", {}, sides));
}

async function pageDisputes() {
  const offset = Number(query().get("offset") || 0);
  const run = query().get("run");
  const data = await getJSON(`/disputes?offset=${offset}&limit=100` + (run ? "&run=" + encodeURIComponent(run) : ""));
  const content = clear(document.getElementById("content"));
  const disputed = data.disputes.filter((d) => d.disputed), alone = data.disputes.filter((d) => !d.disputed);
  content.appendChild(el("p", { id: "dispute-count" }, `${data.disputed_total} disputed claims`));
  content.appendChild(explain("disputed"));
  content.appendChild(el("ul", { id: "disputes" }, disputed.map(disputeItem)));
  content.appendChild(el("p", { id: "finding-count" }, `${data.total - data.disputed_total} more claims with a finding no key disputes (every key that checked reported a difference, often one key alone)`));
  content.appendChild(explain("finding"));
  content.appendChild(el("ul", { id: "findings" }, alone.map(disputeItem)));
  if (offset + data.limit < data.total) content.appendChild(el("a", { href: `disputes.html?offset=${offset + data.limit}` }, "next page"));
}

// -- node (node.html) -----------------------------------------------------------------------------

function listOrText(value) {
  if (value === undefined || value === null) return "not reported by this daemon";
  if (Array.isArray(value)) {
    if (!value.length) return "none";
    return el("ul", {}, value.map((item) => el("li", {}, typeof item === "object" ? JSON.stringify(item) : String(item))));
  }
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "?";
  const whole = Math.round(seconds);
  const h = Math.floor(whole / 3600), m = Math.floor((whole % 3600) / 60), sec = whole % 60;
  const two = (n) => String(n).padStart(2, "0");
  return h ? `${h}:${two(m)}:${two(sec)}` : `${m}:${two(sec)}`;
}

function unixTime(seconds) {
  return typeof seconds === "number" ? when(seconds * 1000) : "-";
}

function progressWhere(p) {
  const c = p.counts || {};
  if (p.phase === "update") return `update ${c.params_done}/${c.params} tensors`;
  const current = Math.min((c.micro_batches_done || 0) + 1, c.micro_batches || 0);
  return `micro-batch ${current}/${c.micro_batches}, layer ${c.layers_done}/${c.layers}`;
}

function busyCell(busy, progress) {
  if (!busy) return "idle";
  const what = el("span", {}, runLink(busy.run_id), " ", stepLink(busy.run_id, "step", busy.step));
  if (!progress) return el("span", { id: "busy" }, what, busy.progress === undefined ? " (progress not reported by this daemon)" : " (starting)");
  const text = `${(100 * progress.fraction).toFixed(1)}%: ${progressWhere(progress)}; ${duration(progress.elapsed)} elapsed, ${duration(progress.eta_seconds)} left`;
  return el("span", { id: "busy" }, what, el("br"), bar(progress.fraction), " ", el("span", { id: "busy-progress" }, text));
}

function bansTable(bans, now) {
  if (bans === undefined || bans === null) return "not reported by this daemon";
  if (!bans.length) return "none";
  const rows = bans.map((b) => [el("code", {}, String(b.peer)), String(b.reason), typeof b.until === "number" ? `${unixTime(b.until)} (${duration(Math.max(0, b.until - now))} left)` : "-"]);
  return table("bans", ["Peer", "Why", "Until"], rows);
}

function syncTable(sync) {
  if (sync === undefined || sync === null) return "not reported by this daemon";
  if (!sync.length) return "no peer known";
  const rows = sync.map((p) => [el("code", {}, String(p.peer)), el("span", { class: p.state === "backing-off" ? "bad" : p.state === "ok" ? "good" : "" }, String(p.state)),
    unixTime(p.last_ok), unixTime(p.next_try), p.error ? String(p.error) : "-"]);
  return table("sync", ["Peer", "State", "Last ok", "Next try", "Last error"], rows);
}

async function pageNode() {
  const data = await getJSON("/node");
  const content = clear(document.getElementById("content"));
  if (!data.available) {
    content.appendChild(el("p", { id: "node-unavailable" }, "No node status: " + data.reason));
    return;
  }
  const s = data.status;
  const now = Date.now() / 1000;
  const rows = [
    ["Peer id", el("code", {}, s.peer_id)],
    ["Public key", el("code", {}, s.public_key)],
    ["State", `${data.running ? "running" : "not running"}, status written ${data.age_seconds} s ago`],
    ["Listening on", listOrText(s.listen)],
    ["Replaying now", busyCell(s.busy, data.progress)],
    ["Ledger", `${s.ledger.path}, ${s.ledger.size} entries`],
    ["Audited / received", `${s.audited} / ${s.received}`],
    ["Peers", listOrText(s.peers)],
    ["Bans", bansTable(s.bans, now)],
    ["Sync", syncTable(s.sync)],
    ["Health", listOrText(s.health)],
    ["Equivocating keys", String(s.equivocations)],
  ];
  content.appendChild(table("node", ["", ""], rows));
  const findings = (r) => (r.findings === undefined ? "not reported by this daemon" : el("span", { class: r.findings ? "bad" : "" }, String(r.findings)));
  const runs = (s.runs || []).map((r) => [runLink(r.run_id, r.label), `${r.checked_once}/${r.steps}`, `${r.checked_r}/${r.steps} (${r.redundancy}x)`, findings(r), String(r.disputes)]);
  content.appendChild(el("h2", {}, "Runs audited"));
  content.appendChild(table("node-runs", ["Run", "Checked", "Checked R times", "Claims with a finding", "Disputed"], runs));
  content.appendChild(explain("finding"));
  content.appendChild(el("h2", {}, "Recent events"));
  content.appendChild(el("ul", { id: "events" }, (s.events || []).map((line) => el("li", {}, String(line)))));
  // A running daemon's page follows it: every 2 s while it replays a step, every 5 s otherwise.
  if (data.running && !window.nodeRefresh) window.nodeRefresh = setTimeout(() => { window.nodeRefresh = null; pageNode().catch(showError); }, s.busy ? 2000 : 5000);
}

const PAGES = { runs: pageRuns, disputes: pageDisputes, node: pageNode };

document.addEventListener("DOMContentLoaded", () => {
  navigation();
  const page = PAGES[document.body.dataset.page] || window.explorerPage;
  if (page) page().then(() => (document.body.dataset.ready = "1"), (e) => { showError(e); document.body.dataset.ready = "error"; });
});
