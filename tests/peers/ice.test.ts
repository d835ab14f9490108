import { describe, expect, it } from 'vitest';
import { describeIce, parseIce, rtcConfiguration } from '../../src/peers/transport/ice';

describe('ICE spec', () => {
  it('parses STUN and TURN entries, credentials percent-decoded', () => {
    const c = parseIce(' stun:stun.example.org:3478 , u%3Ase:p%40ss%2Cw@turn:turn.example.org:3478?transport=tcp ');
    expect(c).toEqual({
      relayOnly: false,
      servers: [{ urls: 'stun:stun.example.org:3478' }, { urls: 'turn:turn.example.org:3478?transport=tcp', username: 'u:se', credential: 'p@ss,w' }],
    });
    expect(describeIce(c)).toBe('stun:stun.example.org:3478, turn:turn.example.org:3478?transport=tcp');
    expect(describeIce(c)).not.toContain('p@ss');
    expect(rtcConfiguration(c)).toEqual({ iceServers: c.servers });
    expect(rtcConfiguration(parseIce('a:b@turns:h:5349', true))).toMatchObject({ iceTransportPolicy: 'relay' });
  });

  it('takes a JSON array of RTCIceServer', () => {
    const c = parseIce('[{"urls":["stun:a:1","turn:b:2"],"username":"x","credential":"y"}]', true);
    expect(c.servers[0].urls).toEqual(['stun:a:1', 'turn:b:2']);
    expect(c.relayOnly).toBe(true);
  });

  it('is none by default', () => {
    expect(parseIce('')).toEqual({ servers: [], relayOnly: false });
    expect(rtcConfiguration(undefined)).toEqual({ iceServers: [] });
    expect(describeIce(parseIce(''))).toMatch(/none/);
  });

  it.each([
    ['http://stun.example.org', /expected \[USER:SECRET@\]stun:/],
    ['turn:host:3478', /TURN server needs a user name and a credential/],
    ['@turn:host:3478', /credentials are USER:SECRET/],
    ['u:%zz@turn:host:1', /not valid percent-encoding/],
    ['stun:a b', /expected/],
    [Array.from({ length: 9 }, (_, i) => `stun:h${i}:1`).join(','), /at most 8/],
    ['[{"urls":"stun:a:1","extra":1}]', /ICE servers:/],
    ['[{"urls":"javascript:alert(1)"}]', /stun:, stuns:, turn: or turns: URL/],
    ['[not json', /not valid JSON/],
  ])('refuses %s', (spec, why) => {
    expect(() => parseIce(spec)).toThrow(why);
  });

  it('refuses relay-only without a TURN server', () => {
    expect(() => parseIce('stun:a:1', true)).toThrow(/relay-only ICE needs a TURN server/);
    expect(() => parseIce('', true)).toThrow(/relay-only/);
  });
});
