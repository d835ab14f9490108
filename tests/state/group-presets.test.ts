/**
 * Every preset in a group: each model (micro, tiny, small, base, a custom shape) with each mode
 * resolves through groupConfigProblem — what the panel's Start button and the controller's start()
 * check — and crosses the session wire as another member's Start; the combinations that cannot run
 * say why in the engine's words.
 */
import { describe, expect, it } from 'vitest';
import { type ModelConfig, PRESET_NAMES, PRESETS } from '../../src/engine/model/config';
import { DEFAULT_DILOCO, DEFAULT_GROUP_CONFIG, GROUP_PRESETS, type GroupRunConfig, groupConfigProblem, groupRunLabel, groupStepTokens, groupTrainOptions } from '../../src/state/group/config';
import { decodeSession, encodeSession } from '../../src/state/group/wire';

const CUSTOM: ModelConfig = { ...PRESETS.micro, hidden_size: 64, intermediate_size: 160, num_hidden_layers: 3, num_attention_heads: 4, num_key_value_heads: 4 };

const MODELS: { name: string; c: Pick<GroupRunConfig, 'preset' | 'model'> }[] = [
  ...PRESET_NAMES.map((preset) => ({ name: preset, c: { preset } })),
  { name: 'custom', c: { preset: 'tiny', model: CUSTOM } },
];

const streaming = (on: boolean) => (on ? 2 : 1);
const MODES: { name: string; c: Partial<GroupRunConfig> }[] = [
  { name: 'DP fp32', c: { mode: 'dp-fp32' } },
  { name: 'DP int8', c: { mode: 'dp-int8' } },
  ...(['fp32', 'int8', 'int4'] as const).flatMap((wire) =>
    [false, true].map((on) => ({ name: `DiLoCo ${wire}${on ? ' streaming' : ''}`, c: { mode: 'diloco' as const, diloco: { ...DEFAULT_DILOCO, innerSteps: 10, wire, fragments: streaming(on) } } })),
  ),
  { name: 'TP fp32', c: { mode: 'tp-fp32' } },
  { name: 'TP TACO', c: { mode: 'tp-taco' } },
];

describe('every preset in a group', () => {
  it('offers every preset the engine has', () => {
    expect([...GROUP_PRESETS]).toEqual([...PRESET_NAMES]);
  });

  for (const m of MODELS) {
    for (const mode of MODES) {
      it(`${m.name} · ${mode.name} on 2 members`, () => {
        const c = { ...DEFAULT_GROUP_CONFIG, ...m.c, ...mode.c } as GroupRunConfig;
        expect(groupConfigProblem(c, 2)).toBeNull();
        // The model trained is the one named (a custom shape replaces the preset's).
        const { vocab_size: _v, max_position_embeddings: _p, ...want } = m.c.model ?? PRESETS[m.c.preset];
        expect(groupTrainOptions(c, 2).model).toMatchObject(want);
        expect(groupRunLabel(c)).toContain(m.c.model ? 'custom 64×3' : m.c.preset);
        // Another member's Start carries it whole.
        const d = decodeSession(encodeSession({ t: 'run', v: 1, id: 'g1', config: c, members: ['a', 'b'], by: 'a' }));
        expect(d.ok && d.msg.t === 'run' && d.msg.config).toEqual(c);
      });
    }
  }

  it('says why a split cannot be made', () => {
    const tp = { ...DEFAULT_GROUP_CONFIG, mode: 'tp-taco' as const };
    // Every rank owns a KV head: small's 6 split 4 ways (unevenly), not 8; base's 12 split 8 ways.
    expect(groupConfigProblem({ ...tp, preset: 'small' }, 4)).toBeNull();
    expect(groupConfigProblem({ ...tp, preset: 'small' }, 8)).toMatch(/^small cannot be split across 8 members: .*8 KV heads \(6\)/);
    expect(groupConfigProblem({ ...tp, preset: 'base' }, 8)).toBeNull();
    const oneKv = { ...CUSTOM, num_key_value_heads: 1 };
    expect(groupConfigProblem({ ...tp, model: oneKv }, 2)).toMatch(/^custom 64×3 cannot be split across 2 members: .*KV heads \(1\)/);
    // Streaming fragments are cut along the custom model's layers, not the preset's.
    const diloco = { ...DEFAULT_GROUP_CONFIG, mode: 'diloco' as const, preset: 'tiny' as const, model: CUSTOM };
    expect(groupConfigProblem({ ...diloco, diloco: { ...DEFAULT_DILOCO, innerSteps: 12, fragments: 4 } }, 2)).toMatch(/4 fragments for custom 64×3, which has 3 layers/);
    expect(groupConfigProblem({ ...diloco, diloco: { ...DEFAULT_DILOCO, innerSteps: 12, fragments: 3 } }, 2)).toBeNull();
    // A broken custom model is refused before any GPU work.
    expect(groupConfigProblem({ ...DEFAULT_GROUP_CONFIG, model: { ...CUSTOM, num_attention_heads: 5 } }, 2)).toMatch(/model: .*divisible/);
  });

  it('counts the tokens the whole group trains in a step', () => {
    const c = { ...DEFAULT_GROUP_CONFIG, batch: 4, seq: 32 };
    expect(groupStepTokens(c, 3)).toBe(4 * 32 * 3);
    expect(groupStepTokens({ ...c, mode: 'diloco' }, 3)).toBe(4 * 32 * 3);
    // Tensor parallel: the members' shards train one batch together.
    expect(groupStepTokens({ ...c, mode: 'tp-fp32' }, 2)).toBe(4 * 32);
  });
});
