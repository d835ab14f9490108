import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { headDim, paramSpecs, PRESETS } from '../../src/engine/model/config';
import { initParams, paramLayout, unflatten } from '../../src/engine/model/params';
import { modelDims } from '../../src/engine/model/plan';
import { tpChunkProblem, tpPeerProblem } from '../../src/engine/model/tp/peer';
import { shardConfig, shardKind, shardParams, shardTensor, unshardParams, unshardTensor } from '../../src/engine/model/tp/shard';
import { tacoCompressRef, tacoPayload } from '../../src/engine/quant/taco';

const micro = PRESETS.micro;

describe('Megatron sharding', () => {
  it('classifies tensors: q/k/v/gate/up by rows, o/down by columns, the rest replicated', () => {
    const kinds = new Map(paramSpecs(PRESETS.tiny).map((s) => [s.name, shardKind(s.name)]));
    expect(kinds.get('model.layers.3.self_attn.q_proj.weight')).toBe('rows');
    expect(kinds.get('model.layers.0.self_attn.v_proj.weight')).toBe('rows');
    expect(kinds.get('model.layers.5.mlp.up_proj.weight')).toBe('rows');
    expect(kinds.get('model.layers.1.self_attn.o_proj.weight')).toBe('columns');
    expect(kinds.get('model.layers.2.mlp.down_proj.weight')).toBe('columns');
    for (const n of ['model.embed_tokens.weight', 'lm_head.weight', 'model.norm.weight', 'model.layers.0.input_layernorm.weight']) {
      expect(kinds.get(n), n).toBe('replicated');
    }
  });

  it("a shard is a narrower LLaMA with the full model's head dim", () => {
    const s = shardConfig(micro, 2);
    expect([s.num_attention_heads, s.num_key_value_heads, s.intermediate_size, headDim(s)]).toEqual([2, 1, 32, headDim(micro)]);
    const shapes = new Map(paramSpecs(s).map((p) => [p.name, p.shape]));
    const C = micro.hidden_size;
    expect(shapes.get('model.layers.0.self_attn.q_proj.weight')).toEqual([C / 2, C]);
    expect(shapes.get('model.layers.0.self_attn.o_proj.weight')).toEqual([C, C / 2]);
    expect(shapes.get('model.layers.0.self_attn.k_proj.weight')).toEqual([headDim(micro), C]);
    expect(shapes.get('model.layers.0.mlp.down_proj.weight')).toEqual([C, 32]);
    const d = modelDims(s, 4, 32);
    expect([d.QC, d.KVC, d.D, d.C]).toEqual([C / 2, headDim(micro), headDim(micro), C]);
    expect(() => shardConfig(micro, 4)).toThrow(/KV heads \(2\)/);
    expect(() => shardConfig(micro, 3)).toThrow(/must divide/);
  });

  it('shard → unshard is the identity for any split of rows and columns', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 1, max: 5 }), fc.integer({ min: 1, max: 5 }),
      fc.constantFrom('rows' as const, 'columns' as const), (t, r, k, kind) => {
        const shape = kind === 'rows' ? [r * t, k] : [r, k * t];
        const full = Float32Array.from({ length: shape[0] * shape[1] }, (_, i) => i + 0.5);
        const parts = Array.from({ length: t }, (_, rank) => shardTensor(full, shape, kind, rank, t));
        expect(parts.every((p) => p.length === full.length / t)).toBe(true);
        expect(unshardTensor(parts, shape, kind)).toEqual(full);
      }));
    // Row-parallel o_proj [C, C]: rank 1 of 2 holds the second half of every row.
    const o = Float32Array.from({ length: 8 }, (_, i) => i);
    expect(Array.from(shardTensor(o, [2, 4], 'columns', 1, 2))).toEqual([2, 3, 6, 7]);
    expect(Array.from(shardTensor(o, [2, 4], 'rows', 1, 2))).toEqual([4, 5, 6, 7]);
  });

  it('the ranks of a full model reassemble it exactly, and every shard fits its layout', () => {
    const layout = paramLayout(micro);
    const full = unflatten(initParams(micro, layout, 5), layout);
    const shardLayout = paramLayout(shardConfig(micro, 2));
    const ranks = [0, 1].map((r) => shardParams(full, micro, r, 2));
    for (const m of ranks) for (const v of shardLayout.views) expect(m.get(v.name)!.length, v.name).toBe(v.size);
    const back = unshardParams(ranks, micro);
    for (const [name, v] of full) expect(back.get(name), name).toEqual(v);
    // Every parameter of the full model is held once, except the replicated ones.
    const replicated = paramSpecs(micro).filter((s) => shardKind(s.name) === 'replicated').reduce((a, s) => a + s.shape.reduce((x, y) => x * y, 1), 0);
    expect(shardLayout.count * 2 - replicated).toBe(layout.count);
    expect(() => unshardParams([ranks[0], new Map()], micro)).toThrow(/rank 1 lacks/);
  });
});

describe('TP chunk checks', () => {
  const d = modelDims(shardConfig(micro, 2), 4, 32);
  const fp32 = { degree: 2, codec: 'fp32' as const, group: 128 };
  const taco = { degree: 2, codec: 'taco' as const, group: 128 };
  const m = (d.N * d.C) / 2;

  it('refuses unsupported groups', () => {
    expect(tpPeerProblem(d, fp32, 1)).toBeNull();
    expect(tpPeerProblem(d, taco)).toBeNull();
    expect(tpPeerProblem(d, { ...fp32, codec: 'int8' })).toMatch(/fp32 or taco/);
    expect(tpPeerProblem(d, fp32, 2)).toMatch(/rank 2/);
    expect(tpPeerProblem(modelDims(shardConfig(micro, 2), 1, 3), fp32)).toMatch(/multiple of 64/);
    expect(tpPeerProblem(modelDims(shardConfig(micro, 2), 1, 2), taco)).toMatch(/multiple of 64/);
    expect(tpPeerProblem(modelDims(shardConfig(micro, 2), 2, 4), { ...taco, group: 256 })).toMatch(/TACO group 256/);
  });

  it('accepts what a rank sends and rejects wrong sizes, non-finite values, out-of-range scales and NaN codes', () => {
    const x = Float32Array.from({ length: m }, (_, i) => Math.sin(i));
    const bytes = new Uint8Array(x.buffer);
    expect(tpChunkProblem(bytes, m, fp32)).toBeNull();
    expect(tpChunkProblem(bytes.subarray(4), m, fp32)).toMatch(/B, expected/);
    const nan = x.slice();
    nan[17] = NaN;
    expect(tpChunkProblem(new Uint8Array(nan.buffer), m, fp32)).toMatch(/non-finite value at 17/);
    const payload = tacoPayload(tacoCompressRef(x, 128));
    expect(tpChunkProblem(payload, m, taco)).toBeNull();
    expect(tpChunkProblem(payload.subarray(1), m, taco)).toMatch(/payload of/);
    const badCode = payload.slice();
    badCode[5] = 0xff;
    expect(tpChunkProblem(badCode, m, taco)).toMatch(/NaN code at 5/);
    const badScale = payload.slice();
    new DataView(badScale.buffer).setFloat32(m, NaN, true); // the first group's s
    expect(tpChunkProblem(badScale, m, taco)).toMatch(/scales/);
  });
});
