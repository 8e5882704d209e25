"""explorer: a read-only web explorer of a ledger (runs, coverage, steps, disputes, checkpoints) and a daemon.

Modules:

    explorer.coverage     a run's coverage aggregated into buckets of steps, in SQL
    explorer.runs         runs, their summaries, disputed steps
    explorer.steps        one step (or the initial state) with every attestation, its findings and outcomes
    explorer.diagnosis_view  where a claim's outcomes depart, part by part, as far as the signed evidence says
    explorer.checkpoints  signed tree heads, witnesses' cosignatures, consistency, split views, equivocations
    explorer.proofs       downloadable inclusion proofs, and their offline check (values only)
    explorer.api          the JSON API under /api/v1/: routes, parameters, answers
    explorer.server       the HTTP server: GET only, static pages shipped in static/, security headers

Everything reads the ledger through `AttestationStore.open_readonly`: nothing
is ever written, and nothing the ledger holds is ever sent as HTML (the pages
build their DOM with textContent from the JSON API). docs/explorer.md
documents the pages, every endpoint and the SQL views.
"""
