import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { attend, attendRef, gemv, gemvRef, ropeAt, ropeAtRef } from '../../src/engine/kernels/decode/decode';
import { ropeTablePacked } from '../../src/engine/kernels/rope/rope';
import { type ModelConfig, PRESETS } from '../../src/engine/model/config';
import { Decoder } from '../../src/engine/model/decode';
import { generateTokens } from '../../src/engine/model/generate';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const { up, track } = trackBuffers();

function step(rt: Awaited<ReturnType<typeof testRuntime>>, token: number, pos: number): GPUBuffer {
  return up(rt, new Uint32Array([token, pos]));
}

describe('decode kernels vs reference', () => {
  it('gemv: plain, accumulate, into row pos', async () => {
    const rt = await testRuntime();
    const [N, K, pos] = [37, 70, 3];
    const rng = new Rng(1);
    const x = rng.normalArray(K);
    const w = rng.normalArray(N * K);
    const y0 = rng.normalArray(N * 5);
    const want = gemvRef(x, w, N, K);
    const yb = up(rt, y0.slice());
    const [xb, wb] = [up(rt, x), up(rt, w)];
    rt.run([gemv(rt, { label: 'g', x: xb, w: wb, y: yb, step: step(rt, 0, pos), N, K })]);
    expectClose((await rt.readF32(yb)).subarray(0, N), want, { atol: 1e-4, label: 'gemv' });
    const acc = up(rt, y0.slice());
    rt.run([gemv(rt, { label: 'g', x: xb, w: wb, y: acc, step: step(rt, 0, pos), N, K, accumulate: true, atPos: true })]);
    const got = await rt.readF32(acc, 0, N * 5);
    expectClose(got.subarray(pos * N, pos * N + N), want.map((v, i) => v + y0[pos * N + i]), { atol: 1e-4, label: 'gemv acc at pos' });
    expectClose(got.subarray(0, pos * N), y0.subarray(0, pos * N), { atol: 0, rtol: 0, label: 'other rows untouched' });
  });

  it('rope at a position, into row 0 and into the cache row', async () => {
    const rt = await testRuntime();
    const [H, D, T, pos] = [3, 16, 9, 6];
    const table = ropeTablePacked(T, D, 10000);
    const x = new Rng(2).normalArray(H * D);
    const [xb, tb] = [up(rt, x), up(rt, table)];
    const want = ropeAtRef(x, table, H, D, T, pos);
    const y = track(rt.createBuffer('activations', 'y', H * D * 4));
    const cache = track(rt.createBuffer('activations', 'c', T * H * D * 4));
    rt.run([
      ropeAt(rt, { label: 'r', x: xb, y, table: tb, step: step(rt, 0, pos), H, D, tableT: T }),
      ropeAt(rt, { label: 'r', x: xb, y: cache, table: tb, step: step(rt, 0, pos), H, D, tableT: T, atPos: true }),
    ]);
    expectClose(await rt.readF32(y), want, { atol: 1e-5, label: 'rope row 0' });
    expectClose(await rt.readF32(cache, pos * H * D * 4, H * D), want, { atol: 1e-5, label: 'rope cache row' });
  });

  for (const c of [{ nH: 4, nKV: 2, D: 16, pos: 0 }, { nH: 6, nKV: 2, D: 64, pos: 130 }, { nH: 2, nKV: 1, D: 160, pos: 257 }]) {
    it(`attend over the cache nH${c.nH} nKV${c.nKV} D${c.D} pos ${c.pos}`, async () => {
      const rt = await testRuntime();
      const ctx = c.pos + 3;
      const rng = new Rng(3 + c.pos);
      const q = rng.normalArray(c.nH * c.D);
      const kc = rng.normalArray(ctx * c.nKV * c.D);
      const vc = rng.normalArray(ctx * c.nKV * c.D);
      const o = track(rt.createBuffer('activations', 'o', c.nH * c.D * 4));
      rt.run([attend(rt, { label: 'a', q: up(rt, q), kc: up(rt, kc), vc: up(rt, vc), o, step: step(rt, 0, c.pos), nH: c.nH, nKV: c.nKV, D: c.D, ctx })]);
      expectClose(await rt.readF32(o), attendRef(q, kc, vc, c.nH, c.nKV, c.D, c.pos), { atol: 1e-5, label: 'attend' });
    });
  }
});

/** Largest |a − b| over the largest |b|: the logits' relative error at one position. */
function relErr(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < b.length; i++) {
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return d / m;
}

/** A model at context T with seeded weights (larger than the init's, so logits differ clearly), and a full-forward twin. */
async function setup(cfg: ModelConfig, T: number) {
  const rt = await testRuntime();
  const layout = paramLayout(cfg);
  const flat = initParams(cfg, layout, 5).map((v) => v * 3);
  const full = buildModel(rt, cfg, 1, T, { training: false });
  full.uploadParams(flat);
  const dec = new Decoder(rt, cfg, full.b('weights'), T);
  const tokens = Array.from({ length: T + 1 }, (_, i) => (i * 7 + 3) % cfg.vocab_size);
  /** The full forward's logits [T, V] for `ids` (padded to T). */
  const fullLogits = async (ids: number[]) => {
    const batch = new Int32Array(T + 1);
    batch.set(ids.slice(0, T));
    full.setBatch(batch);
    rt.run(full.forwardLogits);
    return rt.readF32(full.b('logits'), 0, T * cfg.vocab_size);
  };
  return { rt, full, dec, tokens, fullLogits, V: cfg.vocab_size, done: () => { dec.destroy(); full.destroy(); } };
}

const GQA_TINY: ModelConfig = { ...PRESETS.tiny, vocab_size: 67, num_attention_heads: 4, num_key_value_heads: 1, num_hidden_layers: 3, max_position_embeddings: 32 };

describe('decoder with a KV cache', () => {
  for (const [name, cfg, T] of [['micro', PRESETS.micro, 32], ['tiny (GQA 4:1)', GQA_TINY, 32]] as const) {
    it(`${name}: logits at every position equal the full forward's (prefill of 1 and of T/2 tokens)`, async () => {
      const { dec, tokens, fullLogits, V, done } = await setup(cfg, T);
      const want = await fullLogits(tokens);
      const at = (p: number) => want.subarray(p * V, (p + 1) * V);
      let worst = 0;
      for (const P of [1, T / 2]) {
        let logits = await dec.prefill(tokens.slice(0, P));
        for (let p = P - 1; p < T; p++) {
          const e = relErr(logits, at(p));
          worst = Math.max(worst, e);
          expect(e, `${name} prefill ${P}, position ${p}`).toBeLessThanOrEqual(1e-4);
          if (p + 1 < T) logits = await dec.step(tokens[p + 1]);
        }
        expect(dec.length).toBe(T);
        await expect(dec.step(0)).rejects.toThrow(/context of \d+ tokens is full/);
      }
      console.log(`${name}: worst relative logit difference decoder vs full forward ${worst.toExponential(2)}`);
      done();
    }, 300_000);
  }

  it('greedy generation equals full-recompute greedy sampling; a seed gives the same tokens', async () => {
    const { dec, fullLogits, V, done } = await setup(PRESETS.micro, 32);
    const prompt = [5, 9, 2];
    const old = [...prompt];
    const N = 10; // tokens per generation (each greedy one is checked against a full recompute)
    for (let i = 0; i < N; i++) {
      const logits = await fullLogits(old);
      const row = logits.subarray((old.length - 1) * V, old.length * V);
      let best = 0;
      for (let j = 1; j < V; j++) if (row[j] > row[best]) best = j;
      old.push(best);
    }
    const collect = async (o: { temperature: number; seed: number; topK?: number }) => {
      const out: number[] = [];
      const it = generateTokens(dec, prompt, { maxTokens: N, topK: 0, topP: 1, ...o });
      for (;;) {
        const r = await it.next();
        if (r.done) return { out, summary: r.value };
        out.push(r.value);
      }
    };
    const greedy = await collect({ temperature: 0, seed: 0 });
    expect(greedy.out).toEqual(old.slice(prompt.length));
    expect(greedy.summary.reason).toBe('max_tokens');
    expect(greedy.summary.decodeSteps).toBe(N - 1);
    const a = await collect({ temperature: 1, seed: 7, topK: 10 });
    const b = await collect({ temperature: 1, seed: 7, topK: 10 });
    const c = await collect({ temperature: 1, seed: 8, topK: 10 });
    expect(b.out).toEqual(a.out);
    expect(c.out).not.toEqual(a.out);
    // The context (32) ends generation before the token budget does, and says so.
    const long = generateTokens(dec, prompt, { maxTokens: 100, temperature: 0, topK: 0, topP: 1, seed: 0 });
    let n = 0;
    let r = await long.next();
    for (; !r.done; r = await long.next()) n++;
    expect(r.value.reason).toBe('context');
    expect(n).toBe(32 - prompt.length + 1);
    done();
  }, 300_000);

  it('an imported bf16 GQA model (the transformers fixture) decodes to transformers\' logits at every position', async () => {
    const rt = await testRuntime();
    const dir = path.join(__dirname, '../fixtures/hf-llama/model');
    const ck = loadCheckpoint(Object.fromEntries(readdirSync(dir).map((n) => [n, new Uint8Array(readFileSync(path.join(dir, n)))])));
    const ref = JSON.parse(readFileSync(path.join(dir, 'logits.json'), 'utf8')) as { inputs: number[][]; logits: number[][][] };
    const dec = Decoder.withParams(rt, ck.config, ck.params);
    try {
      const ids = ref.inputs[0];
      const P = Math.floor(ids.length / 2);
      let logits = await dec.prefill(ids.slice(0, P));
      for (let p = P - 1; p < ids.length; p++) {
        expect(relErr(logits, ref.logits[0][p]), `position ${p}`).toBeLessThan(1e-4);
        if (p + 1 < ids.length) logits = await dec.step(ids[p + 1]);
      }
    } finally {
      dec.destroy();
    }
  }, 120_000);
});
