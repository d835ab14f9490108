/**
 * A member's signing identity: an Ed25519 key pair (@noble/curves) whose public key its id commits
 * to, so any member can check a signature against the id alone — no key distribution to trust.
 * The verified all-reduce signs each contribution's digest with it, which lets a contribution be
 * relayed and an echo be checked (verified-reduce.ts). How an id commits to a key is the
 * transport's id scheme: a room member id carries a hash of the key (room.ts), a loopback hub
 * keeps a registry.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha256 } from '@noble/hashes/sha2.js';

export const PUBLIC_KEY_BYTES = 32;
export const SIGNATURE_BYTES = 64;

export interface Identity {
  readonly publicKey: Uint8Array;
  sign(message: Uint8Array): Uint8Array;
  /** Whether `publicKey` is member `peer`'s key under this transport's id scheme. */
  binds(peer: string, publicKey: Uint8Array): boolean;
}

export interface KeyPair {
  secretKey: Uint8Array;
  publicKey: Uint8Array;
}

export function newKeyPair(): KeyPair {
  return ed25519.keygen();
}

/** The identity of a key pair under the id scheme `binds`. */
export function identityOf(keys: KeyPair, binds: Identity['binds']): Identity {
  return { publicKey: keys.publicKey, sign: (m) => ed25519.sign(m, keys.secretKey), binds };
}

/** Ed25519 verification that never throws (signatures and keys come from the network). */
export function verifySignature(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean {
  if (signature.length !== SIGNATURE_BYTES || publicKey.length !== PUBLIC_KEY_BYTES) return false;
  try {
    return ed25519.verify(signature, message, publicKey);
  } catch {
    return false;
  }
}

/** The 10 bytes of SHA-256 an id carries for its key (80 bits: a second key for the same id is out of reach). */
export function keyCommitment(publicKey: Uint8Array): Uint8Array {
  const tagged = new Uint8Array(16 + publicKey.length);
  tagged.set(new TextEncoder().encode('wgpg-member-key\0'));
  tagged.set(publicKey, 16);
  return sha256(tagged).subarray(0, 10);
}
