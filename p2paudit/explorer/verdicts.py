"""What a claim's or a run's attestations add up to, in one plain sentence and one tone the page colours by.

A step page and a run page open with a sentence a reader outside the project can follow: what was
claimed, who checked it, what they found, what follows. The tone says which colour agrees with it:

    none    nobody checked it (or every check was an error): grey
    upheld  every key that checked it reproduced it exactly: green
    split   keys disagree, most (or half) of them reproduced it: amber, never green and never red
    failed  a key reported a difference and fewer than half reproduced it (a lone key's mismatch
            included): red

Keys are counted, not attestations: one key's many signatures are one check. A key counts for every
outcome it signed, so a key that signed two results (an equivocation) is on both sides.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from p2paudit.explorer.runs import RunSummary

# What a mismatch's finding means, in words
FOUND = {
    "init": "a different initial state",
    "counter": "a wrong step counter in the input state",
    "data": "a different batch of data",
    "loss": "a different loss",
    "state": "a different state",
}


Tone = Literal["none", "upheld", "split", "failed"]


class RunVerdict(TypedDict):
    tone: Tone
    sentence: str


class KeyCounts(TypedDict):
    """Distinct keys among a claim's attestations: all, with a result (match or mismatch), and by verdict."""

    keys: int
    checked_keys: int
    match_keys: int
    mismatch_keys: int
    error_keys: int


class ClaimVerdict(KeyCounts):
    tone: Tone
    sentence: str


def _keys(count: int) -> str:
    return f"{count} key" if count == 1 else f"{count} keys"


def _found(views: list[dict[str, Any]]) -> str:
    """The findings the mismatching attestations name, in the record's order, as words."""
    names = [name for name in FOUND if any(name in view["findings"] for view in views)]
    words = [FOUND[name] for name in names] or ["a different result"]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def claim_verdict(subject: str, step: int, views: list[dict[str, Any]]) -> ClaimVerdict:
    """The tone and sentence of one claim from its attestations' JSON views (steps.attestation_view)."""
    what = "the initial state" if subject == "init" else f"step {step}"
    by = {
        verdict: {v["verifier"] for v in views if v["verdict"] == verdict} for verdict in ("match", "mismatch", "error")
    }
    matched, mismatched, errors = len(by["match"]), len(by["mismatch"]), len(by["error"])
    checked = len(by["match"] | by["mismatch"])
    counts = KeyCounts(keys=len({v["verifier"] for v in views}), checked_keys=checked, match_keys=matched,
                       mismatch_keys=mismatched, error_keys=errors)  # fmt: skip
    failed = f"; {_keys(errors)} could not replay it (an error)" if errors else ""
    both = by["match"] & by["mismatch"]
    if both:  # an equivocation: the key is counted on both sides, and the reader is told why the sums overlap
        failed += f" ({_keys(len(both))} signed both results, which is an equivocation)"
    if checked == 0:
        sentence = f"No key has checked {what} yet" + (
            f": {_keys(errors)} tried and could not replay it (an error)." if errors else "."
        )
        return {"tone": "none", "sentence": sentence, **counts}
    checks = "independent check" if checked == 1 else "independent checks"
    head = f"{matched} of {checked} {checks} reproduced {what} exactly"
    if mismatched == 0:
        follows = "as far as these keys go, the claim holds (anybody can make a key: what it is worth is who holds it)"
        return {"tone": "upheld", "sentence": f"{head}{failed}; {follows}.", **counts}
    reported = f"{_keys(mismatched)} reported {_found([v for v in views if v['verdict'] == 'mismatch'])}"
    if matched * 2 >= checked:
        follows = "the keys disagree, so at least one of them is wrong (replaying the step yourself settles which)"
        return {"tone": "split", "sentence": f"{head}; {reported}{failed}: {follows}.", **counts}
    if matched == 0:
        head = f"No key that checked {what} reproduced it ({checked} {checks})"
        follows = "the published claim does not replay as claimed, unless every key that checked it is wrong"
    else:
        follows = "most keys found the claim does not replay (replaying the step yourself settles who is right)"
    return {"tone": "failed", "sentence": f"{head}; {reported}{failed}: {follows}.", **counts}


def run_sentence(summary: RunSummary, redundancy: int) -> RunVerdict:
    """The tone and sentence of a run from its summary (totals over every step)."""
    t, steps = summary.totals, summary.run.steps
    checked, covered, found, disputed = t.checked_steps, t.covered_steps, t.mismatch_steps, t.disputed_steps
    init = summary.init
    tone: Tone
    head = f"The publisher claims {steps} training step{'s' if steps != 1 else ''}"
    if checked == 0:
        sentence = f"{head}; no key has checked any of them yet."
        tone = "none"
    else:
        head += f"; {checked} {'has' if checked == 1 else 'have'} been replayed by at least one key"
        head += f" ({covered} by {redundancy} or more keys, the network's aim)"
        if found == 0:
            sentence, tone = f"{head}, and every key that checked reproduced them exactly.", "upheld"
        else:
            lone = found - disputed
            parts = []
            if disputed:
                parts.append(f"{disputed} {'is' if disputed == 1 else 'are'} disputed between keys")
            if lone:
                parts.append(f"on {lone} every key that checked reported a difference")
            step_word = "step" if found == 1 else "steps"
            sentence = f"{head}; on {found} {step_word} a key reported a different result ({'; '.join(parts)})."
            tone = "failed" if lone else "split"
    if init.mismatch:
        sentence += f" The initial state: {init.mismatch} of {init.match + init.mismatch} checks found a difference."
        tone = "failed" if init.match < init.mismatch else ("split" if tone in ("none", "upheld") else tone)
    return {"tone": tone, "sentence": sentence}
