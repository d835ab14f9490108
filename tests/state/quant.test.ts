/**
 * The lab's quantization-error and bits/wire plumbing without a browser: worker messages into the
 * store, exports, the bits and wire counts behind the plots, and the TP-split advice.
 */
import { describe, expect, it } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { PRESETS } from '../../src/engine/model/config';
import { tpWireBytes } from '../../src/engine/model/tp/tp';
import { modelDims } from '../../src/engine/model/plan';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { bitsAndWire } from '../../src/engine/train/probe-bits';
import { allReduceWireBytes } from '../../src/peers/collectives/allreduce';
import { createLabStore } from '../../src/state/lab';
import { newRun, restoredRun, runAccounting, runCsv, runJson, type RunState } from '../../src/state/runs';
import { checkRunConfig, DEFAULT_RUN_CONFIG, type FromWorker, tpMismatch } from '../../src/worker/protocol';

const metrics = (runId: string, step: number): FromWorker => ({
  type: 'metrics', runId, metrics: { step, loss: 4 - step / 10, lr: 1e-3, grad_norm: 1, tokens_per_s: 100, mem: emptyMemReport(), elapsed_s: step },
});

describe('quantization error in the store and exports', () => {
  it('folds quant messages, drops re-run ones on continue, and exports them as CSV columns and JSON', () => {
    const store = createLabStore(() => 5);
    const s = () => store.getState();
    const id = s().addRun({ ...DEFAULT_RUN_CONFIG, scheme: SCHEME_PRESETS.agoq });
    const info = { adapter: 'x', params: 10, vocabSize: 65, memory: emptyMemReport() };
    s().applyMessage({ type: 'ready', runId: id, info, startStep: 0 });
    for (let i = 0; i < 4; i++) s().applyMessage(metrics(id, i));
    s().applyMessage({ type: 'quant', runId: id, step: 1, errors: [{ layer: 0, kind: 'swiglu', rel_err: 0.12 }, { layer: 1, kind: 'head_input', rel_err: 0.1 }] });
    s().applyMessage({ type: 'quant', runId: id, step: 3, errors: [{ layer: 0, kind: 'swiglu', rel_err: 0.11 }] });
    expect(s().runs[id].quant.map((q) => q.step)).toEqual([1, 3]);
    const csv = runCsv(s().runs[id]).trim().split('\n');
    expect(csv[0]).toBe('step,loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s,qerr_L0_swiglu,qerr_L1_head_input');
    expect(csv[1].endsWith(',,')).toBe(true);
    expect(csv[2].endsWith(',0.12,0.1')).toBe(true);
    expect(csv[4].endsWith(',0.11,')).toBe(true);
    const json = JSON.parse(runJson(s().runs[id])) as { quant_error: { step: number }[]; bits_and_wire: { saved: { overall: number } } };
    expect(json.quant_error.map((q) => q.step)).toEqual([1, 3]);
    expect(json.bits_and_wire.saved.overall).toBeLessThan(16);
    // Continuing from a checkpoint at step 2 re-runs steps 2 and 3: their measurements go.
    s().applyMessage({ type: 'ready', runId: id, info, startStep: 2 });
    expect(s().runs[id].quant.map((q) => q.step)).toEqual([1]);
  });

  it('a run saved before quant errors existed comes back with an empty list', () => {
    const { quant: _gone, ...old } = newRun('r', DEFAULT_RUN_CONFIG, 1);
    const back = restoredRun({ ...old, status: 'done' } as RunState);
    expect(back.quant).toEqual([]);
    expect(runCsv(back).split('\n')[0]).toBe('step,loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s');
  });
});

describe('bits per element and wire bytes', () => {
  it('are the exact storage and protocol counts, and the worker\'s figures win over the config\'s', () => {
    const cfg = PRESETS.micro;
    const fp = bitsAndWire(resolvePlan(cfg, 4, 32, { scheme: SCHEME_PRESETS.fp32 }));
    const agoq = bitsAndWire(resolvePlan(cfg, 4, 32, { scheme: SCHEME_PRESETS.agoq }));
    const taco = bitsAndWire(resolvePlan(cfg, 4, 32, { scheme: SCHEME_PRESETS['taco-tp2'] }));
    expect(fp.saved.overall).toBe(32);
    expect(fp.saved.perLayer.map((l) => l.bits)).toEqual([32, 32]);
    expect(fp.grads.bits).toBe(32);
    // INT4 in groups of 128 (4.25 bits) for all but attention (fp32); INT8 gradients in blocks of 256 (8.125 bits, per tensor).
    expect(agoq.saved.perKind.swiglu).toBeCloseTo(4.25, 6);
    expect(agoq.saved.perKind.attn_qkv).toBe(32);
    expect(agoq.saved.perKind.oproj_input).toBeNull();
    expect(agoq.saved.overall).toBeGreaterThan(4.25);
    expect(agoq.saved.overall).toBeLessThan(16);
    expect(agoq.grads.bits).toBeGreaterThan(8.125);
    expect(agoq.grads.bits).toBeLessThan(8.5);
    // Layer 1 holds the final norm's tensors too (INT4), so it averages fewer bits than layer 0.
    expect(agoq.saved.perLayer[1].bits).toBeLessThan(agoq.saved.perLayer[0].bits);
    // DP: the same gradient under both all-reduces; INT8 about a quarter of fp32.
    expect(agoq.dp).toEqual(fp.dp);
    expect(fp.dp.fp32Bytes).toBe(allReduceWireBytes(fp.grads.elements, 2, 0, 'fp32'));
    expect(fp.dp.int8Bytes / fp.dp.fp32Bytes).toBeGreaterThan(0.25);
    expect(fp.dp.int8Bytes / fp.dp.fp32Bytes).toBeLessThan(0.27);
    expect(fp.tp).toBeNull();
    // TP: 4 all-reduces per layer and step, TACO's payload against fp32's.
    const d = modelDims(cfg, 4, 32);
    expect(taco.tp).toMatchObject({ degree: 2, codec: 'taco', perAllReduceBytes: tpWireBytes(d, SCHEME_PRESETS['taco-tp2'].tp) });
    expect(taco.tp!.stepBytes).toBe(4 * 2 * taco.tp!.perAllReduceBytes);
    expect(taco.tp!.stepBytes).toBeLessThan(taco.tp!.fp32StepBytes * 0.3);
    expect(taco.saved.overall).toBe(32);

    const run = newRun('r', { ...DEFAULT_RUN_CONFIG, batch: 4, scheme: SCHEME_PRESETS.agoq }, 1);
    expect(runAccounting(run)).toEqual(agoq);
    const built = { ...agoq, dp: { ...agoq.dp, fp32Bytes: 1 } };
    expect(runAccounting({ ...run, info: { adapter: 'x', params: 1, vocabSize: 65, memory: emptyMemReport(), accounting: built } }).dp.fp32Bytes).toBe(1);
  });
});

describe('TP split advice', () => {
  it('refuses taco on micro (4 heads, 2 KV heads) and points to taco-tp2; taco-tp2 and taco on base pass', () => {
    const micro = { ...DEFAULT_RUN_CONFIG, batch: 4, seq: 32 };
    const m = tpMismatch(SCHEME_PRESETS.taco, { model: PRESETS.micro, batch: 4, seq: 32 });
    expect(m?.problem).toMatch(/TP degree 4/);
    expect(m?.alternatives).toEqual(['taco-tp2']);
    expect(checkRunConfig({ ...micro, scheme: SCHEME_PRESETS.taco })).toMatch(/cannot split this model.*use taco-tp2 instead/);
    expect(checkRunConfig({ ...micro, scheme: SCHEME_PRESETS['taco-tp2'] })).toBeNull();
    expect(tpMismatch(SCHEME_PRESETS['taco-tp2'], { model: PRESETS.micro, batch: 4, seq: 32 })).toBeNull();
    expect(tpMismatch(SCHEME_PRESETS.agoq, { model: PRESETS.micro, batch: 4, seq: 32 })).toBeNull();
    expect(tpMismatch(SCHEME_PRESETS.taco, { model: PRESETS.base, batch: 4, seq: 256 })).toBeNull();
    // A batch × context whose chunks do not fill TACO's groups: the fp32 baseline has no TACO alternative that fits either.
    const odd = tpMismatch(SCHEME_PRESETS['tp4-fp32'], { model: PRESETS.micro, batch: 1, seq: 3 });
    expect(odd?.alternatives).toEqual([]);
    expect(odd?.message).toMatch(/pick another TP degree/);
  });
});
