import type { DataConnection } from 'peerjs';
import { describe, expect, it } from 'vitest';
import { newLink } from '../../src/peers/peerjs/link';
import { readFrame, SendQueues } from '../../src/peers/peerjs/wire';
import { BufferWaiters } from '../../src/peers/transport/transport';

/** A link over a fake connection that records what it is handed. */
function fakeLink() {
  const sent: Uint8Array[] = [];
  const conn = { peer: 'p', dataChannel: { bufferedAmount: 0 }, send: (m: Uint8Array) => sent.push(m) } as unknown as DataConnection;
  return { link: newLink(conn, false), sent };
}

const kinds = (sent: Uint8Array[]) => sent.map((b) => { const f = readFrame(b); return f.kind === 'control' ? f.msg.t : f.kind; });

describe('PeerJS send queues', () => {
  it("a reply queued before the channel's 'open' leaves after the hello, not before it", () => {
    const { link, sent } = fakeLink();
    const out = new SendQueues('me', 1 << 20, new BufferWaiters(), { sent: 0 });
    // The peer's hello came in before this side's 'open': the share waits in the queue.
    out.control(link, { t: 'share', y: 'AAAA' });
    expect(sent).toEqual([]);
    link.state = 'authenticating';
    out.controlFirst(link, { t: 'hello', v: 2, nonce: 'AAAA' });
    expect(kinds(sent)).toEqual(['hello', 'share']);
    expect(link.queuedBytes).toBe(0);
  });
});
