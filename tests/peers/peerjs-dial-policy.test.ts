import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { newKeyPair } from '../../src/peers/room/identity';
import { AdmissionLimits } from '../../src/peers/peerjs/admission';
import { DialPolicy } from '../../src/peers/peerjs/dial-policy';
import type { Link } from '../../src/peers/peerjs/link';
import { MAX_UNADMITTED_LINKS } from '../../src/peers/peerjs/options';
import { createRoomId, memberId, roomDiscoveryKey } from '../../src/peers/room/room';
import type { PeerId } from '../../src/peers/transport/transport';

const discovery = roomDiscoveryKey(createRoomId());
const member = () => memberId(discovery, newKeyPair().publicKey);

function setup() {
  const links = new Map<PeerId, Link>();
  const link = (peer: PeerId, state: Link['state'], outgoing = false) => links.set(peer, { peer, state, outgoing } as Link);
  return { links, link, dials: new DialPolicy(links, discovery, new AdmissionLimits()) };
}

describe('PeerJS dial policy', () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(1_000_000);
  });
  afterEach(() => vi.useRealTimers());

  it('redials a failed member after 2, 4, 8, 16 s, then never again, and takes no more offers from it', () => {
    const { dials } = setup();
    const id = member();
    expect(dials.shouldDial(id)).toBe(true);
    for (const wait of [2000, 4000, 8000, 16_000]) {
      dials.ended(id, false);
      expect(dials.found()).toBe(1);
      vi.advanceTimersByTime(wait - 1);
      expect(dials.shouldDial(id)).toBe(false);
      vi.advanceTimersByTime(1);
      expect(dials.shouldDial(id)).toBe(true);
    }
    expect(dials.acceptOffer(id)).toBe(true);
    dials.ended(id, false);
    vi.advanceTimersByTime(3_600_000);
    expect(dials.shouldDial(id)).toBe(false);
    expect(dials.acceptOffer(id)).toBe(false);
    expect(dials.found()).toBe(0);
  });

  it('forgets failed attempts once the member is admitted', () => {
    const { dials } = setup();
    const id = member();
    dials.ended(id, false);
    dials.ended(id, false);
    dials.admitted(id);
    expect(dials.found()).toBe(0);
    dials.ended(id, false);
    vi.advanceTimersByTime(2000);
    expect(dials.shouldDial(id)).toBe(true);
  });

  it('a member that left or was refused is neither dialled nor accepted again', () => {
    const { dials } = setup();
    const [left, refused] = [member(), member()];
    dials.ended(left, true);
    dials.refuse(refused);
    dials.ended(refused, false);
    vi.advanceTimersByTime(3_600_000);
    expect(dials.hasLeft(left)).toBe(true);
    expect(dials.hasLeft(refused)).toBe(false);
    for (const id of [left, refused]) {
      expect(dials.shouldDial(id)).toBe(false);
      expect(dials.acceptOffer(id)).toBe(false);
    }
    expect(dials.found()).toBe(0);
  });

  it('takes offers only from member ids of the room, and from new ones only while links not yet admitted are under the cap', () => {
    const { dials, link } = setup();
    expect(dials.acceptOffer('not-a-member')).toBe(false);
    const [live, pending] = [member(), member()];
    link(live, 'admitted');
    expect(dials.shouldDial(live)).toBe(false);
    link(pending, 'authenticating');
    for (let i = 1; i < MAX_UNADMITTED_LINKS; i++) link(member(), 'connecting');
    expect(dials.roomForLink(false)).toBe(false);
    expect(dials.acceptOffer(member())).toBe(false);
    // A peer we already have a link with may re-offer (the transport decides which connection stays).
    expect(dials.acceptOffer(live)).toBe(true);
    expect(dials.acceptOffer(pending)).toBe(true);
  });

  it('caps our own dials and peers\' offers apart: dials stuck on listed ids that never answer leave room for offers, and the reverse', () => {
    const { dials, link } = setup();
    // A link holder lists 8 ids that never answer: our dials to them are all pending (e2e adversary, CI once).
    for (let i = 0; i < MAX_UNADMITTED_LINKS; i++) link(member(), 'connecting', true);
    expect(dials.roomForLink(true)).toBe(false);
    expect(dials.roomForLink(false)).toBe(true);
    expect(dials.acceptOffer(member())).toBe(true);
    for (let i = 0; i < MAX_UNADMITTED_LINKS; i++) link(member(), 'authenticating', false);
    expect(dials.acceptOffer(member())).toBe(false);
    expect(dials.roomForLink(true)).toBe(false);
  });
});
