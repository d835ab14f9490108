/**
 * The weights hash on the GPU (reference and definition: ./hash.ref.ts): one dispatch per binding-sized
 * run of each buffer adds its sum into one word, and only that word is read back — a group compares
 * its members' weights every step without copying them to the host.
 */
import hashWgsl from './hash.wgsl?raw';
import { type Runtime, Uniforms } from '../../gpu/runtime';
import { finishHash } from './hash.ref';
import { grid2d } from '../launch';

const WORDS_PER_GROUP = 256 * 16;

export interface HashPart {
  buffer: GPUBuffer;
  /** Floats (words) from the start of the buffer. */
  words: number;
}

/** floatsHash of the parts' contents, in order, computed on the GPU. */
export async function hashBuffers(rt: Runtime, label: string, parts: HashPart[]): Promise<number> {
  const acc = rt.createBuffer('workspace', `${label}.acc`, 16);
  const uniforms: GPUBuffer[] = [];
  try {
    rt.write(acc, new Uint32Array(4));
    // Bindings start on multiples of the group's words so every run but the last fills its groups.
    const limit = Math.min(rt.device.limits.maxStorageBufferBindingSize, 2 ** 31) / 4;
    const chunk = Math.max(WORDS_PER_GROUP, Math.floor(limit / WORDS_PER_GROUP) * WORDS_PER_GROUP);
    const dispatches = [];
    let base = 0;
    for (const p of parts) {
      if (!(Number.isInteger(p.words) && p.words >= 0 && p.words * 4 <= p.buffer.size)) throw new Error(`${label}: ${p.words} words do not fit a ${p.buffer.size}-byte buffer`);
      for (let w0 = 0; w0 < p.words; w0 += chunk) {
        const n = Math.min(chunk, p.words - w0);
        const workgroups = grid2d(rt, Math.ceil(n / WORDS_PER_GROUP));
        const u = rt.uniform(label, new Uniforms().u32(n).u32((base + w0) >>> 0).u32(workgroups[0]).u32(0));
        uniforms.push(u);
        dispatches.push(rt.kernel({ label, code: hashWgsl, bindings: [u, { buffer: p.buffer, offset: w0 * 4, size: n * 4 }, acc], workgroups }));
      }
      base += p.words;
    }
    rt.run(dispatches);
    const [sum] = await rt.readU32(acc, 0, 1);
    return finishHash(sum, base);
  } finally {
    rt.mem.free(acc);
    for (const u of uniforms) rt.mem.free(u);
  }
}
