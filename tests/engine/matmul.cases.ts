/**
 * Shared GEMM test driver: seeded inputs, one submit for all cases, comparison with matmulRef.
 * Returns the choices built (variant names, `_skS` for split-K) and whether each ran FULL_TILES, so
 * tests can check that the path they meant to cover is the one that ran.
 */
import type { Runtime } from '../../src/engine/gpu/runtime';
import { buildMatmul } from '../../src/engine/kernels/matmul/matmul';
import { type MatmulShape, matmulWorkspaceBytes } from '../../src/engine/kernels/matmul/plan';
import { matmulRef } from '../../src/engine/kernels/matmul/matmul.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

export interface MatmulCase extends MatmulShape {
  alpha?: number;
  accumulate?: boolean;
  variant?: string;
  specialize?: boolean;
  /** The low-rank epilogue: + scale·Uᵀ·op(V), U [rank, M], V [rank, N] or [N, rank] (transV). */
  lr?: { rank: number; scale: number; transV?: boolean };
}

export const TRANS: [boolean, boolean][] = [[false, false], [false, true], [true, false], [true, true]];

export const caseLabel = (c: MatmulCase) =>
  `${c.M}x${c.N}x${c.K} ${c.transA ? 'T' : 'N'}${c.transB ? 'T' : 'N'}` +
  `${c.accumulate ? ' acc' : ''} alpha=${c.alpha ?? 1}${c.specialize === false ? ' dyn' : ''}` +
  `${c.lr ? ` +lr${c.lr.rank}${c.lr.transV ? 'T' : 'N'} s=${c.lr.scale}` : ''}`;

/**
 * Inputs U(-1,1); the only GPU error is fp32 rounding in a different summation order, which grows
 * ~ sqrt(K)·eps per output, so atol scales with K (generously, to stay order-independent).
 */
export async function checkMatmuls(rt: Runtime, cases: MatmulCase[], seed = 1234): Promise<{ variant: string; fullTiles: boolean }[]> {
  const rng = new Rng(seed);
  const items = cases.map((c) => {
    const a = rng.uniformArray(c.M * c.K);
    const b = rng.uniformArray(c.K * c.N);
    const c0 = rng.uniformArray(c.M * c.N);
    const A = rt.upload('workspace', 'mm.a', a);
    const B = rt.upload('workspace', 'mm.b', b);
    const C = rt.upload('workspace', 'mm.c', c0);
    // Split-K choices (`_skS`) get exactly the workspace they need.
    const wsBytes = c.variant ? matmulWorkspaceBytes(c, c.variant) : 0;
    const W = wsBytes > 0 ? rt.createBuffer('workspace', 'mm.splitk', wsBytes) : undefined;
    const lr = c.lr && { u: rng.uniformArray(c.lr.rank * c.M), v: rng.uniformArray(c.lr.rank * c.N) };
    const LR = lr && [rt.upload('workspace', 'mm.u', lr.u), rt.upload('workspace', 'mm.v', lr.v)];
    const lowRank = c.lr && LR && { ...c.lr, u: LR[0], v: LR[1] };
    const built = buildMatmul(rt, { label: caseLabel(c), ...c, a: A, b: B, c: C, workspace: W, lowRank });
    return { c, a, b, c0, A, B, C, W, lr, LR, built };
  });
  rt.device.pushErrorScope('validation');
  rt.run(items.flatMap((it) => it.built.dispatches));
  const err = await rt.device.popErrorScope();
  if (err) throw new Error(`GEMM validation error: ${err.message}`);
  try {
    for (const it of items) {
      const got = await rt.readF32(it.C, 0, it.c.M * it.c.N);
      const want = matmulRef(it.a, it.b, it.c.M, it.c.N, it.c.K, {
        transA: it.c.transA, transB: it.c.transB, alpha: it.c.alpha, c0: it.c.accumulate ? it.c0 : undefined,
      });
      if (it.c.lr && it.lr) {
        const { rank, scale, transV } = it.c.lr;
        const t = matmulRef(it.lr.u, it.lr.v, it.c.M, it.c.N, rank, { transA: true, transB: transV, alpha: scale });
        for (let i = 0; i < want.length; i++) want[i] += t[i];
      }
      expectClose(got, want, { atol: 2e-6 * it.c.K + 1e-6, rtol: 1e-5, label: `${caseLabel(it.c)} [${it.built.variant}]` });
    }
    return items.map((it) => ({ variant: it.built.variant, fullTiles: it.built.fullTiles }));
  } finally {
    for (const it of items) for (const x of [it.A, it.B, it.C, ...(it.W ? [it.W] : []), ...(it.LR ?? []), ...it.built.uniforms]) rt.mem.free(x);
  }
}
