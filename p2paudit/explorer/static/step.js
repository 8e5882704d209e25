// The step page: one claim (a step, or the initial state) with every attestation, what each found,
// the outcomes side by side when it is disputed, and the signed evidence to download and check.
"use strict";

function differenceList(att) {
  if (!att.differences.length) return att.verdict === "error" ? "nothing observed (error)" : "every observed value equals its claim";
  return el("ul", { class: "differences" }, att.differences.map((d) => {
    const extra = d.finding === "loss" ? ` (${d.claimed_value} vs ${d.observed_value}, ${d.ulps} ulps apart)` : "";
    return el("li", {}, el("b", {}, d.finding), ": claimed ", el("code", {}, short(d.claimed, 24)), ", observed ", el("code", {}, short(d.observed, 24)), extra);
  }));
}

function evidenceLinks(att) {
  return el("span", { class: "evidence-links" },
    el("a", { href: `${API}/entries/${att.index}/raw`, download: `entry-${att.index}.msgpack`, class: "download-raw" }, "signed bytes"),
    " · ",
    el("a", { href: `${API}/entries/${att.index}/proof?download=1`, download: `entry-${att.index}-proof.json`, class: "download-proof" }, "inclusion proof"));
}

function attestationRow(att) {
  return [
    String(att.index),
    el("span", {}, el("code", { class: "verifier" }, short(att.verifier)), el("br"), el("small", { class: "peer-id" }, att.peer_id)),
    el("span", { class: "verdict " + att.verdict }, att.verdict),
    att.findings.length ? att.findings.join(", ") : "-",
    differenceList(att),
    el("span", { class: "machine" }, `${att.backend} on ${att.hardware || "?"}`, el("br"), el("small", {}, `${att.engine_version}, arithmetic v${att.arithmetic_version}`)),
    dateEl(att.time_ms, att.time),
    evidenceLinks(att),
  ];
}

function claimTable(data) {
  const rows = data.claims.map((c) => [
    el("code", {}, short(c.input_digest, 24)),
    el("code", {}, short(c.claimed_data_digest || c.data_digest, 24)),
    el("code", {}, short(c.claimed_output_digest, 24)),
    c.claimed_loss === null || c.claimed_loss === undefined ? "-" : String(c.claimed_loss),
    String(c.attestations),
  ]);
  return table("claims", ["Input state", "Data", "Output state", "Loss", "Attestations"], rows);
}

function evidenceSection(data) {
  const byIndex = new Map(data.attestations.map((a) => [a.index, a]));
  return el("div", { id: "evidence" }, data.outcomes.map((outcome, n) => {
    const first = byIndex.get(outcome.signers[0].index);
    return el("div", { class: "outcome" },
      el("h3", {}, `Outcome ${n + 1}: ${outcome.verdict}, observed ${short(outcome.observed_output_digest, 24)}`),
      el("p", {}, `Signed by ${outcome.signers.length} key(s): `, outcome.signers.map((s, i) => el("span", {}, i ? ", " : "", el("code", {}, short(s.verifier)), ` (entry ${s.index})`))),
      el("p", {}, "Evidence (entry ", String(first.index), ", base64 of the signed bytes, checkable with any msgpack and Ed25519 library): ", evidenceLinks(first)),
      el("pre", { class: "signed" }, first.signed_attestation));
  }));
}

function diagnosisCell(part, value, n) {
  if (part.part === "counter") return n === null ? "-" : "named in the findings";
  if (value === null || value === undefined) return "not observed";
  if (part.part !== "loss") return el("code", { class: value === part.claimed ? "" : "bad" }, short(value, 24));
  const shown = n === null ? part.claimed_value : part.observed_values[n];
  const ulps = n === null ? "" : part.ulps_from_claim[n] ? ` (${part.ulps_from_claim[n]} ulps from the claim)` : " (equal)";
  return el("span", { class: value === part.claimed ? "" : "bad" }, String(shown), ulps);
}

function bannerText(data) {
  const keys = new Set(data.attestations.map((a) => a.verifier)).size;
  const v = data.verdict;
  if (data.disputed) return `Disputed: ${data.outcomes.length} outcomes from ${keys} keys (disputed: keys that checked this claim signed different results)`;
  if (v.mismatch_keys) return `A finding, not disputed: every key that checked this claim (${v.mismatch_keys}) reported a result other than the claim`;
  if (v.match_keys) return `Not disputed: every key signed the same outcome, the claimed one`;
  return data.attestations.length ? "Not checked: every attestation of this claim is an error (the key could not replay it)" : "No attestation of this claim yet";
}

function diagnosisSection(d, tone) {
  const headers = ["Part", "Claimed", ...d.sides.map((s) => `Outcome ${s.outcome}: ${s.verdict} (${s.keys} key${s.keys === 1 ? "" : "s"})`)];
  const rows = d.parts.map((part) => [
    el("span", { class: part.agree ? "good" : "bad" }, part.part + (part.agree ? ": agree" : ": differ")),
    diagnosisCell(part, part.claimed, null),
    ...part.observed.map((value, n) => diagnosisCell(part, value, n)),
  ]);
  const loss = d.parts.find((p) => p.part === "loss");
  const first = d.first_departure
    ? `First departure: ${d.first_departure}, in ${d.stage}.`
    : "The outcomes and the claim agree on every value the records observe.";
  return el("div", { id: "diagnosis" },
    el("p", { id: "diagnosis-summary", class: "banner " + tone }, first,
      loss && loss.max_ulps_between_outcomes ? ` The outcomes' losses are up to ${loss.max_ulps_between_outcomes} ulps apart.` : ""),
    table("diagnosis-parts", headers, rows),
    el("p", { id: "diagnosis-missing", class: "note" }, "Not in the ledger: " + d.missing + "."));
}

window.explorerPage = async function pageStep() {
  const params = query();
  const runId = params.get("run");
  if (!runId || !/^[0-9a-f]{64}$/i.test(runId)) throw new Error("no run given: step.html?run=<64 hex digits>&step=N");
  const init = params.get("init") === "1";
  const step = Number(params.get("step") || 0);
  const data = await getJSON(init ? `/runs/${runId}/init` : `/runs/${runId}/steps/${step}`);
  document.getElementById("title").textContent = init ? "Initial state" : `Step ${data.step}`;
  const content = clear(document.getElementById("content"));
  content.appendChild(el("p", {}, "Run ", runLink(runId, data.label || short(runId)), ` (${data.steps} steps)`,
    init ? ": state 0 rebuilt from the recipe (config, seed, arithmetic version)" : `: state ${data.step} → state ${data.step + 1}`));
  // The sentence first (what was claimed, who checked, what they found, what follows), then the banner; both
  // coloured by the verdict's tone (verdicts.py), so a colour never says more, or less, than the words.
  const verdict = data.verdict;
  content.insertBefore(el("p", { id: "verdict-sentence", class: "sentence " + verdict.tone }, verdict.sentence), content.firstChild);
  content.appendChild(el("p", { id: "dispute-banner", class: "banner " + verdict.tone }, bannerText(data)));
  if (data.equivocating_keys.length) content.appendChild(el("p", { id: "equivocation-banner", class: "banner failed" }, "Equivocation: these keys signed two different results for this one claim (a key that contradicts itself is wrong at least once): ", data.equivocating_keys.map((k) => el("code", {}, short(k) + " "))));
  if (data.disputed) content.appendChild(explain("disputed"));
  else if (data.verdict.mismatch_keys) content.appendChild(explain("finding"));
  if (data.equivocating_keys.length) content.appendChild(explain("equivocation"));
  if (data.attestations.some((a) => a.differences.some((d) => d.finding === "loss"))) content.appendChild(explain("ulp"));
  if (data.diagnosis) {
    content.appendChild(el("h2", {}, "Diagnosis from the evidence"));
    content.appendChild(diagnosisSection(data.diagnosis, data.verdict.tone));
  }
  content.appendChild(el("h2", {}, "Claimed"));
  content.appendChild(claimTable(data));
  content.appendChild(el("h2", {}, `Attestations (${data.attestations.length})`));
  const headers = ["Entry", "Verifier", "Verdict", "Findings", "What differs", "Backend and hardware", "Signed at", "Evidence"];
  content.appendChild(table("attestations", headers, data.attestations.map(attestationRow)));
  content.appendChild(el("h2", {}, "Outcomes and evidence"));
  content.appendChild(evidenceSection(data));
  content.appendChild(el("p", { class: "note" }, "Check a downloaded proof offline with ", el("code", {}, "p2paudit ledger check-proof FILE"), "."));
};
