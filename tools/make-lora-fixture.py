"""Makes the PyTorch + PEFT LoRA fixture that the lab's LoRA training is replayed against (issue 39),
and checks that PEFT loads an adapter directory written by the lab's exporter.

  python3 tools/make-lora-fixture.py tests/fixtures/lora-peft
  python3 tools/make-lora-fixture.py tests/fixtures/lora-peft --check-ours tests/fixtures/lora-peft/ours
  python3 tools/make-lora-fixture.py tests/fixtures/lora-peft --check-only --check-ours DIR

Needs torch, transformers and peft (peft brings accelerate and psutil). Runs on the CPU in seconds
(--device cuda works too; TF32 is switched off so fp32 stays IEEE fp32). Writes into OUT:

- base/: a random LlamaForCausalLM (2 layers, hidden 64, intermediate 176, 4 heads / 2 KV heads,
  vocab 96, untied lm_head, rope_theta 10000, rms_norm_eps 1e-5, fp32, seed 0), saved by
  save_pretrained (config.json + model.safetensors). Training runs on the model loaded back from it.
- adapter-init/: PEFT's save_pretrained of get_peft_model(base, LoraConfig(r=4, lora_alpha=8,
  lora_dropout=0.0, all 7 linear layers, bias="none", task_type="CAUSAL_LM")) after lora_B was set to
  N(0, 0.02) (PEFT inits B = 0; a nonzero B gives A a gradient from step 0, a sharper test).
- adapter-final/: the same after 10 training steps, and adam-final.safetensors: AdamW's exp_avg /
  exp_avg_sq per adapter tensor under the lab's names ("exp_avg.model.layers.0.self_attn.q_proj.lora_A.weight").
- replay.json: the model config (the lab's ModelConfig keys), the LoRA spec and optimizer settings
  (the lab's LoraSpec and OptimizerConfig shapes), tokens[step] = [B, T+1] ids (B 4, T 16, Zipf-
  distributed from a seeded torch.Generator; step s trains on inputs [:, :T] and targets [:, 1:]), and per step the loss
  (mean cross-entropy over B·T of batch s before update s, float64 in JSON) and the total gradient
  norm before clipping; final_loss_batch0: the trained model's loss on batch 0 (eval mode).

The optimizer matches the lab's AdamW (src/engine/optim/adamw.ts, adamw.wgsl, adamw.ref.ts) exactly:
- torch.optim.AdamW, single-tensor path (foreach=False, fused=False, which the lab's kernel mirrors
  op for op): decoupled weight decay p *= 1 − lr·wd, then m.lerp_(g, 1 − β1), v = β2·v + (1 − β2)·g²,
  p −= lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + eps);
- one group, weight decay 0.1 on every trainable tensor: the lab decays all adapter tensors
  (loraParamSpecs: decay true; they are matrices), and there are no biases or norms among them;
- lr 1e-2 constant: the lab's schedule with warmup_steps 0 and min_lr = lr (written so in replay.json);
- betas (0.9, 0.99), eps 1e-8 (the lab's defaults for micro-sized runs);
- clip_grad_norm_(trainable params, 1.0) before each step: coef = min(1, 1/(norm + 1e-6)) over the
  global L2 norm of the adapter gradients only (the frozen base has no gradients), as the lab's
  kernel folds clip into the update;
- loss = F.cross_entropy(logits.float(), targets) (mean), eager attention, fp32 throughout.

--check-ours DIR: loads DIR (an adapter written by the lab's exportPeftAdapter; its expected.json
holds the spec the lab meant: rank, alpha, targets) onto OUT/base with PeftModel.from_pretrained,
checks that PEFT read every tensor unchanged and the config as meant, and compares its logits with the
base whose weights were merged by hand in torch (W + alpha/r · B @ A, from expected.json, not from
adapter_config.json) and with PEFT's merge_and_unload. Prints the max abs differences; exit 1 above 1e-5.
"""
import argparse, copy, json, os, sys
# Everything is local; offline also stops PEFT's save_pretrained from asking the Hub whether
# base_model_name_or_path ("base") names a repo there (its vocab-size check for embedding layers).
os.environ.setdefault('HF_HUB_OFFLINE', '1')
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM
import transformers, peft
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict

MODEL = dict(vocab_size=96, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
             tie_word_embeddings=False, initializer_range=0.02)
TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj']
LAB_TARGETS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down']
R, ALPHA, STEPS, B, T = 4, 8, 10, 4, 16
OPT = dict(lr=1e-2, min_lr=1e-2, warmup_steps=0, total_steps=STEPS, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1, grad_clip=1.0)
PREFIX = 'base_model.model.'

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('out')
ap.add_argument('--device', default='cpu')
ap.add_argument('--check-ours', metavar='DIR', help="an adapter directory written by the lab's exportPeftAdapter")
ap.add_argument('--check-only', action='store_true', help='skip making the fixture (OUT/base must exist)')
ap.add_argument('--tol', type=float, default=1e-5)
args = ap.parse_args()
dev = torch.device(args.device)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
out = args.out


def load_base():
    m = LlamaForCausalLM.from_pretrained(f'{out}/base', dtype=torch.float32, attn_implementation='eager')
    # get_peft_model copies this into adapter_config.json's base_model_name_or_path: the sibling folder.
    m.name_or_path = 'base'
    return m.to(dev)


def lab_name(peft_key):
    """base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight -> the lab's name."""
    return peft_key.removeprefix(PREFIX).replace('.default.', '.')


def make():
    torch.manual_seed(0)
    cfg = LlamaConfig(**MODEL, hidden_act='silu', attention_bias=False, mlp_bias=False)
    cfg._attn_implementation = 'eager'
    LlamaForCausalLM(cfg).save_pretrained(f'{out}/base')
    model = load_base()
    model = get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS, bias='none', task_type='CAUSAL_LM'))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if 'lora_B' in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all('lora_' in n for n, _ in trainable), [n for n, _ in trainable if 'lora_' not in n]
    assert len(trainable) == 2 * len(TARGETS) * MODEL['num_hidden_layers']
    model.save_pretrained(f'{out}/adapter-init')

    # Zipf-distributed ids (p ∝ 1/(i+1)): learnable in a few steps, so the loss falls well beyond batch noise
    # and a wrong update shows in it (uniform ids would leave it flat at ln 96).
    zipf = 1.0 / torch.arange(1, MODEL['vocab_size'] + 1, dtype=torch.float64)
    tokens = torch.multinomial(zipf / zipf.sum(), STEPS * B * (T + 1), replacement=True,
                               generator=torch.Generator().manual_seed(1234)).reshape(STEPS, B, T + 1)
    params = [p for _, p in trainable]
    opt = torch.optim.AdamW(params, lr=OPT['lr'], betas=(OPT['beta1'], OPT['beta2']), eps=OPT['eps'],
                            weight_decay=OPT['weight_decay'], foreach=False, fused=False)
    losses, norms = [], []
    model.train()
    for s in range(STEPS):
        batch = tokens[s].to(dev)
        logits = model(input_ids=batch[:, :T], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, MODEL['vocab_size']), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, OPT['grad_clip'], foreach=False)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
        print(f'step {s}: loss {losses[-1]:.9f}  grad norm {norms[-1]:.6g}')
    model.save_pretrained(f'{out}/adapter-final')
    state = {}
    for n, p in trainable:
        st = opt.state[p]
        state[f'exp_avg.{lab_name(n)}'] = st['exp_avg'].detach().cpu().contiguous()
        state[f'exp_avg_sq.{lab_name(n)}'] = st['exp_avg_sq'].detach().cpu().contiguous()
    save_file(state, f'{out}/adapter-final/adam-final.safetensors', metadata={'format': 'pt', 'step': str(STEPS)})
    model.eval()
    with torch.no_grad():
        batch = tokens[0].to(dev)
        final = F.cross_entropy(model(input_ids=batch[:, :T], use_cache=False).logits.float().reshape(-1, MODEL['vocab_size']), batch[:, 1:].reshape(-1)).item()
    replay = {
        'format': 'lab-lora-replay-v1',
        'model': MODEL,
        'lora': {'rank': R, 'alpha': ALPHA, 'dropout': 0.0, 'targets': LAB_TARGETS},
        'optimizer': OPT, 'batch': B, 'seq': T, 'steps': STEPS,
        'lora_b_init': 'N(0, 0.02) from torch.Generator seed 1, over named_parameters() order',
        'tokens': tokens.tolist(),
        'losses': losses, 'grad_norms': norms, 'final_loss_batch0': final,
        'versions': {'torch': torch.__version__, 'transformers': transformers.__version__, 'peft': peft.__version__},
    }
    with open(f'{out}/replay.json', 'w') as f:
        json.dump(replay, f)
    # The saved adapters must load back through PEFT (what users do) and give the trained model's logits.
    back = PeftModel.from_pretrained(load_base(), f"{out}/adapter-final").eval()
    with torch.no_grad():
        x = tokens[0, :, :T].to(dev)
        d = (back(input_ids=x, use_cache=False).logits - model(input_ids=x, use_cache=False).logits).abs().max().item()
    print(f'final loss on batch 0 {final:.9f}; adapter-final reloaded by PEFT: max abs logit diff {d:.3g}')
    print('files:', {sub: sorted(os.listdir(f'{out}/{sub}')) for sub in ('base', 'adapter-init', 'adapter-final')})
    return d <= args.tol


def check_ours(d):
    """PEFT loads the lab's adapter directory and computes what the lab meant."""
    want = json.load(open(os.path.join(d, 'expected.json')))
    if want['model'] != MODEL:
        print(f"expected.json's model {want['model']} is not this fixture's {MODEL}")
        return False
    scale = want['alpha'] / want['rank']
    base = load_base().eval()
    ours = PeftModel.from_pretrained(copy.deepcopy(base), d).eval()
    ok = True
    c = ours.peft_config['default']
    got_targets = sorted(c.target_modules)
    if (c.r, c.lora_alpha, got_targets) != (want['rank'], want['alpha'], sorted(want['target_modules'])):
        print(f'config read by PEFT: r {c.r} alpha {c.lora_alpha} targets {got_targets}; want {want}')
        ok = False
    file = load_file(os.path.join(d, 'adapter_model.safetensors'))
    loaded = {k: v.cpu() for k, v in get_peft_model_state_dict(ours).items()}
    if set(loaded) != set(file):
        print('tensor names differ: only in file', sorted(set(file) - set(loaded))[:5], 'only in PEFT', sorted(set(loaded) - set(file))[:5])
        ok = False
    else:
        worst = max((loaded[k] - file[k]).abs().max().item() for k in file)
        print(f'{len(file)} adapter tensors read by PEFT, max abs diff from the file {worst:.3g}')
        ok &= worst == 0
    merged = copy.deepcopy(base)
    sd = merged.state_dict()
    with torch.no_grad():
        for k, a in file.items():
            if '.lora_A.' not in k:
                continue
            bk = k.replace('.lora_A.', '.lora_B.')
            w = k.removeprefix(PREFIX).replace('.lora_A.weight', '.weight')
            sd[w].add_(scale * (file[bk].to(dev) @ a.to(dev)))
    tokens = torch.tensor(json.load(open(f'{out}/replay.json'))['tokens'][0])[:, :T].to(dev)
    with torch.no_grad():
        lp = ours(input_ids=tokens, use_cache=False).logits
        lm = merged(input_ids=tokens, use_cache=False).logits
        lb = base(input_ids=tokens, use_cache=False).logits
        lu = copy.deepcopy(ours).merge_and_unload()(input_ids=tokens, use_cache=False).logits
    d1, d2, d0 = (lp - lm).abs().max().item(), (lu - lm).abs().max().item(), (lp - lb).abs().max().item()
    print(f'ours: PEFT vs hand-merged logits max abs diff {d1:.3g}; merge_and_unload vs hand-merged {d2:.3g}; (adapter vs bare base {d0:.3g})')
    return ok and d1 <= args.tol and d2 <= args.tol and d0 > 10 * args.tol


print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'device', dev)
good = True
if not args.check_only:
    os.makedirs(out, exist_ok=True)
    good &= make()
if args.check_ours:
    good &= check_ours(args.check_ours)
print('OK' if good else 'FAILED')
sys.exit(0 if good else 1)
