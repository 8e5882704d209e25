// A js-libp2p peer that interoperates with a p2paudit daemon: Noise + yamux over TCP, gossipsub on the run's
// topic, and history sync on /p2paudit/sync/1.0.0. Everything it checks is checked here, in JavaScript,
// from docs/network.md and docs/attestation.md (canonical.mjs, proofs.mjs); nothing calls our Python.
//
//   node peer.mjs CONFIG.json
//
// CONFIG: {"daemon": "/ip4/127.0.0.1/tcp/N/p2p/<peer id>", "run_id": hex, "manifest": path to the run's
// manifest.json, "seed": hex of this peer's 32-byte Ed25519 seed, "step": the step it attests,
// "expect_verifiers": hex keys whose gossiped attestations it waits for before publishing its own (default
// none), "min_gossip": attestations to verify from gossip (default 1), "min_entries": log entries to wait for (default 0), "page_size": entries per range request
// (default 4), "deadline_s": total time (default 50)}.
//
// What it does, in order: builds and signs its own v2 attestation for `step` from the manifest's claims
// (checking the manifest is the run id's); dials the daemon; joins the run's topic with a validator that
// verifies every batch (canonical bytes, the topic's run, each envelope's record rules and signature);
// prints {"event": "ready", ...} once the daemon is in its mesh; waits for gossip from `expect_verifiers`;
// takes a status (a signed head from before its own attestation); publishes its batch; then, every second
// until its attestation is in the daemon's log and `min_gossip` attestations were verified, pages through
// the whole log under a fresh status, proving every page against the signed note; finally proves a page
// under the older head. Stdout ends with one line {"event": "summary", ...} of counts. Exit 0 when all of
// that held; otherwise "FAIL: <what>" on stderr, the summary so far on stdout, and exit 1. A watchdog ends
// it at deadline_s + 10 s whatever happens.

import './node20.mjs' // first: a polyfill the libp2p modules below need on Node 20
import { readFileSync } from 'node:fs'
import { gossipsub } from '@chainsafe/libp2p-gossipsub'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { identify } from '@libp2p/identify'
import { tcp } from '@libp2p/tcp'
import { multiaddr } from '@multiformats/multiaddr'
import { createLibp2p } from 'libp2p'
import {
  MAGIC_SYNC, MAX_SIGNED_SIZE, WIRE_VERSION, WireError, checkBatch, concat, decodeMessage, decodeSigned, encodeBatch, equal,
  fromHex, hex, keyFromSeed, messageId, pack, runTopic, sha256, signV2
} from './canonical.mjs'
import { ORIGIN_PREFIX, ProofError, openPeerCheckpoint, peerIdOf, verifyPage } from './proofs.mjs'

const SYNC_PROTOCOL = '/p2paudit/sync/1.0.0'
const MAX_PAGE = 256
const MAX_PAGE_BYTES = MAX_PAGE * (MAX_SIGNED_SIZE + 3) + 2 * 64 * 34 + 64 // docs/network.md: 1,053,760
const REQUEST_TIMEOUT_MS = 10_000
const started = Date.now()
const elapsed = () => (Date.now() - started) / 1000

class Failure extends Error {}

const summary = {
  event: 'summary',
  gossip: { messages: 0, batches_verified: 0, attestations_verified: 0, rejected: 0, by_verifier: {}, steps: [] },
  published: null,
  sync: { status_requests: 0, range_requests: 0, pages_verified: 0, entries_verified: 0, proof_hashes: 0 },
  self_tests: {}
}

function say (line) {
  process.stdout.write(JSON.stringify(line) + '\n')
}

function fail (what) {
  throw new Failure(what)
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function until (predicate, deadline, what) {
  while (!predicate()) {
    if (Date.now() > deadline) fail(`timed out waiting for ${typeof what === 'function' ? what() : what}`)
    await sleep(100)
  }
}

// -- the run's claims, from its manifest ------------------------------------------------------------------

function digestBytes (text) {
  if (!/^sha256:[0-9a-f]{64}$/.test(text)) fail(`manifest digest ${String(text).slice(0, 80)} is not sha256:<hex>`)
  return fromHex(text.slice(7))
}

function lossBits (loss) {
  const view = new DataView(new ArrayBuffer(8))
  view.setFloat64(0, loss)
  return view.getBigUint64(0)
}

// A version-2 "match" record for `step`, built from the manifest's claims. This peer replays nothing: the
// hardware field says so, and the statement is only a well-formed signed claim for a real step of the run.
function ownRecord (manifestBytes, runId, step, publicKey) {
  if (!equal(sha256(manifestBytes), runId)) fail('the manifest is not the run id\'s (SHA-256 of manifest.json)')
  const manifest = JSON.parse(Buffer.from(manifestBytes).toString('utf-8'))
  const claim = manifest.steps[step]
  if (!claim || claim.step !== step) fail(`the manifest has no step ${step}`)
  const input = step === 0 ? manifest.initial_state.digest : manifest.steps[step - 1].output.digest
  const data = digestBytes(claim.data)
  const output = digestBytes(claim.output.digest)
  const loss = lossBits(claim.loss)
  return {
    run_id: runId,
    subject: 'step',
    step,
    input_digest: digestBytes(input),
    claimed_data_digest: data,
    observed_data_digest: data,
    claimed_output_digest: output,
    observed_output_digest: output,
    claimed_loss_bits: loss,
    observed_loss_bits: loss,
    findings: [],
    verdict: 'match',
    engine_version: 'p2paudit-js-interop 0.1.0',
    arithmetic_version: manifest.arithmetic_version,
    backend: 'js-none',
    hardware: 'js-libp2p 2.9.0 interop test peer: claims copied from the manifest, nothing replayed',
    time_ms: BigInt(Date.now()),
    verifier: publicKey
  }
}

// -- request/response: one unsigned-varint length-prefixed frame each way, one stream per request ----------

function uvarint (n) {
  const out = []
  do {
    let byte = n & 0x7f
    n = Math.floor(n / 128)
    if (n > 0) byte |= 0x80
    out.push(byte)
  } while (n > 0)
  return Uint8Array.from(out)
}

class FrameReader {
  constructor (source) {
    this.iterator = source[Symbol.asyncIterator]()
    this.buffer = new Uint8Array(0)
  }

  async fill (n) {
    while (this.buffer.length < n) {
      const { value, done } = await this.iterator.next()
      if (done) fail(`stream ended after ${this.buffer.length} of ${n} bytes`)
      this.buffer = concat(this.buffer, value.subarray())
    }
  }

  async take (n) {
    await this.fill(n)
    const out = this.buffer.subarray(0, n)
    this.buffer = this.buffer.subarray(n)
    return out
  }

  // A minimal multiformats unsigned varint (at most 9 bytes), checked against `max` before the body is read.
  async frame (max) {
    let length = 0
    for (let i = 0; ; i++) {
      if (i === 9) fail('varint length prefix longer than 9 bytes')
      const [byte] = await this.take(1)
      if (byte === 0 && i > 0) fail('varint length prefix is not minimal')
      length += (byte & 0x7f) * 2 ** (7 * i)
      if (!(byte & 0x80)) break
    }
    if (length > max) fail(`frame announces ${length} bytes, more than ${max}`)
    return this.take(length)
  }
}

async function request (connection, protocol, body, maxResponse) {
  const signal = AbortSignal.timeout(REQUEST_TIMEOUT_MS)
  const stream = await connection.newStream(protocol, { signal })
  const onAbort = () => stream.abort(new Error(`${protocol} request timed out after ${REQUEST_TIMEOUT_MS} ms`))
  signal.addEventListener('abort', onAbort)
  try {
    // The request is written and our side closed for writing; the response is read on the same stream.
    await stream.sink([concat(uvarint(body.length), body)])
    const response = await new FrameReader(stream.source).frame(maxResponse)
    await stream.close()
    return response
  } catch (error) {
    stream.abort(error)
    throw error
  } finally {
    signal.removeEventListener('abort', onAbort)
  }
}

// -- sync client -------------------------------------------------------------------------------------------

function decodeSyncResponse (data) {
  const fields = decodeMessage(data, MAX_PAGE_BYTES, MAGIC_SYNC, 'sync response')
  if (fields[0] === 'refusal') fail(`the daemon refused a sync request: ${String(fields[1]).slice(0, 200)}`)
  return fields
}

async function syncStatus (connection, daemonPeer) {
  const response = decodeSyncResponse(await request(connection, SYNC_PROTOCOL, pack([MAGIC_SYNC, WIRE_VERSION, 'status_request']), MAX_PAGE_BYTES))
  summary.sync.status_requests++
  if (response[0] !== 'status' || response.length !== 3 || typeof response[1] !== 'string' || !Array.isArray(response[2])) {
    fail('the answer to a status request is not ["p2paudit/sync", 1, "status", note, runs]')
  }
  const checkpoint = openPeerCheckpoint(response[1])
  if (checkpoint.origin !== ORIGIN_PREFIX + daemonPeer) {
    fail(`the status note's origin ${checkpoint.origin} is not the dialled daemon's ledger`)
  }
  return { checkpoint, note: response[1], runs: response[2] }
}

// Entries [start, start + count) proved against `checkpoint`; every entry's signature checked too.
async function syncPage (connection, checkpoint, start, count) {
  const response = decodeSyncResponse(await request(connection, SYNC_PROTOCOL, pack([MAGIC_SYNC, WIRE_VERSION, 'range', checkpoint.size, start, count]), MAX_PAGE_BYTES))
  summary.sync.range_requests++
  if (response[0] !== 'page' || response.length !== 5) fail('the answer to a range request is not a page')
  const [, pageStart, entries, left, right] = response
  if (pageStart !== start || !Array.isArray(entries) || entries.length < 1 || entries.length > count) {
    fail(`page starts at ${pageStart} with ${entries?.length} entries, asked for ${count} from ${start}`)
  }
  verifyPage(checkpoint, start, entries, left, right)
  summary.sync.pages_verified++
  summary.sync.proof_hashes += left.length + right.length
  for (const entry of entries) decodeSigned(entry)
  summary.sync.entries_verified += entries.length
  return { entries, left, right }
}

// The verifier must be able to fail: the first page with one bit flipped, one index off, and a note with
// a flipped signature bit must all be refused.
function selfTest (checkpoint, note, page, start) {
  const flipped = page.entries.map((e, i) => (i === 0 ? Uint8Array.from(e, (b, j) => (j === e.length - 1 ? b ^ 1 : b)) : e))
  const refused = (fn) => { try { fn(); return false } catch (error) { return error instanceof ProofError } }
  summary.self_tests.flipped_entry_refused = refused(() => verifyPage(checkpoint, start, flipped, page.left, page.right))
  summary.self_tests.shifted_index_refused = checkpoint.size < 2 ||
    refused(() => verifyPage(checkpoint, start === 0 ? 1 : start - 1, page.entries.slice(0, Math.min(page.entries.length, checkpoint.size - 1)), page.left, page.right))
  const sig = note.lastIndexOf(' ') + 1
  const blob = Buffer.from(note.slice(sig, -1), 'base64')
  blob[blob.length - 1] ^= 1
  summary.self_tests.forged_note_refused = refused(() => openPeerCheckpoint(note.slice(0, sig) + blob.toString('base64') + '\n'))
  const bad = Object.entries(summary.self_tests).filter(([, ok]) => !ok).map(([name]) => name)
  if (bad.length) fail(`the JS verifier accepted tampered data: ${bad.join(', ')}`)
}

// The same for attestations: our own envelope with a flipped signature bit, and with its envelope version
// written as a uint8 (cc 01, not the smallest encoding 01), must be refused.
function selfTestAttestation (own) {
  const refused = (bytes) => { try { decodeSigned(bytes); return false } catch (error) { return error instanceof WireError } }
  summary.self_tests.forged_attestation_refused = refused(Uint8Array.from(own, (b, j) => (j === own.length - 1 ? b ^ 1 : b)))
  summary.self_tests.non_canonical_attestation_refused = own[1] === 0x01 && refused(concat(own.subarray(0, 1), Uint8Array.of(0xcc, 0x01), own.subarray(2)))
  const bad = Object.entries(summary.self_tests).filter(([, ok]) => !ok).map(([name]) => name)
  if (bad.length) fail(`the JS verifier accepted tampered data: ${bad.join(', ')}`)
}

// Page through the daemon's whole log under one signed checkpoint; the index of `own` in it, or -1.
async function syncAll (connection, daemonPeer, pageSize, own) {
  const { checkpoint, note, runs } = await syncStatus(connection, daemonPeer)
  summary.sync.runs = runs.map((run) => (Array.isArray(run) && run.length === 2 ? [hex(run[0]), Number(run[1])] : fail('a status run is not [run id, steps]')))
  let found = -1
  for (let start = 0; start < checkpoint.size;) {
    const count = Math.min(pageSize, MAX_PAGE, checkpoint.size - start)
    const page = await syncPage(connection, checkpoint, start, count)
    if (start === 0 && summary.self_tests.flipped_entry_refused === undefined) selfTest(checkpoint, note, page, start)
    page.entries.forEach((entry, i) => { if (equal(entry, own)) found = start + i })
    start += page.entries.length
  }
  summary.sync.checkpoint = { origin: checkpoint.origin, size: checkpoint.size, root: hex(checkpoint.root), key_id: hex(checkpoint.keyId) }
  return found
}

// -- gossip ------------------------------------------------------------------------------------------------

function onGossip (topic, data) {
  summary.gossip.messages++
  const items = checkBatch(topic, data)
  summary.gossip.batches_verified++
  for (const { record } of items) {
    summary.gossip.attestations_verified++
    const key = hex(record.verifier)
    summary.gossip.by_verifier[key] = (summary.gossip.by_verifier[key] ?? 0) + 1
    summary.gossip.steps.push(`${record.subject} ${record.step} ${record.verdict}`)
  }
}

// -- main --------------------------------------------------------------------------------------------------

async function main () {
  const deadline = started + 1000 * (config.deadline_s ?? 50)
  const runId = fromHex(config.run_id)
  const topic = runTopic(runId)
  const seed = fromHex(config.seed)
  const key = keyFromSeed(seed)
  const privateKey = await generateKeyPairFromSeed('Ed25519', seed)
  if (!equal(privateKey.publicKey.raw, key.publicKey)) fail('libp2p and node:crypto derive different keys from one seed')
  const daemonAddr = multiaddr(config.daemon)
  const daemonPeer = daemonAddr.getPeerId()
  if (daemonPeer === null) fail(`daemon address ${config.daemon} has no /p2p/<peer id>`)
  const own = signV2(key, ownRecord(new Uint8Array(readFileSync(config.manifest)), runId, config.step, key.publicKey))
  selfTestAttestation(own)
  summary.peer_id = peerIdOf(key.publicKey)
  summary.public_key = hex(key.publicKey)

  const node = await createLibp2p({
    privateKey,
    addresses: { listen: [] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    services: {
      identify: identify(),
      pubsub: gossipsub({
        globalSignaturePolicy: 'StrictSign',
        msgIdFn: (msg) => messageId(msg.data),
        allowPublishToZeroTopicPeers: false,
        emitSelf: false,
        fallbackToFloodsub: false,
        heartbeatInterval: 1000,
        D: 4,
        Dlo: 3,
        Dhi: 8
      })
    }
  })
  const pubsub = node.services.pubsub
  if (node.peerId.toString() !== summary.peer_id) fail(`libp2p's peer id ${node.peerId} is not ${summary.peer_id}`)
  // Reject (and let gossipsub penalise the sender) anything that fails a stateless check; count the rest.
  pubsub.topicValidators.set(topic, (from, msg) => {
    try {
      checkBatch(topic, msg.data)
      return 'accept'
    } catch (error) {
      summary.gossip.rejected++
      process.stderr.write(`rejected gossip from ${from}: ${error.message}\n`)
      return 'reject'
    }
  })
  pubsub.addEventListener('message', (event) => {
    if (event.detail.topic !== topic) return
    try {
      onGossip(topic, event.detail.data)
    } catch (error) {
      summary.gossip.rejected++
      process.stderr.write(`gossip that passed the validator failed: ${error.message}\n`)
    }
  })

  try {
    pubsub.subscribe(topic)
    const connection = await node.dial(daemonAddr, { signal: AbortSignal.timeout(10_000) })
    summary.connection = { remote: connection.remoteAddr.toString(), encryption: connection.encryption, multiplexer: connection.multiplexer }
    await until(() => pubsub.getSubscribers(topic).some((p) => p.toString() === daemonPeer), deadline, 'the daemon\'s subscription to the run topic')
    await until(() => pubsub.getMeshPeers(topic).includes(daemonPeer), deadline, 'the daemon in the topic mesh')
    // A stream still negotiating its protocol has none yet (undefined, null in JSON: CI saw one once): only the
    // protocols of the streams open on the connection so far.
    summary.connection.protocols = [...new Set(connection.streams.map((s) => s.protocol).filter((p) => p))].sort()
    say({ event: 'ready', peer_id: summary.peer_id, mesh: pubsub.getMeshPeers(topic), elapsed_s: elapsed() })

    // Gossip first: once every expected key's attestations arrived, its node is in the mesh and hears ours.
    const expected = config.expect_verifiers ?? []
    await until(() => expected.every((key) => summary.gossip.by_verifier[key] > 0), deadline,
      () => `gossiped attestations by ${expected.filter((key) => !(summary.gossip.by_verifier[key] > 0)).join(', ')}`)
    // A signed head from before our attestation: once the log has grown, a page must still prove out under it.
    const before = await syncStatus(connection, daemonPeer)

    const published = await pubsub.publish(topic, encodeBatch(runId, [own]))
    summary.published = {
      step: config.step,
      recipients: published.recipients.map(String),
      envelope: hex(own),
      message_id: hex(messageId(encodeBatch(runId, [own])))
    }

    // Until the daemon's log holds our attestation and enough gossip was verified, sync every second.
    // With "min_entries", also until the log holds that many entries (pages with proof hashes on both sides).
    const minGossip = config.min_gossip ?? 1
    const minEntries = config.min_entries ?? 0
    let ownIndex = -1
    const waiting = () => ownIndex < 0 || summary.gossip.attestations_verified < minGossip ||
      summary.sync.checkpoint.size < minEntries
    while (waiting()) {
      if (Date.now() > deadline) {
        fail(ownIndex < 0
          ? 'the daemon\'s log never showed our attestation'
          : summary.gossip.attestations_verified < minGossip
            ? `verified ${summary.gossip.attestations_verified} gossiped attestations, want ${minGossip}`
            : `the daemon's log holds ${summary.sync.checkpoint.size} entries, want ${minEntries}`)
      }
      ownIndex = await syncAll(connection, daemonPeer, config.page_size ?? 4, own)
      if (waiting()) await sleep(1000)
    }
    summary.sync.own_index = ownIndex
    const old = before.checkpoint
    if (old.size < 1 || old.size >= summary.sync.checkpoint.size) fail(`the log did not grow from ${old.size} entries`)
    const count = Math.min(config.page_size ?? 4, old.size)
    await syncPage(connection, old, old.size - count, count)
    summary.sync.old_head = { size: old.size, root: hex(old.root), page: [old.size - count, old.size] }
    if (summary.gossip.rejected) fail(`${summary.gossip.rejected} gossip message(s) from the daemons failed verification`)
  } finally {
    summary.elapsed_s = elapsed()
    await Promise.race([node.stop(), sleep(3000)])
  }
}

let config
try {
  config = JSON.parse(readFileSync(process.argv[2], 'utf-8'))
} catch (error) {
  process.stderr.write(`FAIL: usage: node peer.mjs CONFIG.json (${error.message})\n`)
  process.exit(2)
}
const watchdog = setTimeout(() => {
  process.stderr.write('FAIL: the peer did not finish within its deadline + 10 s\n')
  say(summary)
  process.exit(1)
}, 1000 * ((config.deadline_s ?? 50) + 10))

main().then(() => {
  clearTimeout(watchdog)
  say(summary)
  process.exit(0)
}, (error) => {
  clearTimeout(watchdog)
  process.stderr.write(`FAIL: ${error instanceof Failure ? error.message : error.stack}\n`)
  say(summary)
  process.exit(1)
})
