/**
 * Rooms of a peer group: room ids, the links that carry them, where the PeerServer is, the PeerJS ids
 * of a room's members, and the room key behind admission (challenge–response). Runs unchanged in
 * the page and in Node (WebCrypto via globalThis.crypto).
 *
 * A room id is 128 random bits (26 base32 characters) and is the room's secret: whoever holds the
 * link can join. Members find each other through the PeerServer's room listing, which answers only
 * to the room's discovery key (a hash of the room id); a member's PeerJS id carries a tag of the
 * room and a mark that only a discovery-key holder can make, never the room id itself. Admission
 * needs the room key, derived from the room id and the optional passphrase (PBKDF2), which is never
 * sent: the two sides run a PAKE on it (src/peers/room/pake.ts).
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { keyCommitment } from './identity';

/** Bytes of randomness in a room id (≥ 128 bits, as the issue asks). */
export const ROOM_ID_BYTES = 16;
/** Where the embedded PeerServer is mounted on the page's origin. */
export const PEER_SERVER_PATH = '/peerjs';
/** The PeerServer's API key (PeerJS's default; the embedded server uses it too). */
export const PEER_SERVER_KEY = 'peerjs';
/** Bytes of a challenge nonce. */
export const NONCE_BYTES = 32;
/** PBKDF2 iterations turning (room, passphrase) into the room key: slows offline guessing of a weak passphrase. */
const KEY_ITERATIONS = 100_000;

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const ROOM_ID_RE = /^[a-z2-7]{26,64}$/;

/** RFC 4648 base32, lowercase, no padding (ids that survive URLs and PeerJS's id rules). */
export function base32(bytes: Uint8Array): string {
  let out = '';
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += BASE32[(acc >>> (bits - 5)) & 31];
      bits -= 5;
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out += BASE32[(acc << (5 - bits)) & 31];
  return out;
}

export function randomBytes(n: number): Uint8Array {
  return crypto.getRandomValues(new Uint8Array(n));
}

/** A fresh room id: 128 random bits as 26 base32 characters. */
export function createRoomId(): string {
  return base32(randomBytes(ROOM_ID_BYTES));
}

export function isRoomId(s: string): boolean {
  return ROOM_ID_RE.test(s);
}

export class RoomLinkError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RoomLinkError';
  }
}

/**
 * The link that joins a room: the page URL with `?room=<id>` (and `&server=<url>` when the group uses
 * a PeerServer other than the page's own, so that whoever opens the link meets the same server).
 */
export function roomLink(pageUrl: string, room: string, server?: string): string {
  if (!isRoomId(room)) throw new RoomLinkError(`not a room id: '${room}'`);
  const url = new URL(pageUrl);
  url.search = '';
  url.hash = '';
  url.searchParams.set('room', room);
  if (server !== undefined) url.searchParams.set('server', parseServerUrl(server).url);
  return url.toString();
}

export interface ParsedRoomLink {
  room: string;
  /** The page the link points at (its origin hosts the embedded PeerServer). */
  page: string;
  /** The PeerServer the link names, if it names one (`?server=`). */
  server?: string;
}

/** Reads a room link; every problem is a RoomLinkError that says what is wrong with it. */
export function parseRoomLink(link: string): ParsedRoomLink {
  let url: URL;
  try {
    url = new URL(link.trim());
  } catch {
    throw new RoomLinkError(`not a link: '${link}' (expected something like http://host:5173/?room=<id>)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new RoomLinkError(`a room link is http(s), got '${url.protocol}'`);
  const room = url.searchParams.get('room');
  if (room === null) throw new RoomLinkError(`the link has no ?room= parameter: ${link}`);
  if (!isRoomId(room)) throw new RoomLinkError(`the link's room id '${room}' is malformed (26+ characters a-z, 2-7 expected)`);
  const server = url.searchParams.get('server');
  const page = new URL(url.pathname, url.origin).toString();
  if (server === null) return { room, page };
  return { room, page, server: parseServerUrl(server).url };
}

/** Where a PeerServer is, in the shape PeerJS's Peer options take. */
export interface PeerServerAddress {
  host: string;
  port: number;
  /** Mount path, ending with '/'. */
  path: string;
  secure: boolean;
  key: string;
  /** The same address as one URL (http(s)://host:port/path), for links and messages. */
  url: string;
}

/** Parses `http(s)://host[:port][/path]` (the path defaults to /peerjs, the embedded server's). */
export function parseServerUrl(s: string): PeerServerAddress {
  let url: URL;
  try {
    url = new URL(s.trim());
  } catch {
    throw new RoomLinkError(`not a PeerServer URL: '${s}' (expected http(s)://host:port/path)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new RoomLinkError(`a PeerServer URL is http(s), got '${url.protocol}'`);
  const secure = url.protocol === 'https:';
  const port = url.port ? Number(url.port) : secure ? 443 : 80;
  const raw = url.pathname === '/' ? PEER_SERVER_PATH : url.pathname;
  const path = raw.endsWith('/') ? raw : `${raw}/`;
  return { host: url.hostname, port, path, secure, key: PEER_SERVER_KEY, url: `${url.protocol}//${url.host}${path.slice(0, -1)}` };
}

/** The PeerServer embedded in the server that serves `pageUrl` (same origin, PEER_SERVER_PATH). */
export function sameOriginServer(pageUrl: string): PeerServerAddress {
  return parseServerUrl(new URL(PEER_SERVER_PATH, new URL(pageUrl).origin).toString());
}

/** The PeerServer a page at `pageUrl` uses: its `?server=` parameter if present, else its own origin's. */
export function serverForPage(pageUrl: string): PeerServerAddress {
  const explicit = new URL(pageUrl).searchParams.get('server');
  return explicit === null ? sameOriginServer(pageUrl) : parseServerUrl(explicit);
}

/** The URL listing the members of one room (the embedded server's room-scoped listing). */
export function peerListUrl(a: PeerServerAddress, discovery: string): string {
  return `${a.secure ? 'https' : 'http'}://${a.host}:${a.port}${a.path}${a.key}/rooms/${discovery}`;
}

const encoder = new TextEncoder();

function sha256Of(...parts: string[]): Uint8Array {
  return sha256(encoder.encode(parts.join('\0')));
}

/**
 * The room's discovery key: what a member shows the PeerServer to list the room's members
 * (peerListUrl). Derived from the room id, so it proves the link without revealing it; the server
 * learns it, so it proves nothing about the passphrase.
 */
export function roomDiscoveryKey(room: string): string {
  return base32(sha256Of('wgpg-room-discovery', room).subarray(0, 20));
}

/** The tag that prefixes a room's member ids (80 bits of SHA-256 of the discovery key). */
export function tagOfDiscoveryKey(discovery: string): string {
  return base32(sha256Of('wgpg-room-tag', discovery).subarray(0, 10));
}

/** The tag of a room (members' ids start with it). */
export function roomTag(room: string): string {
  return tagOfDiscoveryKey(roomDiscoveryKey(room));
}

/** The part of a member id that only a holder of the discovery key can compute for its random part. */
function linkMark(discovery: string, random: string): string {
  return base32(sha256Of('wgpg-member-mark', discovery, random).subarray(0, 10));
}

const MEMBER_ID_RE = /^([a-z2-7]{16})-([a-z2-7]{16})-([a-z2-7]{16})$/;
/** Longest id the embedded PeerServer registers (a member id is 50 characters). */
export const MAX_PEER_ID_LENGTH = 50;

/**
 * A member's PeerJS id: `<tag>-<key>-<mark>` ([a-z2-7] runs joined by '-', as PeerJS allows). The
 * key part commits to the member's signing key (identity.ts), so a signature is checked against
 * the id alone; the mark binds it to the discovery key: ids under a room's tag that a stranger
 * registers (it may know the tag from one id) fail isMemberId, so nobody lists or dials them.
 */
export function memberId(discovery: string, publicKey: Uint8Array): string {
  const key = base32(keyCommitment(publicKey));
  return `${tagOfDiscoveryKey(discovery)}-${key}-${linkMark(discovery, key)}`;
}

/** Whether member id `id` commits to `publicKey` (its key part); false for any other id. */
export function memberIdBindsKey(id: string, publicKey: Uint8Array): boolean {
  const m = MEMBER_ID_RE.exec(id);
  return m !== null && publicKey.length === 32 && m[2] === base32(keyCommitment(publicKey));
}

/** The room tag of a member id, or null for an id that is not shaped like one. */
export function tagOfMemberId(id: string): string | null {
  return MEMBER_ID_RE.exec(id)?.[1] ?? null;
}

/** Whether `id` is a member id of the room with this discovery key (its tag and mark check out). */
export function isMemberId(id: string, discovery: string): boolean {
  const m = MEMBER_ID_RE.exec(id);
  return m !== null && m[1] === tagOfDiscoveryKey(discovery) && m[3] === linkMark(discovery, m[2]);
}

/**
 * The room key's bytes: PBKDF2-SHA256 over the passphrase (empty when there is none) salted with
 * the room id. Never sent; admission proves it through a PAKE (src/peers/room/pake.ts).
 */
export async function deriveRoomKey(room: string, passphrase: string): Promise<Uint8Array> {
  // The password is prefixed so that it is never empty (some WebCrypto builds refuse empty PBKDF2 keys).
  const base = await crypto.subtle.importKey('raw', encoder.encode(`wgpg-pass\0${passphrase}`), 'PBKDF2', false, ['deriveBits']);
  const bits = await crypto.subtle.deriveBits({ name: 'PBKDF2', hash: 'SHA-256', salt: encoder.encode(`wgpg-room-key\0${room}`), iterations: KEY_ITERATIONS }, base, 256);
  return new Uint8Array(bits);
}

export function toBase64(bytes: Uint8Array): string {
  let s = '';
  for (const b of bytes) s += String.fromCharCode(b);
  return btoa(s);
}

/** Decodes base64; null for anything that is not base64 (input from the network). */
export function fromBase64(s: string): Uint8Array | null {
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}
