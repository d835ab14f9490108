"""Makes the Hugging Face fixtures the import/export tests compare against (run once on the GPU
machine, which has transformers; the output is committed under tests/fixtures/).

  python3 make-hf-fixture.py CORPUS.txt OUTDIR                    # tests/fixtures/hf-llama
  python3 make-hf-fixture.py smollm2 CORPUS.txt OUTDIR            # tests/fixtures/hf-smollm2

- tokenizer/: a byte-level BPE tokenizer (vocabulary 320) trained by `tokenizers` on CORPUS, saved
  through PreTrainedTokenizerFast (tokenizer.json + tokenizer_config.json), and ids.json: the ids it
  gives for sample texts (ASCII, unicode, whitespace runs).
- model/: a random LlamaForCausalLM with GQA (4 heads, 2 KV heads), untied lm_head, saved in bf16 and
  sharded (model.safetensors.index.json + shards), and logits.json: its fp32 logits (computed from
  the bf16 weights upcast to fp32, eager attention) for two fixed id sequences.
- smollm2: one folder in the Hub's layout (what HuggingFaceTB/SmolLM2-135M's repo holds, scaled down):
  SmolLM2's shapes at a small size (9 heads / 3 KV heads, head_dim 8, 4 layers, tied embeddings,
  SiLU, rope_theta 100000, rms_norm_eps 1e-5, bos = eos = 0), one bf16 model.safetensors, a byte-level
  BPE tokenizer (vocabulary 384) with SmolLM2's first special tokens, generation_config.json, and
  logits.json (fp32 logits and the mean next-token loss of two id sequences) and ids.json.
"""
import json, os, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def llama_fixture(corpus, out):
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


def smollm2_fixture(corpus, out):
    """SmolLM2-135M's architecture scaled down, saved as its Hub repo is laid out (one folder)."""
    text = open(corpus, encoding='utf-8').read()[:200_000]
    os.makedirs(out, exist_ok=True)
    # SmolLM2's tokenizer: GPT-2-style byte-level BPE whose first ids are its special tokens (0 <|endoftext|>, 1 <|im_start|>, 2 <|im_end|>).
    specials = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=specials, show_progress=False))
    assert [tok.token_to_id(t) for t in specials] == [0, 1, 2], [tok.token_to_id(t) for t in specials]
    vocab = tok.get_vocab_size()
    # The trainer made all three special tokens already; bos = eos = unk as in SmolLM2's tokenizer_config.json.
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token='<|endoftext|>', eos_token='<|endoftext|>', unk_token='<|endoftext|>', model_max_length=128)
    fast.save_pretrained(out)
    samples = ['First Citizen:\nBefore we proceed any further, hear me speak.', 'naïve café — 東京 🚀', '  two  spaces\n\n\ttab', 'ROMEO: O, she doth teach the torches to burn bright!']
    json.dump({'samples': [{'text': s, 'ids': fast.encode(s), 'decoded': fast.decode(fast.encode(s))} for s in samples]}, open(f'{out}/ids.json', 'w'), ensure_ascii=False, indent=1)

    torch.manual_seed(0)
    # SmolLM2-135M: hidden 576 = 9 heads x 64, 3 KV heads, intermediate 1536, 30 layers, vocab 49152. Here: 9 x 8 = 72, 3 KV heads, 192, 4 layers.
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=72, intermediate_size=192, num_hidden_layers=4, num_attention_heads=9,
                      num_key_value_heads=3, head_dim=8, max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=100000.0,
                      tie_word_embeddings=True, hidden_act='silu', attention_bias=False, mlp_bias=False, initializer_range=0.041666666666666664,
                      bos_token_id=0, eos_token_id=0, pad_token_id=None)
    # transformers 5 keeps rope_theta in rope_parameters; make sure it is SmolLM2's 100000 whichever version runs this.
    if isinstance(getattr(cfg, 'rope_parameters', None), dict):
        cfg.rope_parameters['rope_theta'] = 100000.0
    else:
        cfg.rope_theta = 100000.0
    cfg._attn_implementation = 'eager'
    m = LlamaForCausalLM(cfg).eval()
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr(), 'lm_head must be tied to embed_tokens'
    with torch.no_grad():
        for p in m.parameters(): p.copy_(p.to(torch.bfloat16).to(torch.float32))  # weights exactly representable in bf16
        seqs = [fast.encode(samples[0])[:48], fast.encode(samples[3])[:48]]
        logits = [m(torch.tensor([s])).logits[0].tolist() for s in seqs]
        losses = [m(torch.tensor([s]), labels=torch.tensor([s])).loss.item() for s in seqs]  # mean next-token cross-entropy
    m.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)  # also writes generation_config.json (bos/eos 0)
    json.dump({'inputs': seqs, 'logits': logits, 'loss': losses, 'torch': torch.__version__}, open(f'{out}/logits.json', 'w'))
    files = sorted(os.listdir(out))
    print('files:', files)
    assert 'model.safetensors' in files and 'model.safetensors.index.json' not in files, 'SmolLM2 ships one model.safetensors'
    saved = json.load(open(f'{out}/config.json'))
    theta = saved.get('rope_theta', (saved.get('rope_parameters') or {}).get('rope_theta'))
    assert theta == 100000.0 and saved['tie_word_embeddings'] is True and saved['num_key_value_heads'] == 3, saved
    from safetensors import safe_open
    with safe_open(f'{out}/model.safetensors', 'pt') as f:
        assert 'lm_head.weight' not in f.keys(), 'tied: save_pretrained must omit lm_head.weight'
    m2 = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32)
    print('reload max diff', (m2(torch.tensor([seqs[0]])).logits[0] - torch.tensor(logits[0])).abs().max().item(), 'losses', losses)


if __name__ == '__main__':
    if sys.argv[1] == 'smollm2':
        smollm2_fixture(sys.argv[2], sys.argv[3])
    else:
        llama_fixture(sys.argv[1], sys.argv[2])
