/**
 * Any Hugging Face tokenizer.json (GPT-2-style byte-level BPE, Llama-style BPE with byte fallback,
 * ...) through @huggingface/tokenizers, and the one entry point that turns a stored tokenizer (lab
 * JSON, tokenizer.json) into a Tokenizer. Files of exactly the shape the lab trains take the faster
 * ByteBpeTokenizer, which gives the library's ids.
 */
import { Tokenizer as HfLibTokenizer } from '@huggingface/tokenizers';
import { ByteBpeTokenizer, byteBpeSpecOf } from './byte-bpe';
import { CharTokenizer, type HfTokenizerJSON, type Tokenizer } from './tokenizer';

/** End-of-text tokens of common model families, tried when tokenizer_config.json names none. */
const EOS_NAMES = ['<|endoftext|>', '</s>', '<|end_of_text|>', '<|im_end|>', '<eos>'];

function tokenName(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (t && typeof t === 'object' && typeof (t as { content?: unknown }).content === 'string') return (t as { content: string }).content;
  return undefined;
}

export class HfTokenizer implements Tokenizer {
  readonly kind = 'hf' as const;
  readonly vocabSize: number;
  readonly eosId: number | null;
  private readonly lib: HfLibTokenizer;

  constructor(private readonly json: HfTokenizerJSON, private readonly config: Record<string, unknown> = {}) {
    if (typeof json !== 'object' || json === null || typeof json.model !== 'object' || json.model === null) {
      throw new Error('tokenizer.json has no "model" object (not a Hugging Face tokenizer file)');
    }
    try {
      this.lib = new HfLibTokenizer({ added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, ...json }, config);
    } catch (e) {
      throw new Error(`tokenizer.json: ${(e as Error).message}`);
    }
    let max = -1;
    for (const id of this.lib.get_vocab(true).values()) max = Math.max(max, id);
    if (max < 1) throw new Error('tokenizer.json has an empty vocabulary');
    this.vocabSize = max + 1;
    const names = [tokenName(config.eos_token), ...EOS_NAMES].filter((n): n is string => n !== undefined);
    this.eosId = names.map((n) => this.lib.token_to_id(n)).find((id) => id !== undefined) ?? null;
  }

  encode(text: string): Int32Array {
    const ids = this.lib.encode(text, { add_special_tokens: false }).ids;
    const out = Int32Array.from(ids);
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === undefined || ids[i] === null) throw new Error(`tokenizer.json has no token for part of the text near position ${i} (no unk_token)`);
    }
    return out;
  }

  decode(ids: ArrayLike<number>): string {
    if (ids.length === 0) return '';
    const list = Array.from(ids);
    list.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new Error(`token id ${id} at position ${i} is outside the vocabulary [0, ${this.vocabSize})`);
    });
    return this.lib.decode(list, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  toJSON(): HfTokenizerJSON {
    return this.json;
  }

  hfJSON(): HfTokenizerJSON {
    return this.json;
  }
}

/**
 * A tokenizer from what a checkpoint or a file holds: the lab's char JSON, or a tokenizer.json
 * (with its tokenizer_config.json when there is one, for the end-of-text token).
 */
export function tokenizerFromJSON(json: unknown, config?: Record<string, unknown>): Tokenizer {
  if (typeof json !== 'object' || json === null) throw new Error(`not a tokenizer: ${JSON.stringify(json)?.slice(0, 80)}`);
  if ((json as { type?: unknown }).type === 'char') return CharTokenizer.fromJSON(json);
  const hf = json as HfTokenizerJSON;
  if (typeof hf.model !== 'object' || hf.model === null) throw new Error('not a tokenizer: neither the lab\'s char tokenizer nor a tokenizer.json with a "model"');
  const spec = byteBpeSpecOf(hf);
  return spec ? new ByteBpeTokenizer(spec) : new HfTokenizer(hf, config);
}
