import { describe, expect, it } from 'vitest';
import { createGroupStore, iceCheck, iceOf } from '../../src/state/group/group';
import { GroupController } from '../../src/state/group/controller';
import type { OpenRoomOptions } from '../../src/state/group/deps';

const PAGE = 'http://127.0.0.1:5173/';

describe('the group ICE setting', () => {
  it('comes from the page link (?ice=, ?relay=1), else none', () => {
    expect(iceOf(PAGE)).toBeNull();
    expect(iceOf(`${PAGE}?ice=${encodeURIComponent('u:p@turn:h:3478')}&relay=1`)).toEqual({ spec: 'u:p@turn:h:3478', relayOnly: true, from: 'link' });
    expect(createGroupStore().getState().ice).toEqual({ spec: '', relayOnly: false, from: null });
    expect(iceCheck({ spec: 'turn:h:1', relayOnly: false, from: 'panel' }).problem).toMatch(/credential/);
    expect(iceCheck({ spec: 'u:secret@turn:h:1', relayOnly: true, from: 'panel' })).toEqual({ problem: null, summary: 'turn:h:1 (relay only)' });
  });

  it('an invalid setting refuses to connect with the reason; a valid one reaches the transport', async () => {
    const store = createGroupStore();
    const asked: OpenRoomOptions[] = [];
    const ctl = new GroupController(store, {
      pageUrl: PAGE,
      openTransport: async (o) => {
        asked.push(o);
        throw new Error('no PeerServer in this test');
      },
      runtime: () => Promise.reject(new Error('unused')),
      loadText: async () => '',
    });
    store.getState().setIce({ spec: 'stun:a:1', relayOnly: true, from: 'panel' });
    await ctl.create();
    expect(asked).toHaveLength(0);
    expect(store.getState().joinError).toMatch(/^ICE servers: relay-only ICE needs a TURN server/);
    store.getState().setIce({ spec: 'u:p@turn:h:1', relayOnly: true, from: 'panel' });
    await ctl.create();
    expect(asked[0].ice).toEqual({ servers: [{ urls: 'turn:h:1', username: 'u', credential: 'p' }], relayOnly: true });
    expect(store.getState().joinError).toMatch(/no PeerServer/);
    ctl.dispose();
  });
});
