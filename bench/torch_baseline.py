#!/usr/bin/env python3
"""PyTorch baselines for `npm run bench`, measured on the same GPU in the same run.

  - cuBLAS SGEMM, fp32 with TF32 OFF (torch.backends.cuda.matmul.allow_tf32 = False), for the same
    (M, N, K, transA, transB) as the bench's gemm rows: key gemm/MxNxK/XY
  - torch._int_mm (int8 x int8 -> int32, tensor cores) for the qgemm shapes: key i8gemm/MxNxK
  - one fp32 eager training step (forward, cross-entropy, backward, grad clipping, AdamW) of the same
    LLaMA config and batch: key step/C..-L..-H..-KV..-F..-V..[-tied]/BbxTt. The model is the
    from-scratch HF-convention LLaMA of tools/torch_replay.py (imported, not copied).
    --step-variants adds the same step with sdpa attention, bf16 autocast and torch.compile, keyed
    step/...@VARIANT (e.g. @bf16-sdpa): what a PyTorch user would run, not only what replays us.
Timing: CUDA events around each rep, warm-up reps first, median. Writes {"source", "rows": [...]}
that `npm run bench -- ... --baseline FILE` merges by key.

Where the problems come from (any combination):
  --from OURS.json      the rows of a bench run (--json): exactly its GEMM shapes and step configs
  --sizes 512,1024      square GEMMs (fp32 and int8)
  --config FILE         a run.json written by `npm run train` (model, batch, seq, optimizer), or an HF
                        config.json with --batch and --seq
Usage:
  python3 bench/torch_baseline.py --from ours.json --json torch.json [--reps 10] [--warmup 3]
"""

import argparse
import datetime
import json
import math
import os
import sys


def fail(msg, code=2):
    print(f'error: {msg}', file=sys.stderr)
    sys.exit(code)


def import_replay():
    """tools/torch_replay.py, found beside this file (as packed for the GPU machine) or in ../tools."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (here, os.path.join(here, '..', 'tools')):
        if os.path.exists(os.path.join(d, 'torch_replay.py')):
            sys.path.insert(0, d)
            import torch_replay  # noqa: E402
            return torch_replay
    fail('tools/torch_replay.py not found next to this script or in ../tools (pack it with the script)')


def median(xs):
    s = sorted(xs)
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2


def time_cuda(torch, fn, warmup, reps, inner=1):
    """Median ms of one fn() call; `inner` calls per event pair amortise launch gaps on small problems."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) / inner)
    return median(samples), samples


def step_key(c, batch, seq):
    tied = '-tied' if c.get('tie_word_embeddings') else ''
    return (f"step/C{c['hidden_size']}-L{c['num_hidden_layers']}-H{c['num_attention_heads']}"
            f"-KV{c['num_key_value_heads']}-F{c['intermediate_size']}-V{c['vocab_size']}{tied}/B{batch}xT{seq}")


def gemm_key(M, N, K, ta, tb):
    return f"gemm/{M}x{N}x{K}/{'T' if ta else 'N'}{'T' if tb else 'N'}"


def bench_sgemm(torch, M, N, K, ta, tb, warmup, reps):
    dev = 'cuda'
    # Stored as the bench stores them: op(A) = Aᵀ reads A as [K, M]; op(B) = Bᵀ reads B as [N, K].
    a = torch.randn((K, M) if ta else (M, K), device=dev, dtype=torch.float32)
    b = torch.randn((N, K) if tb else (K, N), device=dev, dtype=torch.float32)
    c = torch.empty((M, N), device=dev, dtype=torch.float32)
    A = a.t() if ta else a
    B = b.t() if tb else b
    flops = 2.0 * M * N * K
    inner = min(20, max(1, round(1e9 / flops)))
    ms, samples = time_cuda(torch, lambda: torch.matmul(A, B, out=c), warmup, reps, inner)
    return {'key': gemm_key(M, N, K, ta, tb), 'name': 'cuBLAS sgemm fp32 (TF32 off)', 'unit': 'GFLOP/s',
            'value': flops / (ms * 1e6), 'ms': ms, 'samples_ms': samples}


def bench_int_mm(torch, M, N, K, warmup, reps):
    dev = 'cuda'
    x = torch.randint(-128, 128, (M, K), device=dev, dtype=torch.int8)
    w = torch.randint(-128, 128, (N, K), device=dev, dtype=torch.int8)
    wt = w.t()  # Y = X·Wᵀ, as the bench's int8xint8 kernel
    ops = 2.0 * M * N * K
    inner = min(20, max(1, round(1e9 / ops)))
    ms, samples = time_cuda(torch, lambda: torch._int_mm(x, wt), warmup, reps, inner)
    return {'key': f'i8gemm/{M}x{N}x{K}', 'name': 'torch._int_mm int8', 'unit': 'GOP/s',
            'value': ops / (ms * 1e6), 'ms': ms, 'samples_ms': samples}


STEP_VARIANTS = {
    # name: (sdpa attention, bf16 autocast, torch.compile)
    'eager': (False, False, False),
    'fp32-sdpa': (True, False, False),
    'fp32-sdpa-compile': (True, False, True),
    'bf16-sdpa': (True, True, False),
    'bf16-sdpa-compile': (True, True, True),
}


def bench_step(torch, Llama, cfg, batch, seq, optim, warmup, reps, variant='eager'):
    import contextlib
    import torch.nn.functional as F
    _, bf16, compiled = STEP_VARIANTS[variant]
    torch.manual_seed(0)
    model = Llama(cfg).to(device='cuda', dtype=torch.float32)
    for p in model.parameters():
        if p.dim() >= 2:
            torch.nn.init.normal_(p, std=cfg.get('initializer_range', 0.02))
    o = optim or {}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{'params': decay, 'weight_decay': o.get('weight_decay', 0.1)}, {'params': no_decay, 'weight_decay': 0.0}],
        lr=o.get('lr', 1e-3), betas=(o.get('beta1', 0.9), o.get('beta2', 0.99)), eps=o.get('eps', 1e-8))
    clip = o.get('grad_clip', 1.0)
    V = cfg['vocab_size']
    data = torch.randint(0, V, (batch, seq + 1), device='cuda', dtype=torch.int64)
    x, y = data[:, :-1], data[:, 1:]

    fwd = torch.compile(model) if compiled else model

    def step():
        # Autocast keeps fp32 master weights and AdamW in fp32, as mixed-precision training does.
        with torch.autocast('cuda', dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
            logits = fwd(x)
            loss = F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss.item()  # the bench reads its loss back every step too

    torch.cuda.reset_peak_memory_stats()
    ms, samples = time_cuda(torch, step, warmup, reps)
    n_params = sum(p.numel() for p in model.parameters())
    key = step_key(cfg, batch, seq) + ('' if variant == 'eager' else f'@{variant}')
    name = 'torch fp32 eager step' if variant == 'eager' else f'torch {variant} step'
    row = {'key': key, 'name': name, 'unit': 'tokens/s',
           'value': batch * seq / (ms / 1000), 'ms': ms, 'samples_ms': samples,
           'detail': {'params': n_params, 'batch': batch, 'seq': seq, 'model': cfg,
                      'max_memory_allocated': torch.cuda.max_memory_allocated()}}
    del model, opt, fwd
    torch.cuda.empty_cache()
    return row


def problems_from(path):
    with open(path) as f:
        ours = json.load(f)
    gemms, i8, steps = {}, {}, {}
    for r in ours.get('rows', []):
        d = r.get('detail') or {}
        if r.get('suite') == 'gemm' and d.get('best'):
            s = (d['M'], d['N'], d['K'], bool(d['transA']), bool(d['transB']))
            gemms[gemm_key(*s)] = s
        elif r.get('suite') == 'qgemm' and d.get('kernel') in ('fp32', 'int8xint8'):
            if d['kernel'] == 'fp32':
                s = (d['M'], d['N'], d['K'], False, True)
                gemms[gemm_key(*s)] = s
            else:
                i8[f"i8gemm/{d['M']}x{d['N']}x{d['K']}"] = (d['M'], d['N'], d['K'])
        elif r.get('suite') == 'step' and 'model' in d:  # the GPU-time rows repeat a step without its config
            steps[step_key(d['model'], d['batch'], d['seq'])] = (d['model'], d['batch'], d['seq'], d.get('optimizer'))
    return gemms, i8, steps


def config_problem(path, batch, seq):
    with open(path) as f:
        raw = json.load(f)
    if 'model' in raw:  # run.json
        b, t = batch or raw.get('batch'), seq or raw.get('seq')
        cfg, optim = raw['model'], raw.get('optimizer')
    else:  # HF config.json
        b, t, cfg, optim = batch, seq, raw, None
    if not b or not t:
        fail(f'--config {path}: no batch/seq in it; pass --batch and --seq')
    return cfg, int(b), int(t), optim


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--from', dest='from_json', default=None, help='a bench --json file: measure its shapes and steps')
    ap.add_argument('--sizes', default=None, help='square GEMM sizes, e.g. 512,1024,2048,4096,8192')
    ap.add_argument('--config', action='append', default=[], help='run.json or HF config.json (repeatable)')
    ap.add_argument('--batch', type=int, default=None)
    ap.add_argument('--seq', type=int, default=None)
    ap.add_argument('--suites', default='gemm,int8,step', help='subset of gemm,int8,step')
    ap.add_argument('--step-variants', default='eager',
                    help=f'comma list of {",".join(STEP_VARIANTS)} or "all" (default eager)')
    ap.add_argument('--reps', type=int, default=10)
    ap.add_argument('--warmup', type=int, default=3)
    ap.add_argument('--json', required=True, help='output file')
    args = ap.parse_args()
    suites = set(s.strip() for s in args.suites.split(',') if s.strip())
    if not suites <= {'gemm', 'int8', 'step'}:
        fail(f'--suites: unknown {sorted(suites - {"gemm", "int8", "step"})}')
    variants = list(STEP_VARIANTS) if args.step_variants == 'all' else [v.strip() for v in args.step_variants.split(',') if v.strip()]
    if not variants or any(v not in STEP_VARIANTS for v in variants):
        fail(f'--step-variants: expected a comma list of {", ".join(STEP_VARIANTS)} or "all", got {args.step_variants!r}')
    if args.reps < 1 or args.warmup < 0:
        fail('--reps must be >= 1 and --warmup >= 0')

    gemms, i8, steps = problems_from(args.from_json) if args.from_json else ({}, {}, {})
    if args.sizes:
        try:
            sizes = [int(s) for s in args.sizes.split(',') if s.strip()]
        except ValueError:
            fail(f'--sizes expects integers, got {args.sizes!r}')
        for n in sizes:
            gemms[gemm_key(n, n, n, False, False)] = (n, n, n, False, False)
            i8[f'i8gemm/{n}x{n}x{n}'] = (n, n, n)
    for c in args.config:
        cfg, b, t, optim = config_problem(c, args.batch, args.seq)
        steps[step_key(cfg, b, t)] = (cfg, b, t, optim)
    if not (gemms or i8 or steps):
        fail('nothing to measure: pass --from, --sizes or --config')

    try:
        import torch
    except ImportError:
        fail('PyTorch is not installed (python3 -c "import torch" fails)', 1)
    if not torch.cuda.is_available():
        fail('CUDA is not available', 1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision('highest')

    rows = []

    def add(r):
        rows.append(r)
        print(f"  {r['key']}: {r['value']:.4g} {r['unit']} ({r['name']})", file=sys.stderr, flush=True)

    def guarded(key, fn):
        try:
            add(fn())
        except Exception as e:  # one shape torch rejects (e.g. _int_mm's M > 16) must not end the run
            print(f'  {key}: skipped: {e}', file=sys.stderr, flush=True)
            rows.append({'key': key, 'skipped': str(e).splitlines()[0] if str(e) else type(e).__name__})

    if 'gemm' in suites:
        for k, (M, N, K, ta, tb) in gemms.items():
            guarded(k, lambda: bench_sgemm(torch, M, N, K, ta, tb, args.warmup, args.reps))
    if 'int8' in suites:
        for k, (M, N, K) in i8.items():
            guarded(k, lambda: bench_int_mm(torch, M, N, K, args.warmup, args.reps))
    if 'step' in suites and steps:
        replay = import_replay()
        for v in variants:
            Llama = replay.build_model_class(sdpa=STEP_VARIANTS[v][0])
            for k, (cfg, b, t, optim) in steps.items():
                guarded(f'{k}@{v}', lambda: bench_step(torch, Llama, cfg, b, t, optim, args.warmup, args.reps, v))

    out = {
        'source': f'torch {torch.__version__} (CUDA {torch.version.cuda})',
        'device': torch.cuda.get_device_name(0),
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'command': ' '.join(['torch_baseline.py'] + sys.argv[1:]),
        'settings': {'allow_tf32': torch.backends.cuda.matmul.allow_tf32, 'float32_matmul_precision': 'highest'},
        'rows': [r for r in rows if 'value' in r and math.isfinite(r['value'])],
        'skipped': [r for r in rows if 'skipped' in r],
    }
    with open(args.json, 'w') as f:
        json.dump(out, f, indent=2)
        f.write('\n')
    print(f'wrote {len(out["rows"])} rows to {args.json}', file=sys.stderr)


if __name__ == '__main__':
    main()
