import { describe, expect, it } from 'vitest';
import { mergeLora, mergeOne } from '../../../src/engine/lora/merge';
import { loraForwardRef } from '../../../src/engine/lora/lora.ref';
import { defaultLoraSpec, initLoraTensors, loraAdapters, loraScale, type LoraSpec } from '../../../src/engine/lora/spec';
import { paramSpecs, validateModelConfig } from '../../../src/engine/model/config';
import { Rng } from '../../../src/engine/util/rng';

// The shape of the PEFT fixture's model (tools/make-lora-fixture.py): GQA, intermediate not a multiple of 4·16.
const cfg = validateModelConfig({
  vocab_size: 96, hidden_size: 64, intermediate_size: 176, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  max_position_embeddings: 64, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: false, initializer_range: 0.02,
});

function baseParams(seed: number): Map<string, Float32Array> {
  const rng = new Rng(seed);
  return new Map(paramSpecs(cfg).map((p) => [p.name, rng.normalArray(p.shape.reduce((a, b) => a * b, 1), 0.05)]));
}

/** Adapters with nonzero B (PEFT's init has B = 0, which would make the merge trivially W). */
function adapters(spec: LoraSpec, seed: number): Map<string, Float32Array> {
  const t = initLoraTensors(cfg, spec, seed);
  const rng = new Rng(seed + 1);
  for (const a of loraAdapters(cfg, spec)) t.set(a.b, rng.normalArray(a.out * spec.rank, 0.02));
  return t;
}

function naiveMerge(w: Float32Array, A: Float32Array, B: Float32Array, nOut: number, nIn: number, r: number, s: number): Float32Array {
  const out = new Float32Array(nOut * nIn);
  for (let o = 0; o < nOut; o++) for (let i = 0; i < nIn; i++) {
    let acc = 0;
    for (let k = 0; k < r; k++) acc += B[o * r + k] * A[k * nIn + i];
    out[o * nIn + i] = w[o * nIn + i] + s * acc;
  }
  return out;
}

describe('mergeLora', () => {
  it('a LoRA forward (lora.ref) equals a plain forward through the merged weight, every adapter', () => {
    const spec: LoraSpec = { rank: 4, alpha: 8, dropout: 0, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] };
    const base = baseParams(1);
    const ad = adapters(spec, 2);
    const merged = mergeLora(cfg, spec, base, ad);
    const n = 6;
    const rng = new Rng(3);
    for (const a of loraAdapters(cfg, spec)) {
      const x = Float64Array.from(rng.normalArray(n * a.in));
      const lora = loraForwardRef({ w: base.get(a.base)!, a: ad.get(a.a)!, b: ad.get(a.b)!, in: a.in, out: a.out, r: spec.rank, scale: loraScale(spec) }, x, n).y;
      const plain = loraForwardRef({ w: merged.get(a.base)!, a: [], b: [], in: a.in, out: a.out, r: 0, scale: 0 }, x, n).y;
      const scale = Math.max(...Array.from(lora, Math.abs));
      const worst = Math.max(...Array.from(lora, (v, i) => Math.abs(v - plain[i])));
      expect(worst / scale, a.base).toBeLessThan(1e-6);
    }
  });

  it('equals the naive triple loop exactly, including leftover rows and rank components', () => {
    const rng = new Rng(4);
    for (const [nOut, nIn, r] of [[7, 5, 3], [8, 9, 4], [13, 6, 6], [4, 3, 1], [1, 11, 5], [9, 16, 16]]) {
      const w = rng.normalArray(nOut * nIn), A = rng.normalArray(r * nIn), B = rng.normalArray(nOut * r);
      expect(mergeOne(w, A, B, nOut, nIn, r, 1.75)).toEqual(naiveMerge(w, A, B, nOut, nIn, r, 1.75));
    }
  });

  it('only the targeted weights change; the rest are the base arrays themselves; B = 0 merges to W', () => {
    const spec = defaultLoraSpec(2, { targets: ['q', 'down'] });
    const base = baseParams(5);
    const merged = mergeLora(cfg, spec, base, adapters(spec, 6));
    const adapted = new Set(loraAdapters(cfg, spec).map((a) => a.base));
    for (const [name, w] of base) {
      if (adapted.has(name)) expect(merged.get(name)).not.toEqual(w);
      else expect(merged.get(name)).toBe(w);
    }
    const zeroB = mergeLora(cfg, spec, base, initLoraTensors(cfg, spec, 7));
    for (const name of adapted) expect(zeroB.get(name)).toEqual(base.get(name));
  });

  it('names every problem: missing base weight, wrong sizes, adapters not in the spec', () => {
    const spec = defaultLoraSpec(2, { targets: ['v'] });
    const base = baseParams(8);
    base.delete('model.layers.1.self_attn.v_proj.weight');
    const ad = adapters(spec, 9);
    ad.set('model.layers.0.self_attn.v_proj.lora_A.weight', new Float32Array(3));
    ad.set('model.layers.0.self_attn.q_proj.lora_A.weight', new Float32Array(128));
    let msg = '';
    try {
      mergeLora(cfg, spec, base, ad);
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/^cannot merge the LoRA adapters:/);
    expect(msg).toContain('base has no model.layers.1.self_attn.v_proj.weight [32, 64]');
    expect(msg).toContain('model.layers.0.self_attn.v_proj.lora_A.weight: 3 elements, want [2, 64]');
    expect(msg).toContain('adapters the spec does not have: model.layers.0.self_attn.q_proj.lora_A.weight');
  });
});
