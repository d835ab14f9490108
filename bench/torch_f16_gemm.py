#!/usr/bin/env python3
"""cuBLAS fp16 (and bf16, fp32) GEMM timings beside bench/f16-device.ts, in the same device call.

Shapes: square --sizes (default 4096) as NT (C = A @ B.T, the forward), and the base model's
GEMMs at 16 x 512 tokens in their forms (NT forward, NN dX, TN dW), as bench/f16-device.ts times
them. fp16 operands with fp32 accumulation is cuBLAS's default for torch.matmul on half tensors
(allow_fp16_reduced_precision_reduction is turned off here so it stays fp32). fp32 is timed with
TF32 off. CUDA events around each rep, warm-up first, median.

Usage: python3 torch_f16_gemm.py [--sizes 4096,8192] [--reps 20] [--warmup 5] [--json out.json]
"""

import argparse
import datetime
import json
import statistics


T = 8192
MODEL = [
    ('fwd qkvo', 'NT', T, 768, 768),
    ('fwd gate|up', 'NT', T, 2560, 768),
    ('fwd down', 'NT', T, 768, 2560),
    ('dX qkvo', 'NN', T, 768, 768),
    ('dX gate+up', 'NN', T, 768, 5120),
    ('dX down', 'NN', T, 2560, 768),
    ('dW qkvo', 'TN', 768, 768, T),
    ('dW gate|up', 'TN', 2560, 768, T),
    ('dW down', 'TN', 768, 2560, T),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--sizes', default='4096')
    p.add_argument('--reps', type=int, default=20)
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--no-model', action='store_true')
    p.add_argument('--json')
    a = p.parse_args()

    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dev = torch.device('cuda')
    rows = []

    def operands(form, M, N, K, dtype):
        # Stored as the engine stores them: A [M,K] or [K,M] (TN), B [K,N] or [N,K] (NT).
        A = torch.randn((K, M) if form == 'TN' else (M, K), device=dev, dtype=dtype)
        B = torch.randn((N, K) if form == 'NT' else (K, N), device=dev, dtype=dtype)
        opA = A.t() if form == 'TN' else A
        opB = B.t() if form == 'NT' else B
        return opA, opB

    def time(name, form, M, N, K, dtype):
        opA, opB = operands(form, M, N, K, dtype)
        out = torch.empty((M, N), device=dev, dtype=dtype)
        for _ in range(a.warmup):
            torch.matmul(opA, opB, out=out)
        torch.cuda.synchronize()
        times = []
        for _ in range(a.reps):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            torch.matmul(opA, opB, out=out)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        ms = statistics.median(times)
        tflops = 2 * M * N * K / (ms * 1e9)
        dt = str(dtype).replace('torch.', '')
        rows.append({'name': name, 'form': form, 'M': M, 'N': N, 'K': K, 'dtype': dt, 'ms': ms, 'tflops': tflops})
        print(f'torch {dt} {form} {M}x{N}x{K} {name}: {tflops:.1f} TFLOP/s ({ms:.3f} ms)', flush=True)

    for n in [int(x) for x in a.sizes.split(',') if x]:
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            time(f'{n}^3', 'NT', n, n, n, dtype)
    if not a.no_model:
        for name, form, M, N, K in MODEL:
            time(name, form, M, N, K, torch.float16)

    result = {
        'source': 'bench/torch_f16_gemm.py',
        'date': datetime.datetime.now(datetime.timezone.utc).isoformat(),
        'torch': torch.__version__,
        'device': torch.cuda.get_device_name(0),
        'rows': rows,
    }
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
