// The ledger page: the log's head, its signed checkpoints with witnesses' cosignatures and consistency,
// witnessed peers' checkpoints, split views, equivocations, and the inclusion proof of any entry.
"use strict";

function consistency(value) {
  if (value === null) return "first";
  return el("span", { class: value ? "good" : "bad" }, value ? "consistent" : "NOT consistent");
}

function checkpointRows(items) {
  return items.map((cp) => [
    String(cp.size),
    el("code", {}, short(cp.root, 24)),
    cp.signer,
    el("span", { class: "time" }, isoText(cp.recorded_at)),
    cp.cosignatures.length ? el("ul", {}, cp.cosignatures.map((c) => el("li", {}, c.cosigner, " at ", dateEl(c.timestamp * 1000, c.time)))) : "none",
    consistency(cp.consistent_with_previous),
  ]);
}

function equivocationList(data) {
  const keys = data.keys.map((e) => el("li", {}, "Key ", el("code", {}, short(e.verifier)), " signed ", String(e.evidence.length),
    " results for ", stepLink(e.run_id, e.subject, e.step), " of ", runLink(e.run_id), ": entries ",
    e.evidence.map((item) => item.index).join(", ")));
  const heads = data.tree_heads.map((v) => el("li", {}, `Log ${v.origin} (key ${v.vkey.split("+")[0]}) signed ${v.roots.length} roots for size ${v.size_text || v.size}`));
  return el("ul", { id: "equivocations" }, keys, heads);
}

async function showProof(event) {
  event.preventDefault();
  const index = document.getElementById("proof-index").value.trim();
  const out = clear(document.getElementById("proof-out"));
  if (!/^[0-9]+$/.test(index)) throw new Error("entry index must be a number");
  const proof = await getJSON(`/entries/${index}/proof`);
  const signed = proof.checkpoint ? `the checkpoint signed by ${proof.vkey.split("+")[0]}` : "the current head (no signed checkpoint covers it yet)";
  out.appendChild(el("p", { id: "proof-summary" }, `Entry ${proof.index} in the tree of size ${proof.size} (${signed}), ${proof.proof.length} hashes. `,
    el("a", { href: `${API}/entries/${index}/proof?download=1`, download: `entry-${index}-proof.json`, id: "proof-download" }, "Download"),
    " and check offline: ", el("code", {}, `p2paudit ledger check-proof entry-${index}-proof.json`)));
  out.appendChild(el("pre", { class: "signed" }, JSON.stringify(proof, null, 1)));
}

window.explorerPage = async function pageLedger() {
  const [data, equivocations] = await Promise.all([getJSON("/checkpoints"), getJSON("/equivocations")]);
  const head = data.head;
  const content = clear(document.getElementById("content"));
  content.appendChild(el("p", { id: "head" }, `Log ${head.origin}: ${head.size} entries, root ${head.root}`));
  content.appendChild(el("h2", {}, "Inclusion proof of an entry"));
  content.appendChild(explain("inclusion proof"));
  content.appendChild(el("form", { id: "proof-form" }, el("label", {}, "Entry index ", el("input", { id: "proof-index", type: "text", size: 10 })), el("button", { type: "submit" }, "Prove")));
  content.appendChild(el("div", { id: "proof-out" }));
  document.getElementById("proof-form").addEventListener("submit", (e) => showProof(e).catch(showError));
  content.appendChild(el("h2", {}, `Signed checkpoints (${data.checkpoints.length} newest)`));
  content.appendChild(explain("checkpoint"));
  content.appendChild(explain("witness"));
  content.appendChild(table("checkpoints", ["Size", "Root", "Signer", "Recorded", "Cosigned by witnesses", "With the one before"], checkpointRows(data.checkpoints)));
  content.appendChild(el("h2", {}, "Peers' checkpoints this node witnessed"));
  const peers = data.peer_checkpoints.map((cp) => [cp.origin, cp.size_text || String(cp.size), el("code", {}, short(cp.root, 24)), cp.status, isoText(cp.recorded_at)]);
  content.appendChild(table("peer-checkpoints", ["Origin", "Size", "Root", "Status", "Recorded"], peers));
  content.appendChild(el("h2", {}, "Split views (two roots signed for one size)"));
  const views = data.split_views.map((v) => el("li", {}, `${v.origin} size ${v.size_text || v.size}: ${v.roots.length} roots`, el("pre", { class: "signed" }, v.notes.join("\n"))));
  content.appendChild(explain("split view"));
  content.appendChild(el("ul", { id: "split-views" }, views.length ? views : el("li", {}, "none")));
  content.appendChild(el("h2", {}, "Equivocations"));
  content.appendChild(explain("equivocation"));
  content.appendChild(equivocationList(equivocations));
};
