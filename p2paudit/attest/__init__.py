"""Signed attestations of replayed steps, and the store that keeps them in the ledger.

    attest.record        the attestation record, its canonical msgpack bytes, signing and verification
    attest.intoto        export/import as an in-toto Statement v1 in a DSSE envelope
    attest.audits        records from step audits (p2paudit.audit), the hardware description
    attest.store         AttestationStore: leaves of a `ledger` file plus index tables; no double signing
    attest.tables        the index tables (append-only) and the ledger origin
    attest.queries       coverage, disputes, equivocations, with signed evidence anybody can check
    attest.verification  full check of a store: tree, every signature, the index
    attest.report        JSON views of query results for the CLI
    attest.errors        AttestationError (exit code 2)

Import the submodules directly; this package imports nothing itself.
"""
