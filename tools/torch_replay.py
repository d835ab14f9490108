#!/usr/bin/env python3
"""Independent PyTorch replay of a lab training run.

Reads a run directory written by the Node CLI and retrains it step by step with PyTorch, comparing
the losses. The model is a from-scratch LLaMA following Hugging Face conventions (nothing imported
from transformers for it); transformers is used only by --hf-check, to cross-check this model.

Run directory:
  run.json             {"model": {HF LlamaConfig keys}, "optimizer": {lr, min_lr, warmup_steps,
                        total_steps, beta1, beta2, eps, weight_decay, grad_clip}, "batch", "seq", "seed"}
  init/model.safetensors   initial weights (HF names, F32)
  batches.npy          int32 [steps, batch, seq+1]: step s trains on x = [:, :seq], y = [:, 1:]
  metrics.jsonl        {"step": s, "loss": ...} per training step (loss of batch s before update s);
                       lines with "val_loss" are validation and are skipped
  model.safetensors + config.json (optional)   the checkpoint after the last step, as `npm run train`
                       writes it (also accepted under final/); used by --hf-check and for comparing the
                       replayed final weights

Usage:
  python3 tools/torch_replay.py RUN_DIR [--dtype float32|float64] [--device cpu|cuda] [--tol 1e-3]
                                        [--steps N] [--hf-check] [--skip-replay] [--json OUT]
Exit status: 0 on agreement, 1 when the max relative loss difference exceeds --tol (or the HF logits
differ by more than --hf-tol), 2 on unusable input.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------- files

_ST_DTYPES = {'F64': '<f8', 'F32': '<f4', 'F16': '<f2', 'I64': '<i8', 'I32': '<i4', 'I16': '<i2', 'I8': 'i1',
              'U8': 'u1', 'BOOL': 'u1', 'U16': '<u2', 'U32': '<u4', 'U64': '<u8'}


def read_safetensors(path):
    """Minimal safetensors reader (own code, so the check does not trust the library the lab mimics)."""
    with open(path, 'rb') as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f'{path}: too short for a safetensors file')
    (n,) = struct.unpack('<Q', buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f'{path}: header length {n} runs past the end of the file')
    header = json.loads(buf[8:8 + n].decode('utf-8'))
    meta = header.pop('__metadata__', {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info['data_offsets']
        shape = tuple(info['shape'])
        dt = info['dtype']
        if base + e > len(buf):
            raise ValueError(f'{path}: tensor {name} runs past the end of the file')
        if dt == 'BF16':
            bits = np.frombuffer(buf, dtype='<u2', count=(e - b) // 2, offset=base + b).astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dt in _ST_DTYPES:
            npdt = np.dtype(_ST_DTYPES[dt])
            arr = np.frombuffer(buf, dtype=npdt, count=(e - b) // npdt.itemsize, offset=base + b)
        else:
            raise ValueError(f'{path}: tensor {name} has unsupported dtype {dt}')
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f'{path}: tensor {name} has {arr.size} elements, shape {shape}')
        out[name] = arr.reshape(shape).copy()
    return out, meta


def read_metrics(path):
    """Training losses by step; validation lines (with "val_loss") are skipped."""
    train = {}
    with open(path) as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f'{path}:{i + 1}: not JSON ({e})')
            if 'val_loss' in rec or 'step' not in rec or 'loss' not in rec:
                continue
            train[int(rec['step'])] = rec
    return train


# ----------------------------------------------------------------------------- schedule

def lr_at(step, lr, min_lr, warmup_steps, total_steps):
    """Same formula as src/engine/optim/schedule.ts (lrAt): linear warmup, cosine to min_lr, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    ratio = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


# ----------------------------------------------------------------------------- model

def build_model_class(sdpa=False):
    """sdpa: attention through F.scaled_dot_product_attention (flash/efficient kernels) instead of the
    explicit softmax that replays the lab bit-for-bit; for speed baselines only."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def compute_dtype(dt):
        # HF computes RMSNorm and softmax in fp32 for fp32/half inputs; keep fp64 in fp64 mode.
        return torch.float64 if dt == torch.float64 else torch.float32

    class RMSNorm(nn.Module):
        def __init__(self, c, eps):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(c))
            self.eps = eps

        def forward(self, x):
            dt = x.dtype
            h = x.to(compute_dtype(dt))
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return self.weight * h.to(dt)

    def rope_cos_sin(T, D, theta, device, dtype):
        # As HF's default rope init and LlamaRotaryEmbedding: inv_freq and angles in fp32, cos/sin in
        # fp32, then cast to the model dtype. The outer product equals HF's K=1 matmul exactly.
        inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / D))
        pos = torch.arange(T, device=device, dtype=torch.float32)
        freqs = pos[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def rotate_half(x):
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def repeat_kv(x, n_rep):
        b, kvh, t, d = x.shape
        if n_rep == 1:
            return x
        return x[:, :, None, :, :].expand(b, kvh, n_rep, t, d).reshape(b, kvh * n_rep, t, d)

    class Attention(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            c = cfg['hidden_size']
            self.h = cfg['num_attention_heads']
            self.kvh = cfg['num_key_value_heads']
            self.d = c // self.h
            self.q_proj = nn.Linear(c, self.h * self.d, bias=False)
            self.k_proj = nn.Linear(c, self.kvh * self.d, bias=False)
            self.v_proj = nn.Linear(c, self.kvh * self.d, bias=False)
            self.o_proj = nn.Linear(self.h * self.d, c, bias=False)

        def forward(self, x, cos, sin):
            B, T, _ = x.shape
            q = self.q_proj(x).view(B, T, self.h, self.d).transpose(1, 2)
            k = self.k_proj(x).view(B, T, self.kvh, self.d).transpose(1, 2)
            v = self.v_proj(x).view(B, T, self.kvh, self.d).transpose(1, 2)
            cos, sin = cos[None, None], sin[None, None]
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = repeat_kv(k, self.h // self.kvh)
            v = repeat_kv(v, self.h // self.kvh)
            if sdpa:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return self.o_proj(y.transpose(1, 2).reshape(B, T, self.h * self.d))
            att = torch.matmul(q, k.transpose(2, 3)) * (self.d ** -0.5)
            mask = torch.full((T, T), float('-inf'), device=x.device, dtype=att.dtype).triu(1)
            att = F.softmax(att + mask, dim=-1, dtype=compute_dtype(att.dtype)).to(q.dtype)
            y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, self.h * self.d)
            return self.o_proj(y)

    class MLP(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            c, f = cfg['hidden_size'], cfg['intermediate_size']
            self.gate_proj = nn.Linear(c, f, bias=False)
            self.up_proj = nn.Linear(c, f, bias=False)
            self.down_proj = nn.Linear(f, c, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.input_layernorm = RMSNorm(cfg['hidden_size'], cfg['rms_norm_eps'])
            self.self_attn = Attention(cfg)
            self.post_attention_layernorm = RMSNorm(cfg['hidden_size'], cfg['rms_norm_eps'])
            self.mlp = MLP(cfg)

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Body(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg['vocab_size'], cfg['hidden_size'])
            self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg['num_hidden_layers'])])
            self.norm = RMSNorm(cfg['hidden_size'], cfg['rms_norm_eps'])

    class Llama(nn.Module):
        """Module names mirror LlamaForCausalLM, so HF state dicts load with strict=True."""

        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.tied = bool(cfg['tie_word_embeddings'])
            self.model = Body(cfg)
            if not self.tied:
                self.lm_head = nn.Linear(cfg['hidden_size'], cfg['vocab_size'], bias=False)

        def forward(self, idx):
            B, T = idx.shape
            x = self.model.embed_tokens(idx)
            cos, sin = rope_cos_sin(T, self.cfg['hidden_size'] // self.cfg['num_attention_heads'],
                                    float(self.cfg['rope_theta']), idx.device, x.dtype)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            x = self.model.norm(x)
            w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
            return F.linear(x, w)

    return Llama


# ----------------------------------------------------------------------------- replay

def find_checkpoint(run_dir, subdirs):
    for sub in subdirs:
        d = os.path.join(run_dir, sub) if sub else run_dir
        if os.path.exists(os.path.join(d, 'model.safetensors')) and os.path.exists(os.path.join(d, 'config.json')):
            return d
    return None


def fail(msg, code=2):
    print(f'error: {msg}', file=sys.stderr)
    sys.exit(code)


def load_weights(model, path, torch, device, dtype):
    tensors, _ = read_safetensors(path)
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
    want = dict(model.state_dict())
    missing = sorted(set(want) - set(sd))
    unexpected = sorted(set(sd) - set(want))
    shape = [f'{k}: {tuple(sd[k].shape)} vs {tuple(want[k].shape)}' for k in sd if k in want and sd[k].shape != want[k].shape]
    if missing or unexpected or shape:
        fail(f'{path} does not match the config: missing {missing}, unexpected {unexpected}, wrong shape {shape}')
    model.load_state_dict(sd, strict=True)
    model.to(device=device, dtype=dtype)


def ce_loss(logits, y, F):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V).to(torch_compute(logits.dtype)), y.reshape(-1))


def torch_compute(dt):
    import torch
    return torch.float64 if dt == torch.float64 else torch.float32


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('run_dir')
    ap.add_argument('--dtype', choices=['float32', 'float64'], default='float32')
    ap.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    ap.add_argument('--tol', type=float, default=1e-3, help='max relative loss difference (default 1e-3)')
    ap.add_argument('--steps', type=int, default=None, help='replay only the first N steps')
    ap.add_argument('--hf-check', action='store_true', help='compare logits with transformers.LlamaForCausalLM')
    ap.add_argument('--hf-dir', default=None, help='checkpoint dir for --hf-check (default: RUN, else RUN/final, else RUN/init)')
    ap.add_argument('--hf-tol', type=float, default=1e-3, help='max abs logit difference for --hf-check')
    ap.add_argument('--skip-replay', action='store_true', help='only run --hf-check')
    ap.add_argument('--emit-metrics', default=None, help='write this replay\'s losses as metrics.jsonl to FILE')
    ap.add_argument('--json', default=None, help='write a summary JSON to FILE')
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    # Plain IEEE fp32 matmuls: TF32 would be a 1e-3-level difference by itself.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision('highest')
    if args.device == 'cuda' and not torch.cuda.is_available():
        fail('--device cuda but torch.cuda.is_available() is False')
    device = torch.device(args.device)
    dtype = torch.float64 if args.dtype == 'float64' else torch.float32

    run_dir = args.run_dir
    try:
        with open(os.path.join(run_dir, 'run.json')) as f:
            run = json.load(f)
        cfg = dict(run['model'])
        opt = run['optimizer']
        B, T = int(run['batch']), int(run['seq'])
        for k in ('lr', 'min_lr', 'warmup_steps', 'total_steps', 'beta1', 'beta2', 'eps', 'weight_decay', 'grad_clip'):
            if k not in opt:
                raise KeyError(f'optimizer.{k}')
    except (OSError, KeyError, ValueError) as e:
        fail(f'cannot read {run_dir}/run.json: {e!r}')
    cfg.setdefault('num_key_value_heads', cfg['num_attention_heads'])
    Llama = build_model_class()
    torch.manual_seed(0)
    summary = {'dtype': args.dtype, 'device': args.device}
    status = 0

    if not args.skip_replay:
        batches = np.load(os.path.join(run_dir, 'batches.npy'))
        if batches.ndim != 3 or batches.shape[1] != B or batches.shape[2] != T + 1:
            fail(f'batches.npy has shape {batches.shape}, want [steps, {B}, {T + 1}]')
        if batches.min() < 0 or batches.max() >= cfg['vocab_size']:
            fail(f'batches.npy has token ids in [{batches.min()}, {batches.max()}], outside [0, {cfg["vocab_size"]})')
        metrics_path = os.path.join(run_dir, 'metrics.jsonl')
        metrics = read_metrics(metrics_path) if os.path.exists(metrics_path) else {}
        steps = batches.shape[0] if args.steps is None else min(args.steps, batches.shape[0])

        model = Llama(cfg)
        load_weights(model, os.path.join(run_dir, 'init', 'model.safetensors'), torch, device, dtype)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        optim = torch.optim.AdamW(
            [{'params': decay, 'weight_decay': float(opt['weight_decay'])}, {'params': no_decay, 'weight_decay': 0.0}],
            lr=float(opt['lr']), betas=(float(opt['beta1']), float(opt['beta2'])), eps=float(opt['eps']),
            fused=False, foreach=False)
        sched = dict(lr=float(opt['lr']), min_lr=float(opt['min_lr']), warmup_steps=int(opt['warmup_steps']),
                     total_steps=int(opt['total_steps']))
        data = torch.from_numpy(batches.astype(np.int64))
        rows, max_rel, max_lr_rel, max_gn_rel = [], 0.0, 0.0, 0.0
        emit = open(args.emit_metrics, 'w') if args.emit_metrics else None
        print(f'replaying {steps} steps  B={B} T={T}  dtype={args.dtype} device={args.device}  '
              f'({len(metrics)} logged training losses)')
        print(f'{"step":>6} {"lr":>11} {"ours":>12} {"torch":>12} {"rel diff":>10}')
        for s in range(steps):
            lr_t = lr_at(s, **sched)
            for g in optim.param_groups:
                g['lr'] = lr_t
            xy = data[s].to(device)
            logits = model(xy[:, :T])
            loss = ce_loss(logits, xy[:, 1:], F)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = None
            if float(opt['grad_clip']) > 0:
                gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float(opt['grad_clip'])))
            optim.step()
            theirs = loss.item()
            rec = metrics.get(s)
            line = f'{s:6d} {lr_t:11.4e} '
            row = {'step': s, 'lr': lr_t, 'torch': theirs, 'grad_norm': gnorm}
            if rec is not None:
                ours = float(rec['loss'])
                rel = abs(ours - theirs) / max(abs(theirs), 1e-12)
                max_rel = max(max_rel, rel) if math.isfinite(rel) else math.inf
                row.update(ours=ours, rel=rel)
                line += f'{ours:12.6f} {theirs:12.6f} {rel:10.2e}'
                if 'lr' in rec:
                    max_lr_rel = max(max_lr_rel, abs(float(rec['lr']) - lr_t) / max(abs(lr_t), 1e-30))
                if rec.get('grad_norm') is not None and gnorm is not None:
                    max_gn_rel = max(max_gn_rel, abs(float(rec['grad_norm']) - gnorm) / max(gnorm, 1e-30))
            else:
                line += f'{"-":>12} {theirs:12.6f} {"-":>10}'
            print(line, flush=True)
            rows.append(row)
            if emit:
                emit.write(json.dumps({'step': s, 'loss': theirs, 'lr': lr_t, 'grad_norm': gnorm}) + '\n')
        if emit:
            emit.close()
        compared = sum(1 for r in rows if 'ours' in r)
        print(f'max relative loss difference over {compared} steps: {max_rel:.3e} (tol {args.tol:g})')
        if max_gn_rel > 0:
            print(f'max relative grad-norm difference (pre-clip, informational): {max_gn_rel:.3e}')
        if max_lr_rel > 1e-6:
            print(f'warning: logged lr differs from the schedule by up to {max_lr_rel:.2e} (relative)')
        summary.update(steps=steps, compared=compared, max_rel=max_rel, max_lr_rel=max_lr_rel, max_grad_norm_rel=max_gn_rel, rows=rows)
        if compared == 0:
            print('warning: no logged training losses matched replayed steps; nothing was compared')
        elif not max_rel <= args.tol:
            print('FAIL: loss difference above tolerance')
            status = 1

        final_dir = find_checkpoint(run_dir, ('', 'final'))
        final = os.path.join(final_dir, 'model.safetensors') if final_dir else None
        if steps == batches.shape[0] and final:
            theirs_final, _ = read_safetensors(final)
            worst, worst_name, worst_scale = 0.0, '', 0.0
            for name, p in model.state_dict().items():
                if name not in theirs_final:
                    continue
                a = p.detach().to('cpu', torch.float64).numpy()
                b = theirs_final[name].astype(np.float64)
                d = float(np.max(np.abs(a - b))) if a.size else 0.0
                if d > worst:
                    worst, worst_name, worst_scale = d, name, float(np.max(np.abs(a)))
            print(f'final weights: max abs difference {worst:.3e} in {worst_name} (max |w| there {worst_scale:.3e})')
            summary.update(final_max_abs=worst, final_worst=worst_name)

    if args.hf_check:
        status = max(status, hf_check(args, run_dir, cfg, T, Llama, torch, F, device, dtype, summary))

    if args.json:
        with open(args.json, 'w') as f:
            json.dump(summary, f, indent=1)
    sys.exit(status)


def hf_check(args, run_dir, cfg, T, Llama, torch, F, device, dtype, summary):
    from transformers import LlamaForCausalLM

    d = args.hf_dir or find_checkpoint(run_dir, ('', 'final', 'init'))
    if d is None:
        fail(f'--hf-check: no model.safetensors + config.json in {run_dir}, final/ or init/ (pass --hf-dir)')
    hf = LlamaForCausalLM.from_pretrained(d, attn_implementation='eager').to(device=device, dtype=dtype).eval()
    ours = Llama(cfg)
    load_weights(ours, os.path.join(d, 'model.safetensors'), torch, device, dtype)
    ours.eval()
    batches_path = os.path.join(run_dir, 'batches.npy')
    if os.path.exists(batches_path):
        xy = torch.from_numpy(np.load(batches_path)[0].astype(np.int64)).to(device)
    else:
        g = torch.Generator().manual_seed(0)
        xy = torch.randint(0, cfg['vocab_size'], (2, T + 1), generator=g).to(device)
    with torch.no_grad():
        a = ours(xy[:, :T])
        b = hf(input_ids=xy[:, :T], use_cache=False).logits.to(a.dtype)
        la, lb = ce_loss(a, xy[:, 1:], F).item(), ce_loss(b, xy[:, 1:], F).item()
    diff = (a - b).abs().max().item()
    print(f'hf-check ({d}): max |logits ours - transformers| = {diff:.3e} (max |logit| {a.abs().max().item():.3e}); '
          f'loss ours {la:.6f} transformers {lb:.6f}')
    summary.update(hf_dir=d, hf_max_abs=diff, hf_loss_ours=la, hf_loss_transformers=lb)
    if not diff <= args.hf_tol:
        print(f'FAIL: logits differ by more than --hf-tol {args.hf_tol:g}')
        return 1
    return 0


if __name__ == '__main__':
    main()
