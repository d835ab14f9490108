"""Makes the Hugging Face fixtures the import/export tests compare against (run once on the GPU
machine, which has transformers; the output is committed under tests/fixtures/hf-llama/).

  python3 make-hf-fixture.py CORPUS.txt OUTDIR

- tokenizer/: a byte-level BPE tokenizer (vocabulary 320) trained by `tokenizers` on CORPUS, saved
  through PreTrainedTokenizerFast (tokenizer.json + tokenizer_config.json), and ids.json: the ids it
  gives for sample texts (ASCII, unicode, whitespace runs).
- model/: a random LlamaForCausalLM with GQA (4 heads, 2 KV heads), untied lm_head, saved in bf16 and
  sharded (model.safetensors.index.json + shards), and logits.json: its fp32 logits (computed from
  the bf16 weights upcast to fp32, eager attention) for two fixed id sequences.
"""
import json, os, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

corpus, out = sys.argv[1], sys.argv[2]
text = open(corpus, encoding='utf-8').read()[:200_000]
os.makedirs(f'{out}/tokenizer', exist_ok=True)
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=['<|endoftext|>'], show_progress=False))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token='<|endoftext|>', bos_token='<|endoftext|>')
fast.save_pretrained(f'{out}/tokenizer')
samples = ['First Citizen:\nBefore we proceed any further, hear me speak.', 'naïve café — 東京 🚀', '  two  spaces\n\n\ttab', 'ROMEO: O, she doth teach the torches to burn bright!']
json.dump({'samples': [{'text': s, 'ids': fast.encode(s), 'decoded': fast.decode(fast.encode(s))} for s in samples]}, open(f'{out}/tokenizer/ids.json', 'w'), ensure_ascii=False, indent=1)

torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=False, hidden_act='silu', attention_bias=False, mlp_bias=False)
cfg._attn_implementation = 'eager'
m = LlamaForCausalLM(cfg).eval()
with torch.no_grad():
    for p in m.parameters(): p.copy_(p.to(torch.bfloat16).to(torch.float32))  # weights exactly representable in bf16
    seqs = [fast.encode(samples[0])[:32], fast.encode(samples[3])[:32]]
    logits = [m(torch.tensor([s])).logits[0].tolist() for s in seqs]
m.to(torch.bfloat16).save_pretrained(f'{out}/model', max_shard_size='100KB', safe_serialization=True)
json.dump({'inputs': seqs, 'logits': logits, 'torch': torch.__version__}, open(f'{out}/model/logits.json', 'w'))
print('files:', sorted(os.listdir(f'{out}/model')), sorted(os.listdir(f'{out}/tokenizer')))
# The exported fixture must load back through transformers (what users do).
m2 = LlamaForCausalLM.from_pretrained(f'{out}/model', torch_dtype=torch.float32)
print('reload max diff', (m2(torch.tensor([seqs[0]])).logits[0] - torch.tensor(logits[0])).abs().max().item())
