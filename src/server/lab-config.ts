/**
 * GET /lab-config.json: what the server tells its pages before they join a group — today the ICE
 * servers (`npm start -- --ice SPEC`, or LAB_ICE / LAB_ICE_RELAY_ONLY for the Vite servers). Checked
 * when the server starts, so a typo fails there and not in every page.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseIce } from '../peers/transport/ice';

export const LAB_CONFIG_PATH = '/lab-config.json';

export interface LabServerConfig {
  /** An ICE spec (src/peers/transport/ice.ts), '' for none. */
  ice: string;
  relayOnly: boolean;
}

/** The config from the environment of a Vite server (LAB_ICE, LAB_ICE_RELAY_ONLY=1). */
export function labConfigFromEnv(env: NodeJS.ProcessEnv = process.env): LabServerConfig {
  return checkLabConfig({ ice: env.LAB_ICE ?? '', relayOnly: env.LAB_ICE_RELAY_ONLY === '1' });
}

export function checkLabConfig(c: LabServerConfig): LabServerConfig {
  parseIce(c.ice, c.relayOnly);
  return c;
}

/** A request handler that answers LAB_CONFIG_PATH and passes everything else on. */
export function labConfigHandler(c: LabServerConfig) {
  const body = JSON.stringify(c);
  return (req: IncomingMessage, res: ServerResponse, next: () => void): void => {
    const url = (req.url ?? '').split('?')[0];
    if (url !== LAB_CONFIG_PATH || (req.method !== 'GET' && req.method !== 'HEAD')) return next();
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
}
