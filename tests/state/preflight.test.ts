/** The pre-flight check of a plan against the adapter's limits. */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { preflight } from '../../src/state/preflight';
import { DEFAULT_RUN_CONFIG, trainOptionsFor } from '../../src/worker/protocol';

const GiB = 2 ** 30;

describe('preflight', () => {
  it('passes micro on common limits, and names the buffer a huge config cannot allocate', () => {
    const limits = { maxBufferSize: 4 * GiB, maxStorageBufferBindingSize: 2 * GiB };
    expect(preflight(trainOptionsFor(DEFAULT_RUN_CONFIG), limits).problem).toBeNull();
    const huge = { ...PRESETS.micro, hidden_size: 8192, intermediate_size: 22016, num_hidden_layers: 96, num_attention_heads: 64, num_key_value_heads: 64 };
    const p = preflight(trainOptionsFor({ ...DEFAULT_RUN_CONFIG, model: huge, batch: 64, seq: 512 }), limits);
    expect(p.problem).toMatch(/exceeds? this GPU's maxBufferSize \(4\.00 GiB\): the largest, .+, is \d+ GiB/);
    expect(p.largest!.bytes).toBeGreaterThan(4 * GiB);
  });

  it('checks storage bindings separately, and says nothing without limits', () => {
    const opts = trainOptionsFor(DEFAULT_RUN_CONFIG);
    const { largest } = preflight(opts, undefined);
    expect(preflight(opts, undefined).problem).toBeNull();
    const p = preflight(opts, { maxBufferSize: 4 * GiB, maxStorageBufferBindingSize: largest!.bytes - 4 });
    expect(p.problem).toMatch(/maxStorageBufferBindingSize/);
  });
});
