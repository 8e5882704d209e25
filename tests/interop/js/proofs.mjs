// A p2paudit node's signed checkpoint and the range proofs of its sync pages, checked in JavaScript from
// docs/network.md ("History sync", "Ledger origins name their key"), C2SP signed-note / tlog-checkpoint
// and RFC 9162 (leaf prefix 0x00, node prefix 0x01).

import { concat, equal, sha256, verifyEd25519 } from './canonical.mjs'

export class ProofError extends Error {}

export const ORIGIN_PREFIX = 'p2paudit.dev/ledger/'
const BASE58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const ED25519_PEER_ID_PREFIX = Uint8Array.from([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])
const EM_DASH = '\u2014 '

// -- origins and peer ids ----------------------------------------------------------------------------------

export function base58Decode (text) {
  let number = 0n
  for (const c of text) {
    const digit = BASE58.indexOf(c)
    if (digit < 0) throw new ProofError(`${JSON.stringify(c)} is not a base58 digit`)
    number = number * 58n + BigInt(digit)
  }
  const bytes = []
  for (; number > 0n; number >>= 8n) bytes.unshift(Number(number & 0xffn))
  const zeros = text.length - text.replace(/^1+/, '').length
  return Uint8Array.from([...new Array(zeros).fill(0), ...bytes])
}

export function base58Encode (bytes) {
  let number = 0n
  for (const b of bytes) number = (number << 8n) | BigInt(b)
  let text = ''
  for (; number > 0n; number /= 58n) text = BASE58[Number(number % 58n)] + text
  let zeros = 0
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++
  return '1'.repeat(zeros) + text
}

// The Ed25519 key a ledger origin p2paudit.dev/ledger/<peer id> names: the peer id is the identity multihash
// of the libp2p protobuf public key (00 24 08 01 12 20 + 32 key bytes), in base58btc.
export function originPublicKey (origin) {
  if (!origin.startsWith(ORIGIN_PREFIX)) throw new ProofError(`origin ${origin.slice(0, 80)} is not a p2paudit ledger`)
  const text = origin.slice(ORIGIN_PREFIX.length)
  const raw = base58Decode(text)
  if (raw.length !== 38 || !equal(raw.subarray(0, 6), ED25519_PEER_ID_PREFIX)) {
    throw new ProofError(`origin ${origin.slice(0, 80)} does not name an Ed25519 peer id`)
  }
  if (base58Encode(raw) !== text) throw new ProofError(`origin ${origin.slice(0, 80)} is not canonical base58`)
  return raw.subarray(6)
}

export function peerIdOf (publicKey) {
  return base58Encode(concat(ED25519_PEER_ID_PREFIX, publicKey))
}

// -- C2SP signed notes and checkpoints ---------------------------------------------------------------------

function strictBase64 (text, what) {
  const raw = Buffer.from(text, 'base64')
  if (raw.toString('base64') !== text) throw new ProofError(`${what} is not canonical base64`)
  return new Uint8Array(raw)
}

// key id = SHA-256(name || 0x0A || 0x01 || public key)[:4] (0x01: the Ed25519 signature type)
export function keyId (name, publicKey) {
  return sha256(new TextEncoder().encode(name), Uint8Array.from([0x0a, 0x01]), publicKey).subarray(0, 4)
}

export function parseNote (note) {
  if (typeof note !== 'string' || !note.endsWith('\n')) throw new ProofError('note does not end with a newline')
  const split = note.lastIndexOf('\n\n')
  if (split < 0) throw new ProofError('note has no blank line before its signatures')
  const text = note.slice(0, split + 1)
  const lines = note.slice(split + 2, -1).split('\n')
  const signatures = lines.map((line, i) => {
    if (!line.startsWith(EM_DASH)) throw new ProofError(`signature line ${i + 1} does not start with an em dash`)
    const fields = line.slice(EM_DASH.length).split(' ')
    if (fields.length !== 2) throw new ProofError(`signature line ${i + 1} has ${fields.length} fields`)
    const raw = strictBase64(fields[1], `signature line ${i + 1}`)
    if (raw.length < 5) throw new ProofError(`signature line ${i + 1} is too short`)
    return { name: fields[0], keyId: raw.subarray(0, 4), signature: raw.subarray(4) }
  })
  return { text, signatures }
}

// A checkpoint note verified under the key its origin names: { origin, size, root, publicKey }.
export function openPeerCheckpoint (note) {
  const { text, signatures } = parseNote(note)
  const origin = text.slice(0, text.indexOf('\n'))
  const publicKey = originPublicKey(origin)
  const id = keyId(origin, publicKey)
  const mine = signatures.filter((s) => s.name === origin && equal(s.keyId, id))
  if (mine.length === 0) throw new ProofError(`note has no signature by ${origin} with key id ${Buffer.from(id).toString('hex')}`)
  for (const s of mine) {
    if (!verifyEd25519(publicKey, new TextEncoder().encode(text), s.signature)) {
      throw new ProofError(`the signature by ${origin} does not verify`)
    }
  }
  const lines = text.slice(0, -1).split('\n')
  if (lines.length < 3 || lines.some((line) => line === '')) throw new ProofError('checkpoint has fewer than 3 lines or an empty line')
  if (!/^(0|[1-9][0-9]*)$/.test(lines[1])) throw new ProofError(`checkpoint size ${lines[1].slice(0, 30)} is not decimal`)
  const root = strictBase64(lines[2], 'checkpoint root')
  if (root.length !== 32) throw new ProofError(`checkpoint root has ${root.length} bytes`)
  return { origin, size: Number(lines[1]), root, publicKey, keyId: id, signatures: mine.length }
}

// -- RFC 9162 trees and range proofs -----------------------------------------------------------------------

export const leafHash = (entry) => sha256(Uint8Array.of(0x00), entry)
export const nodeHash = (left, right) => sha256(Uint8Array.of(0x01), left, right)

// The largest power of two strictly below n (n >= 2).
function splitPoint (n) {
  let k = 1
  while (k * 2 < n) k *= 2
  return k
}

function treeRoot (hashes) {
  if (hashes.length === 1) return hashes[0]
  const k = splitPoint(hashes.length)
  return nodeHash(treeRoot(hashes.slice(0, k)), treeRoot(hashes.slice(k)))
}

// The nodes wholly left of and wholly right of [start, end) in the tree of `size` leaves, left to right:
// walk from the root, splitting only the nodes that straddle the range.
export function rangeProofRanges (start, end, size) {
  const left = []
  const right = []
  const walk = (lo, hi) => {
    if (hi <= start) left.push([lo, hi])
    else if (lo >= end) right.push([lo, hi])
    else if (!(start <= lo && hi <= end)) {
      const k = splitPoint(hi - lo)
      walk(lo, lo + k)
      walk(lo + k, hi)
    }
  }
  walk(0, size)
  return { left, right }
}

// Prove `entries` are positions start.. of the tree under `checkpoint`; ProofError with the numbers if not.
export function verifyPage (checkpoint, start, entries, left, right) {
  const end = start + entries.length
  if (!entries.length || start < 0 || end > checkpoint.size) {
    throw new ProofError(`page [${start}, ${end}) is not within the checkpoint's tree of size ${checkpoint.size}`)
  }
  const ranges = rangeProofRanges(start, end, checkpoint.size)
  if (left.length !== ranges.left.length || right.length !== ranges.right.length) {
    throw new ProofError(`page proof has ${left.length} left and ${right.length} right hashes, want ` +
      `${ranges.left.length} and ${ranges.right.length}`)
  }
  const leaves = entries.map(leafHash)
  const outside = [...left, ...right][Symbol.iterator]()
  const root = (lo, hi) => {
    if (hi <= start || lo >= end) return outside.next().value
    if (start <= lo && hi <= end) return treeRoot(leaves.slice(lo - start, hi - start))
    const k = splitPoint(hi - lo)
    return nodeHash(root(lo, lo + k), root(lo + k, hi))
  }
  const got = root(0, checkpoint.size)
  if (!equal(got, checkpoint.root)) {
    throw new ProofError(`page [${start}, ${end}) gives root ${Buffer.from(got).toString('hex').slice(0, 16)}.., ` +
      `the checkpoint of size ${checkpoint.size} has ${Buffer.from(checkpoint.root).toString('hex').slice(0, 16)}..`)
  }
  return ranges
}
