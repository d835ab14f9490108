/**
 * Node only (never imported by page code): gives PeerJS the browser globals it expects —
 * RTCPeerConnection and friends from @roamhq/wrtc (a native addon), WebSocket from `ws`. PeerJS
 * probes WebRTC support when its module is first loaded, so call this before the first
 * PeerJsTransport.open() (which loads PeerJS lazily for that reason).
 */
import { createRequire } from 'node:module';
import { WebSocket } from 'ws';

const WEBRTC_GLOBALS = ['RTCPeerConnection', 'RTCSessionDescription', 'RTCIceCandidate', 'RTCDataChannel', 'MediaStream'] as const;

/**
 * `ws` emits a failed connection as an EventEmitter 'error', which throws (a stack trace, the process
 * gone) when nobody listens; PeerJS only watches the close that follows and reports it as its own error.
 */
class NodeWebSocket extends WebSocket {
  constructor(...args: ConstructorParameters<typeof WebSocket>) {
    super(...args);
    this.on('error', () => {});
  }
}

export function installNodeWebRtc(): void {
  // createRequire keeps the native addon out of esbuild bundles (it is loaded from node_modules at run time).
  const wrtc = createRequire(import.meta.url)('@roamhq/wrtc') as Record<(typeof WEBRTC_GLOBALS)[number], unknown>;
  const g = globalThis as Record<string, unknown>;
  for (const name of WEBRTC_GLOBALS) g[name] ??= wrtc[name];
  g.WebSocket ??= NodeWebSocket;
}
