import { describe, expect, it } from 'vitest';
import { suggestKey, unknownKeys } from '../../src/engine/util/keys';

describe('unknown keys', () => {
  const valid = ['hidden_size', 'intermediate_size', 'num_hidden_layers', 'vocab_size'];
  it('names a misspelt key with the nearest valid one', () => {
    expect(unknownKeys({ hiden_size: 1, vocab_size: 2 }, valid, '--config c.json')).toEqual([
      "--config c.json: unknown key 'hiden_size' (did you mean 'hidden_size'?); expected one of hidden_size, intermediate_size, num_hidden_layers, vocab_size",
    ]);
  });
  it('suggests nothing when no key is close', () => {
    expect(suggestKey('learning_rate', valid)).toBe('');
    expect(unknownKeys({ vocab_size: 1 }, valid, 'x')).toEqual([]);
  });
});
