/**
 * Prompted generation in text: a prompt through a tokenizer into a Decoder, and the sampled tokens
 * back out as text as they come (one path for the trainer's samples, the CLI and the page's worker).
 */
import type { Decoder } from '../model/decode';
import { type GenerateOptions, type GenerateSummary, generateTokens, TextStream } from '../model/generate';
import type { Tokenizer } from './tokenizer/tokenizer';

/** The prompt's ids: its last `ctx` tokens when longer; an empty prompt starts from the end-of-text token (else id 0). */
export function promptIds(tokenizer: Tokenizer, prompt: string, ctx: number): number[] {
  if (!prompt.length) return [tokenizer.eosId ?? 0];
  const ids = Array.from(tokenizer.encode(prompt));
  if (!ids.length) return [tokenizer.eosId ?? 0];
  return ids.slice(-ctx);
}

/**
 * Generates after `prompt`, calling `onText` with each piece of text as soon as it is whole (a
 * byte-level token may end inside a character) and the count of tokens so far; stops at the
 * tokenizer's end-of-text token too.
 */
export async function streamText(decoder: Decoder, tokenizer: Tokenizer, prompt: string,
  o: Omit<GenerateOptions, 'vocab' | 'stopIds'>, onText: (text: string, tokens: number) => void): Promise<GenerateSummary & { text: string }> {
  const stream = new TextStream((ids) => tokenizer.decode(ids));
  const eos = tokenizer.eosId;
  const it = generateTokens(decoder, promptIds(tokenizer, prompt, decoder.ctx), {
    ...o, vocab: tokenizer.vocabSize, stopIds: eos === null ? [] : [eos],
  });
  let text = '';
  let tokens = 0;
  const emit = (t: string) => {
    if (!t) return;
    text += t;
    onText(t, tokens);
  };
  for (;;) {
    const r = await it.next();
    if (r.done) {
      emit(stream.flush());
      return { ...r.value, text };
    }
    tokens++;
    emit(stream.push(r.value));
  }
}
