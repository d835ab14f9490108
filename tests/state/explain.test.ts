/** Validation messages say what is expected, with an example of the accepted form. */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { modelFromText, parseModelConfig, runConfigProblem } from '../../src/state/explain';
import { parseSchemeText } from '../../src/state/scheme-grid';
import { DEFAULT_RUN_CONFIG } from '../../src/worker/protocol';

describe('errors that teach', () => {
  it('a scheme cell given as the grid writes it ("int4") says what object is expected', () => {
    const r = parseSchemeText(JSON.stringify({ name: 'x', layer: { saved: { norm_input: 'int4' } } }));
    expect('error' in r && r.error).toMatch(/layer\.saved\.norm_input: expected an object, got a string \("int4"\); e\.g\. \{"format":"int4","granularity":"group","group":128,"rounding":"nearest"\}/);
    const bad = parseSchemeText(JSON.stringify({ name: 'x', layer: { saved: { swiglu: { format: 'int3' } } } }));
    expect('error' in bad && bad.error).toMatch(/format: must be one of .*"int4"/);
    const typo = parseSchemeText(JSON.stringify({ name: 'x', grds: {} }));
    expect('error' in typo && typo.error).toMatch(/unknown key "grds"/);
    expect((parseSchemeText('{') as { error: string }).error).toMatch(/not JSON.*e\.g\. \{"name"/);
  });

  it('run settings and model configs say the bound and give an example', () => {
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, batch: 0 })).toBe('batch: must be at least 1; e.g. 8');
    // Data too short for one sequence is refused before Start (an 11-character file: 9 tokens to train on, 2 to validate).
    const tiny = { key: 'a'.repeat(64), files: [{ name: 'tiny.txt', bytes: 11 }], field: 'text', tokens: { train: 9, val: 2 }, bytes: { train: 9, val: 2 }, documents: { train: 1, val: 1 } };
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, data: tiny })).toBe('the data is too short: it has 9 tokens to train on and 2 tokens to validate on, and one sequence of context 32 needs 33; use a longer text or a shorter context');
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, seq: 8, evalEvery: 0, data: tiny })).toBeNull();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, steps: 2.5 })).toMatch(/^steps: .*; e\.g\. 200$/);
    expect(runConfigProblem(DEFAULT_RUN_CONFIG)).toBeNull();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, evalEvry: 5 })).toMatch(/^settings: unknown key "evalEvry" .* \(did you mean 'evalEvery'\?\)/);
    const m = parseModelConfig({ ...PRESETS.micro, hidden_size: 'big' }, PRESETS.micro);
    expect('error' in m && m.error).toMatch(new RegExp(`hidden_size: expected a number, got a string \\("big"\\); e\\.g\\. ${PRESETS.micro.hidden_size}`));
    expect(parseModelConfig(PRESETS.micro, PRESETS.micro)).toEqual({ model: PRESETS.micro });
  });

  it('a custom model from config.json text: missing keys from the preset, foreign keys dropped, bad text taught', () => {
    const r = modelFromText('{"hidden_size": 64, "architectures": ["LlamaForCausalLM"], "model_type": "llama"}', PRESETS.micro);
    expect(r).toEqual({ model: { ...PRESETS.micro, hidden_size: 64 } });
    expect(modelFromText('{"hidden_size": ', PRESETS.micro)).toMatchObject({ error: expect.stringMatching(/^not JSON: .*Expected an object of Hugging Face LlamaConfig keys/) });
    expect(modelFromText('[1, 2]', PRESETS.micro)).toMatchObject({ error: expect.stringMatching(/^expected an object/) });
    expect(modelFromText('{"hidden_size": "big"}', PRESETS.micro)).toMatchObject({ error: expect.stringMatching(/hidden_size: expected a number/) });
    // A misspelt key is refused as the CLI refuses it (the same check), not dropped.
    expect(modelFromText('{"hiden_size": 64}', PRESETS.micro)).toMatchObject({ error: expect.stringMatching(/^config: unknown key 'hiden_size' \(did you mean 'hidden_size'\?\)/) });
  });
});
