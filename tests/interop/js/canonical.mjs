// Canonical msgpack and p2paudit's signed attestations, written from docs/attestation.md and
// docs/network.md ("Wire formats"), independently of the Python code.
//
// Canonical: the smallest encoding of every int, str, bin and array length; bytes are bin, text is str;
// no maps, ext types, floats or booleans. A decoder re-encodes what it parsed and refuses the input unless
// the bytes are identical. @msgpack/msgpack does the byte work; the canonical rules are enforced here:
// with useBigInt64 it encodes every BigInt as 9 bytes (cf/d3) and a Number >= 2^32 as a float64, so each
// integer is handed to it as a Number below 2^32 and as a BigInt from 2^32 up (where cf is the smallest).

import { createHash, createPrivateKey, createPublicKey, sign, verify } from 'node:crypto'
import { decode, encode } from '@msgpack/msgpack'

export const MAX_SIGNED_SIZE = 4096
export const MAX_BATCH = 256
export const MAX_BATCH_BYTES = 256 * 1024
export const MAGIC_BATCH = 'p2paudit/batch'
export const MAGIC_SYNC = 'p2paudit/sync'
export const WIRE_VERSION = 1
export const DOMAINS = {
  1: new TextEncoder().encode('p2paudit/attestation/v1\x00'),
  2: new TextEncoder().encode('p2paudit/attestation/v2\x00')
}
export const MESSAGE_ID_DOMAIN = new TextEncoder().encode('p2paudit/message-id/v1\x00')
const FINDINGS = ['init', 'counter', 'data', 'state', 'loss']
const VERDICTS = ['match', 'mismatch', 'error']
const TEXT_LIMITS = { engine_version: [1, 64], backend: [1, 32], hardware: [0, 256] }
const TWO_32 = 2n ** 32n
const TWO_63 = 2n ** 63n
const TWO_64 = 2n ** 64n

export class WireError extends Error {}

// -- bytes and hashes --------------------------------------------------------------------------------------

export function sha256 (...parts) {
  const h = createHash('sha256')
  for (const part of parts) h.update(part)
  return new Uint8Array(h.digest())
}

export function concat (...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) { out.set(p, at); at += p.length }
  return out
}

export function equal (a, b) {
  return a instanceof Uint8Array && b instanceof Uint8Array && a.length === b.length && a.every((x, i) => x === b[i])
}

export const hex = (bytes) => Buffer.from(bytes).toString('hex')
export const fromHex = (text) => new Uint8Array(Buffer.from(text, 'hex'))

// -- canonical msgpack -------------------------------------------------------------------------------------

function normalize (value) {
  if (typeof value === 'bigint' || (typeof value === 'number' && Number.isInteger(value))) {
    const big = BigInt(value)
    return big >= -(2n ** 31n) && big < TWO_32 ? Number(big) : big
  }
  if (Array.isArray(value)) return value.map(normalize)
  return value
}

export function pack (value) {
  return encode(normalize(value), { useBigInt64: true })
}

// Parse exactly one canonical msgpack value of at most `limit` bytes.
export function unpackCanonical (data, limit, what) {
  if (!(data instanceof Uint8Array)) throw new WireError(`${what} is not bytes`)
  if (data.length > limit) throw new WireError(`${what} has ${data.length} bytes, more than the limit ${limit}`)
  let value
  try {
    value = decode(data, {
      useBigInt64: true, maxMapLength: 0, maxExtLength: 0, maxArrayLength: 1024, maxBinLength: limit, maxStrLength: limit
    })
  } catch (error) {
    throw new WireError(`${what} is not valid msgpack: ${String(error.message).slice(0, 80)}`)
  }
  if (!equal(pack(value), data)) throw new WireError(`${what} is not canonically encoded`)
  return value
}

const isInt = (v) => typeof v === 'bigint' || (typeof v === 'number' && Number.isInteger(v))
const isBin = (v, n) => v instanceof Uint8Array && (n === undefined || v.length === n)

function checkInt (v, what, low, high) {
  if (!isInt(v)) throw new WireError(`${what} is not an integer`)
  const big = BigInt(v)
  if (big < low || big >= high) throw new WireError(`${what} is ${big}, want ${low} <= x < ${high}`)
  return big
}

function checkDigest (v, what, nullable = false) {
  if (v === null && nullable) return null
  if (!isBin(v, 32)) throw new WireError(`${what} is not 32 bytes`)
  return v
}

function checkText (v, what) {
  const [low, high] = TEXT_LIMITS[what]
  if (typeof v !== 'string' || v.length < low || v.length > high || !/^[\x20-\x7e]*$/.test(v)) {
    throw new WireError(`${what} is not ${low}..${high} characters of printable ASCII`)
  }
  return v
}

function checkMessageHead (value, magic, what) {
  if (!Array.isArray(value) || value.length < 2) throw new WireError(`${what} is not an array with a magic and a version`)
  if (value[0] !== magic) throw new WireError(`${what} magic is ${String(value[0]).slice(0, 40)}, want ${magic}`)
  if (value[1] !== WIRE_VERSION) throw new WireError(`${what} version is ${value[1]}, want ${WIRE_VERSION}`)
  return value.slice(2)
}

export function decodeMessage (data, limit, magic, what) {
  return checkMessageHead(unpackCanonical(data, limit, what), magic, what)
}

// -- attestation records -----------------------------------------------------------------------------------

const FIELDS_V1 = ['version', 'run_id', 'step', 'input_digest', 'data_digest', 'claimed_output_digest',
  'observed_output_digest', 'verdict', 'engine_version', 'arithmetic_version', 'backend', 'hardware', 'time_ms',
  'verifier']
const FIELDS_V2 = ['version', 'run_id', 'subject', 'step', 'input_digest', 'claimed_data_digest',
  'observed_data_digest', 'claimed_output_digest', 'observed_output_digest', 'claimed_loss_bits',
  'observed_loss_bits', 'findings', 'verdict', 'engine_version', 'arithmetic_version', 'backend', 'hardware',
  'time_ms', 'verifier']

function checkCommon (r) {
  checkDigest(r.run_id, 'run_id')
  checkDigest(r.verifier, 'verifier')
  r.step = checkInt(r.step, 'step', 0n, TWO_63)
  r.arithmetic_version = checkInt(r.arithmetic_version, 'arithmetic_version', 0n, TWO_32)
  r.time_ms = checkInt(r.time_ms, 'time_ms', 0n, TWO_63)
  for (const name of Object.keys(TEXT_LIMITS)) checkText(r[name], name)
  if (!VERDICTS.includes(r.verdict)) throw new WireError(`verdict ${String(r.verdict).slice(0, 20)} is unknown`)
}

const same = (a, b) => (a instanceof Uint8Array ? equal(a, b) : a === b)

function checkV1 (r) {
  checkCommon(r)
  for (const name of ['input_digest', 'data_digest', 'claimed_output_digest']) checkDigest(r[name], name)
  const observed = checkDigest(r.observed_output_digest, 'observed_output_digest', true)
  if (r.verdict === 'error') {
    if (observed !== null) throw new WireError('v1 error carries an observed digest')
  } else if (observed === null) {
    throw new WireError(`v1 ${r.verdict} has no observed digest`)
  } else if ((r.verdict === 'match') !== equal(observed, r.claimed_output_digest)) {
    throw new WireError(`v1 ${r.verdict} contradicts its digests`)
  }
  r.subject = 'step'
  return r
}

function checkV2 (r) {
  checkCommon(r)
  if (r.subject !== 'step' && r.subject !== 'init') throw new WireError('subject is not step or init')
  checkDigest(r.claimed_output_digest, 'claimed_output_digest')
  checkDigest(r.observed_output_digest, 'observed_output_digest', true)
  const losses = ['claimed_loss_bits', 'observed_loss_bits']
  for (const name of losses) if (r[name] !== null) r[name] = checkInt(r[name], name, 0n, TWO_64)
  const stepParts = ['input_digest', 'claimed_data_digest', 'observed_data_digest', ...losses]
  if (r.subject === 'init') {
    if (r.step !== 0n) throw new WireError(`init has step ${r.step}`)
    if (stepParts.some((name) => r[name] !== null)) throw new WireError('init carries step fields')
  } else {
    checkDigest(r.input_digest, 'input_digest')
    checkDigest(r.claimed_data_digest, 'claimed_data_digest')
    checkDigest(r.observed_data_digest, 'observed_data_digest', true)
    if (r.claimed_loss_bits === null) throw new WireError('step has no claimed loss')
  }
  if (!Array.isArray(r.findings) || r.findings.some((f) => !FINDINGS.includes(f))) {
    throw new WireError('findings are not an array of known names')
  }
  const positions = r.findings.map((f) => FINDINGS.indexOf(f))
  if (positions.some((p, i) => i > 0 && p <= positions[i - 1])) throw new WireError('findings out of order')
  const pairs = r.subject === 'init'
    ? { init: [r.claimed_output_digest, r.observed_output_digest] }
    : {
        data: [r.claimed_data_digest, r.observed_data_digest],
        state: [r.claimed_output_digest, r.observed_output_digest],
        loss: [r.claimed_loss_bits, r.observed_loss_bits]
      }
  const unobserved = Object.keys(pairs).filter((name) => pairs[name][1] === null)
  if (r.verdict === 'error') {
    if (unobserved.length !== Object.keys(pairs).length || r.findings.length) {
      throw new WireError('error observed something or has findings')
    }
    return r
  }
  if (unobserved.length) throw new WireError(`${r.verdict} lacks observed ${unobserved.join(', ')}`)
  const differ = FINDINGS.filter((name) => name in pairs && !same(pairs[name][0], pairs[name][1]))
  if (r.verdict === 'match') {
    if (differ.length || r.findings.length) throw new WireError('match with differing pairs or findings')
    return r
  }
  const named = r.findings.filter((f) => !(r.subject === 'step' && f === 'counter'))
  if (!r.findings.length || named.join() !== differ.join()) throw new WireError('mismatch findings disagree with pairs')
  return r
}

// A verified record from a signed envelope: [1, body (bin), signature (bin 64)], signature over
// DOMAINS[body version] || body by the key in the body's last field.
export function decodeSigned (data) {
  const value = unpackCanonical(data, MAX_SIGNED_SIZE, 'signed attestation')
  if (!Array.isArray(value) || value.length !== 3) throw new WireError('envelope is not an array of 3')
  const [version, body, signature] = value
  if (version !== 1) throw new WireError(`envelope version ${version} is unknown`)
  if (!isBin(body)) throw new WireError('envelope body is not bin')
  if (!isBin(signature, 64)) throw new WireError('envelope signature is not 64 bytes')
  const fields = unpackCanonical(body, MAX_SIGNED_SIZE, 'attestation body')
  if (!Array.isArray(fields) || fields.length === 0) throw new WireError('body is not an array')
  const names = fields[0] === 1 ? FIELDS_V1 : fields[0] === 2 ? FIELDS_V2 : null
  if (names === null) throw new WireError(`body version ${fields[0]} is unknown`)
  if (fields.length !== names.length) throw new WireError(`v${fields[0]} body has ${fields.length} fields`)
  const record = Object.fromEntries(names.map((name, i) => [name, fields[i]]))
  if (fields[0] === 1) checkV1(record)
  else checkV2(record)
  if (!verifyEd25519(record.verifier, concat(DOMAINS[fields[0]], body), signature)) {
    throw new WireError(`bad signature on v${fields[0]} ${record.subject} ${record.step} by ${hex(record.verifier).slice(0, 16)}`)
  }
  return record
}

// The canonical body of a version-2 record (checked by the same rules a receiver applies).
export function encodeV2 (record) {
  const body = pack(FIELDS_V2.map((name) => (name === 'version' ? 2 : record[name])))
  const parsed = unpackCanonical(body, MAX_SIGNED_SIZE, 'own attestation body')
  checkV2(Object.fromEntries(FIELDS_V2.map((name, i) => [name, parsed[i]])))
  return body
}

export function signV2 (key, record) {
  if (!equal(record.verifier, key.publicKey)) throw new Error('the record names another verifier')
  const body = encodeV2(record)
  const envelope = pack([1, body, key.sign(concat(DOMAINS[2], body))])
  decodeSigned(envelope) // what we send must pass what we demand of others
  return envelope
}

// -- gossip batch ------------------------------------------------------------------------------------------

export function runTopic (runId) {
  return `/p2paudit/run/${hex(runId)}/v1`
}

export function messageId (data) {
  return sha256(MESSAGE_ID_DOMAIN, data)
}

export function encodeBatch (runId, envelopes) {
  if (envelopes.length < 1 || envelopes.length > MAX_BATCH) throw new Error('a batch holds 1..256 envelopes')
  const data = pack([MAGIC_BATCH, WIRE_VERSION, runId, envelopes])
  if (data.length > MAX_BATCH_BYTES) throw new Error(`batch of ${data.length} bytes is over the limit`)
  return data
}

// Every check a receiver may make without local state: size, canonical bytes, the topic's run, and every
// envelope's canonical form, record rules and signature. Returns the verified records.
export function checkBatch (topic, data) {
  const fields = decodeMessage(data, MAX_BATCH_BYTES, MAGIC_BATCH, 'gossip batch')
  if (fields.length !== 2) throw new WireError(`gossip batch has ${fields.length + 2} fields, want 4`)
  const [runId, items] = fields
  if (!isBin(runId, 32)) throw new WireError('batch run id is not 32 bytes')
  if (topic !== runTopic(runId)) throw new WireError(`batch for run ${hex(runId).slice(0, 16)} on topic ${topic}`)
  if (!Array.isArray(items) || items.length < 1 || items.length > MAX_BATCH) throw new WireError('batch holds no 1..256 items')
  return items.map((item, n) => {
    if (!isBin(item) || item.length < 1 || item.length > MAX_SIGNED_SIZE) throw new WireError(`batch item ${n} is not bin`)
    const record = decodeSigned(item)
    if (!equal(record.run_id, runId)) throw new WireError(`batch item ${n} attests another run`)
    return { record, envelope: item }
  })
}

// -- Ed25519 with node's crypto ----------------------------------------------------------------------------

const PKCS8_ED25519 = fromHex('302e020100300506032b657004220420')
const SPKI_ED25519 = fromHex('302a300506032b6570032100')

export function keyFromSeed (seed) {
  if (seed.length !== 32) throw new Error(`Ed25519 seed has ${seed.length} bytes, want 32`)
  const privateKey = createPrivateKey({ key: Buffer.from(concat(PKCS8_ED25519, seed)), format: 'der', type: 'pkcs8' })
  const spki = createPublicKey(privateKey).export({ format: 'der', type: 'spki' })
  return {
    publicKey: new Uint8Array(spki.subarray(SPKI_ED25519.length)),
    sign: (message) => new Uint8Array(sign(null, message, privateKey))
  }
}

export function verifyEd25519 (publicKey, message, signature) {
  try {
    const key = createPublicKey({ key: Buffer.from(concat(SPKI_ED25519, publicKey)), format: 'der', type: 'spki' })
    return verify(null, message, key, signature)
  } catch {
    return false
  }
}
