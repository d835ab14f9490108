/**
 * SHA-256 for what the group's members vouch for (contributions, training states): WebCrypto's
 * native digest where there is one (Node, secure pages: several times faster on whole gradients),
 * else @noble/hashes' (a page served over plain http on a LAN).
 */
import { sha256 } from '@noble/hashes/sha2.js';

export const DIGEST_LEN = 32;

export async function digestOf(b: Uint8Array): Promise<Uint8Array> {
  const subtle = globalThis.crypto?.subtle;
  return subtle ? new Uint8Array(await subtle.digest('SHA-256', b as Uint8Array<ArrayBuffer>)) : sha256(b);
}

/** SHA-256 of the concatenated SHA-256s of the parts (each part hashed natively, whole). */
export async function digestOfParts(parts: readonly Uint8Array[]): Promise<Uint8Array> {
  const h = sha256.create();
  for (const p of parts) h.update(await digestOf(p));
  return h.digest();
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
