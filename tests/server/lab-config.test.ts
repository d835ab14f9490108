import { createServer } from 'node:http';
import { describe, expect, it } from 'vitest';
import { checkLabConfig, LAB_CONFIG_PATH, labConfigFromEnv, labConfigHandler } from '../../src/server/lab-config';

describe('/lab-config.json', () => {
  it('serves the ICE setting and passes other requests on', async () => {
    const handle = labConfigHandler({ ice: 'stun:a:1', relayOnly: false });
    const server = createServer((req, res) => handle(req, res, () => res.writeHead(404).end('next')));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    try {
      const r = await fetch(`${base}${LAB_CONFIG_PATH}?x=1`);
      expect(r.headers.get('content-type')).toBe('application/json');
      expect(await r.json()).toEqual({ ice: 'stun:a:1', relayOnly: false });
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
});
