"""Checks a lab export with transformers: the tokenizer gives our ids, the model generates text through pipeline()."""
import json, sys
from transformers import AutoTokenizer, pipeline, LlamaForCausalLM
d = sys.argv[1]
tok = AutoTokenizer.from_pretrained(d)
ours = json.load(open(f'{d}/our_ids.json'))
same = [tok.encode(s['text'], add_special_tokens=False) == s['ids'] for s in ours]
print('tokenizer ids equal to ours:', same)
m = LlamaForCausalLM.from_pretrained(d)
gen = pipeline('text-generation', model=d, tokenizer=d, device=0)
out = gen('ROMEO:', max_new_tokens=20, do_sample=True, temperature=0.8)
print('pipeline output:', json.dumps(out[0]['generated_text']))
print('RESULT', 'ok' if all(same) and len(out[0]['generated_text']) > len('ROMEO:') else 'fail')
