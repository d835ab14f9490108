import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { checkLabConfig, LAB_CONFIG_PATH, labConfigFromEnv, labConfigHandler, publicLabConfig, TURN_TTL_S, turnIssuer } from '../../src/server/lab-config';

describe('/lab-config.json', () => {
  it('serves the ICE setting and passes other requests on', async () => {
    const handle = labConfigHandler({ ice: 'stun:a:1', relayOnly: false });
    const server = createServer((req, res) => handle(req, res, () => res.writeHead(404).end('next')));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    try {
      const r = await fetch(`${base}${LAB_CONFIG_PATH}?x=1`);
      expect(r.headers.get('content-type')).toBe('application/json');
      expect(await r.json()).toEqual({ ice: 'stun:a:1', relayOnly: false }); // a STUN-only setting as it is
      expect((await fetch(`${base}/other`)).status).toBe(404);
      expect((await fetch(`${base}${LAB_CONFIG_PATH}`, { method: 'POST' })).status).toBe(404);
    } finally {
      server.close();
    }
  });

  it('is checked when the server starts', () => {
    expect(labConfigFromEnv({})).toEqual({ ice: '', relayOnly: false });
    expect(labConfigFromEnv({ LAB_ICE: 'u:p@turn:h:1', LAB_ICE_RELAY_ONLY: '1' })).toEqual({ ice: 'u:p@turn:h:1', relayOnly: true });
    expect(() => checkLabConfig({ ice: 'turn:h:1', relayOnly: false })).toThrow(/user name and a credential/);
    expect(() => labConfigFromEnv({ LAB_ICE_RELAY_ONLY: '1' })).toThrow(/relay-only/);
  });

  it('never holds TURN credentials: STUN entries and `turn: true` only', () => {
    expect(publicLabConfig({ ice: 'stun:a:1', relayOnly: false })).toEqual({ ice: 'stun:a:1', relayOnly: false });
    expect(publicLabConfig({ ice: '', relayOnly: false })).toEqual({ ice: '', relayOnly: false });
    const c = { ice: 'stun:a:1,user:pass@turn:h:1', relayOnly: true, turn: 'turns:h:5349', turnSecret: 's3cret' };
    const pub = publicLabConfig(checkLabConfig(c));
    expect(pub).toEqual({ ice: 'stun:a:1', relayOnly: false, turn: true });
    expect(JSON.stringify(pub)).not.toMatch(/pass|s3cret|user/);
    expect(publicLabConfig({ ice: 'u:p@turn:h:1', relayOnly: false })).toEqual({ ice: '', relayOnly: false, turn: true });
  });

  it('checks the TURN REST setting when the server starts', () => {
    expect(() => checkLabConfig({ ice: '', relayOnly: false, turn: 'turn:h:1' })).toThrow(/--turn-secret/);
    expect(() => checkLabConfig({ ice: '', relayOnly: false, turnSecret: 's' })).toThrow(/--turn URL/);
    expect(() => checkLabConfig({ ice: '', relayOnly: false, turn: 'stun:h:1', turnSecret: 's' })).toThrow(/not a turn/);
    expect(() => checkLabConfig({ ice: '', relayOnly: false, turn: 'turn:h:1', turnSecret: 's', turnTtlS: 5 })).toThrow(/at least 60/);
    expect(checkLabConfig({ ice: '', relayOnly: true, turn: 'turn:h:1', turnSecret: 's' }).relayOnly).toBe(true); // relay-only through --turn
    expect(labConfigFromEnv({ LAB_TURN: 'turn:h:1', LAB_TURN_SECRET: 's', LAB_TURN_TTL: '120' })).toMatchObject({ turn: 'turn:h:1', turnSecret: 's', turnTtlS: 120 });
  });

  it('derives a credential per member that a use-auth-secret TURN server takes until it expires', () => {
    let now = 1_700_000_000_000;
    expect(turnIssuer({ ice: 'stun:a:1', relayOnly: false })).toBeNull();
    const issue = turnIssuer({ ice: 'stun:a:1', relayOnly: false, turn: 'turn:h:3478?transport=udp,turn:h:3478?transport=tcp', turnSecret: 'shh' }, () => now)!;
    const g = issue('member-a');
    expect(g.expires).toBe(1_700_000_000 + TURN_TTL_S);
    expect(g.iceServers).toHaveLength(1);
    const s = g.iceServers[0];
    expect(s.urls).toEqual(['turn:h:3478?transport=udp', 'turn:h:3478?transport=tcp']);
    expect(s.username).toBe(`${g.expires}:member-a`);
    // RFC-draft TURN REST API / coturn: base64(HMAC-SHA1(secret, username)).
    expect(s.credential).toBe(createHmac('sha1', 'shh').update(s.username!).digest('base64'));
    now += 1000;
    expect(issue('member-b').iceServers[0].credential).not.toBe(s.credential);
    // Static TURN entries go only through the issuer (to proven members), as they are.
    expect(turnIssuer({ ice: 'u:p@turn:h:1', relayOnly: true })!('x')).toEqual({ iceServers: [{ urls: 'turn:h:1', username: 'u', credential: 'p' }], relayOnly: true, expires: null });
  });
});
