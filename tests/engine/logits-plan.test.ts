/**
 * The LM head's chunk rows without a GPU (plan/logits.ts, RunPlan.logitsRows): char-level presets keep
 * the logits whole; SmolLM2-360M's shape at B8×T512 (V 49,152: 805 MB of logits whole) runs 16 chunks
 * of 256 rows, so its QLoRA-INT4 plan with activation checkpointing drops under 2 GiB; forced rows are
 * checked (alignment of hF's rows and of its stored codes); the tuner lists the chunk's GEMM shapes.
 */
import { describe, expect, it } from 'vitest';
import { roundBufferSize } from '../../src/engine/gpu/memory';
import { defaultQloraSpec } from '../../src/engine/lora/qlora/plan';
import { defaultLoraSpec } from '../../src/engine/lora/spec';
import { PRESETS, validateModelConfig } from '../../src/engine/model/config';
import { modelDims } from '../../src/engine/model/dims';
import { LOGITS_CHUNK_BYTES, logitsChunkRows, logitsChunks } from '../../src/engine/plan/logits';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { planTuneJobs } from '../../src/engine/tune/jobs';

const m360 = validateModelConfig({
  vocab_size: 49152, hidden_size: 960, intermediate_size: 2560, num_hidden_layers: 32, num_attention_heads: 15, num_key_value_heads: 5,
  max_position_embeddings: 8192, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, initializer_range: 0.041666666666666664,
});
const logitsBytes = (p: ReturnType<typeof resolvePlan>) => p.buffers.find((b) => b.key === 'logits')!.bytes;

describe('logits chunk rows', () => {
  it('char-level presets keep the whole batch\'s logits (one chunk, as before)', () => {
    for (const [name, B, T] of [['micro', 2, 16], ['small', 64, 256], ['base', 16, 1024]] as const) {
      const p = resolvePlan(PRESETS[name], B, T);
      expect(p.logitsRows, name).toBe(B * T);
      expect(logitsBytes(p)).toBe(B * T * 65 * 4);
    }
  });

  it('SmolLM2-360M, QLoRA-INT4 r16, B8×T512, checkpointed: 16 chunks of 256 rows, the plan under 2 GiB', () => {
    const opts = { ...defaultTrainOptions('base', { batch: 8, seq: 512 }), model: m360, lora: defaultLoraSpec(16), qlora: defaultQloraSpec('int4'), checkpointActivations: true };
    const plan = resolveTrainingPlan(opts);
    const N = 8 * 512;
    expect(plan.model.logitsRows).toBe(256);
    expect(logitsChunks(N, 256)).toHaveLength(16);
    expect(logitsBytes(plan.model)).toBe(256 * 49152 * 4);
    expect(256 * 49152 * 4).toBeLessThanOrEqual(LOGITS_CHUNK_BYTES);
    // The whole batch's logits would be 805 MB: what the chunks save, byte for byte.
    const whole = resolvePlan(m360, 8, 512, { lora: opts.lora, qlora: opts.qlora, checkpointActivations: true, logitsChunkRows: N });
    expect(logitsBytes(whole) - logitsBytes(plan.model)).toBe((N - 256) * 49152 * 4);
    expect(plan.memory.total).toBeLessThan(2 * 2 ** 30);
    expect(plan.memory.total).toBe(plan.buffers.reduce((s, b) => s + roundBufferSize(b.bytes), 0));
  });

  it('prefers a divisor of N within half the cap, else the cap\'s rows with a shorter last chunk; aligns rows to 256-byte offsets', () => {
    const d = (N: number, C = 960, V = 49152) => ({ ...modelDims(m360, 1, N), C, V });
    expect(logitsChunkRows(d(4096), undefined)).toBe(256);
    // 4099 is prime: no divisor fits, so 341 rows (64 MiB / (V·4)) and a last chunk of 7.
    expect(logitsChunkRows(d(4099), undefined)).toBe(341);
    expect(logitsChunks(4099, 341).at(-1)).toEqual({ row0: 4092, rows: 7 });
    // C = 36: a chunk's hF rows start at 256-byte offsets only every 16 rows.
    expect(logitsChunkRows(d(4099, 36), undefined) % 16).toBe(0);
    // hF stored INT4 in groups of 32 (C = 960): codes and scales of a chunk's rows align every 32 rows... 341 → 320.
    const p = resolvePlan(m360, 1, 4099, { scheme: parseScheme({ name: 'h4', layer: { saved: { head_input: { format: 'int4', granularity: 'group', group: 32, rounding: 'nearest' } } } }) });
    expect(p.saved[32].hF?.format).toBe('int4');
    expect(p.logitsRows % 32).toBe(0);
    expect(p.logitsRows).toBeLessThanOrEqual(341);
  });

  it('forced rows are checked', () => {
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { logitsChunkRows: 0 })).toThrow(/logits chunk rows 0: expected an integer in \[1, 32\]/);
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { logitsChunkRows: 33 })).toThrow(/in \[1, 32\]/);
    // micro: C = 32, so an odd row count puts the next chunk's hF rows off a 256-byte offset.
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { logitsChunkRows: 7 })).toThrow(/logits chunk rows 7: .*256-byte offsets; pick a multiple that aligns, or 32/);
    expect(resolvePlan(PRESETS.micro, 2, 16, { logitsChunkRows: 12 }).logitsRows).toBe(12);
  });

  it('the tuner lists the chunks\' GEMM shapes (forward, dX, dW)', () => {
    const keys = planTuneJobs(resolvePlan(m360, 8, 512)).map((j) => j.label);
    expect(keys).toEqual(expect.arrayContaining([
      expect.stringMatching(/^256x49152x960 NT: .*lm_head forward/), expect.stringMatching(/^256x960x49152 NN: .*lm_head dX/), expect.stringMatching(/^49152x960x256 TN: .*lm_head dW/),
    ]));
    expect(keys.some((k) => k.startsWith('4096x49152x960'))).toBe(false);
  });
});
