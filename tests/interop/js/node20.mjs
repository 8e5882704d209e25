// Node 20 has no Promise.withResolvers (Node 22 added it), and js-libp2p 2.9.0's peer store calls it
// (mortice 3.3 -> it-queue 1.x). Imported first by peer.mjs, so it runs before any libp2p module.
if (typeof Promise.withResolvers !== 'function') {
  Promise.withResolvers = function withResolvers () {
    let resolve, reject
    const promise = new this((res, rej) => { resolve = res; reject = rej })
    return { promise, resolve, reject }
  }
}
