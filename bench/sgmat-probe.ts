/**
 * Finds, on the device at hand, how its subgroup matrices are spelled and addressed: for each
 * usable configuration the WGSL layout argument (template or bool) and, for 8-bit types, whether
 * offsets count elements or 32-bit words (src/engine/kernels/qgemm/sgmat.ts says why both vary).
 */
import type { Runtime } from '../src/engine/gpu/runtime';
import {
  checkSgmat, isEightBit, type SgmatKernel, type SgmatSyntax, type SubgroupMatrixConfig, subgroupMatrixConfigs, subgroupSize, usableConfig,
} from '../src/engine/kernels/qgemm/sgmat';

export interface SgmatProbe {
  present: boolean;
  configs: SubgroupMatrixConfig[];
  /** Per usable config: what ran correctly (syntax, 8-bit units), or why nothing did. */
  results: { config: SubgroupMatrixConfig; syntax?: SgmatSyntax; unitDiv?: 1 | 4; ok: boolean; tried: string[] }[];
}

/**
 * Lists the configs and, for each usable one, finds a spelling (and 8-bit unit) under which a
 * one-subgroup GEMM of two K tiles matches the reference, NN and NT.
 */
export async function probeSubgroupMatrix(rt: Runtime): Promise<SgmatProbe> {
  const configs = subgroupMatrixConfigs(rt);
  const out: SgmatProbe = { present: rt.gpu.features.subgroupMatrix, configs, results: [] };
  const sgSize = subgroupSize(rt);
  for (const cfg of configs.filter(usableConfig)) {
    const tried: string[] = [];
    let found: { syntax: SgmatSyntax; unitDiv: 1 | 4 } | null = null;
    for (const syntax of ['template', 'bool'] as const) {
      for (const unitDiv of isEightBit(cfg.componentType) ? [4, 1] as const : [1] as const) {
        const base: SgmatKernel = { cfg, syntax, unitDiv, transB: false, tilesM: 1, tilesN: 1, sgM: 1, sgN: 1, sgSize };
        const shape = { M: cfg.M, N: cfg.N, K: 2 * cfg.K };
        const nn = await checkSgmat(rt, base, shape);
        const nt = nn.ok ? await checkSgmat(rt, { ...base, transB: true }, shape) : nn;
        tried.push(`${syntax}/unit${unitDiv}: ${nn.ok && nt.ok ? 'ok' : nn.error ?? nt.error ?? `max err ${nn.ok ? nt.maxAbsErr : nn.maxAbsErr}`}`);
        if (nn.ok && nt.ok) {
          found = { syntax, unitDiv };
          break;
        }
      }
      if (found) break;
    }
    out.results.push({ config: cfg, ...(found ?? {}), ok: !!found, tried });
  }
  return out;
}
