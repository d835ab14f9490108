/**
 * The code hash of each tuned kernel family: its WGSL (as the pipelines get it, for a few
 * representative specializations) and its candidate parameters. A tuning cache entry carries the
 * hash of its family at tuning time; a changed kernel (or a changed candidate list) has a new hash,
 * so its entries stop applying while the other families' stay.
 */
import attnFwd from '../kernels/attention/attention.wgsl?raw';
import attnBwdResident from '../kernels/attention/bwd-blocked-resident.wgsl?raw';
import attnBwdStream from '../kernels/attention/bwd-blocked-stream.wgsl?raw';
import attnBwdBlocked from '../kernels/attention/bwd-blocked.wgsl?raw';
import attnBwdI8 from '../kernels/attention/bwd-i8-codes.wgsl?raw';
import attnBwd from '../kernels/attention/bwd.wgsl?raw';
import attnDqDs from '../kernels/attention/dq-ds.wgsl?raw';
import attnDs from '../kernels/attention/ds.wgsl?raw';
import attnFwdBlockedIo from '../kernels/attention/fwd-blocked-io.wgsl?raw';
import attnFwdBlocked from '../kernels/attention/fwd-blocked.wgsl?raw';
import attnLoad from '../kernels/attention/load.wgsl?raw';
import splitKSrc from '../kernels/matmul/splitk.wgsl?raw';
import i8SplitKSrc from '../kernels/qgemm/splitk.wgsl?raw';
import transposeQuantSrc from '../kernels/qgemm/transpose-quant.wgsl?raw';
import codecSrc from '../../../shaders/quant/codec.wgsl?raw';
import streamKSrc from '../kernels/matmul/streamk.wgsl?raw';
import { ATTENTION_CANDIDATES } from '../kernels/attention/tables';
import { F16_ATTN_BWD_LAYOUTS, F16_ATTN_LAYOUTS, f16AttnBwdLayoutPair } from '../kernels/attention/f16/layouts';
import { f16AttnForwardCode, type F16AttnSpec } from '../kernels/attention/f16/code';
import { f16AttnDkdvCode, f16AttnDqCode, f16AttnDqDsCode } from '../kernels/attention/f16/code-bwd';
import { MATMUL_VARIANTS } from '../kernels/matmul/variants';
import { F16_TC_LAYOUTS, FORM_TRANS } from '../kernels/matmul-f16/plan';
import { f16TcCode } from '../kernels/matmul-f16/tc';
import { matmulCode } from '../kernels/matmul/wgsl';
import { I8_TC_LAYOUTS } from '../kernels/qgemm/tc-tables';
import { TQ_VARIANTS } from '../kernels/qgemm/block';
import { type I8TcSpec, qgemmI8TcCode } from '../kernels/qgemm/tc';
import { hashText } from './hash';
import type { KernelFamily } from './store';

/**
 * Bumped by hand when a family's host code changes what a tuned pick means without its WGSL or
 * candidates changing (e.g. how a split-K choice cuts K).
 */
const HOST_VERSION: Record<KernelFamily, number> = { matmul: 1, attention: 1, f16gemm: 1, f16attn: 1, i8tc: 1, i8quant: 1 };

function familyText(family: KernelFamily): string {
  if (family === 'f16attn') {
    // The generated f16 attention kernels as the model runs them (f16 inputs, the f16 copy of o / dv) for every layout tried, and the layouts.
    const spec = (l: Partial<F16AttnSpec>): F16AttnSpec => ({ cfg: { M: 16, N: 16, K: 16 }, D: 64, sgSize: 32, sgCount: 4, BKV: 32, PAD: 8, ...l });
    const gen = (f: () => string) => {
      try {
        return f();
      } catch (e) {
        return `not generated: ${(e as Error).message}`;
      }
    };
    const fwd = F16_ATTN_LAYOUTS.map((l) => gen(() => f16AttnForwardCode(spec(l), { inputs: 'f16', o16: 'f16' })));
    const bwd = F16_ATTN_BWD_LAYOUTS.map(f16AttnBwdLayoutPair).flatMap(({ dq, dkdv }) => [
      gen(() => (dq.ds ? f16AttnDqDsCode(spec(dq)) : f16AttnDqCode(spec(dq), { inputs: 'f16' }))), gen(() => f16AttnDkdvCode(spec(dkdv), { inputs: 'f16', dv16: 'f16' }))]);
    return [...fwd, ...bwd, JSON.stringify(F16_ATTN_LAYOUTS), JSON.stringify(F16_ATTN_BWD_LAYOUTS)].join('\n--\n');
  }
  if (family === 'i8quant') return [codecSrc, transposeQuantSrc, JSON.stringify(TQ_VARIANTS)].join('\n--\n');
  if (family === 'i8tc') {
    // The INT8 tensor-core kernel in each form the model runs (writing, accumulating, a K slice) for every layout tried, and the split's reduction.
    const codes = I8_TC_LAYOUTS.flatMap((l) => {
      const s: I8TcSpec = { cfg: { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 }, syntax: 'template', unitDiv: 1, sgSize: 32, ...l };
      return [qgemmI8TcCode(s), qgemmI8TcCode(s, true), qgemmI8TcCode(s, false, true)];
    });
    return [...codes, i8SplitKSrc, JSON.stringify(I8_TC_LAYOUTS)].join('\n--\n');
  }
  if (family === 'f16gemm') {
    // The generated tensor-core kernel (the first layout and one with every newer form, each form of GEMM) and the layouts tried.
    const all = F16_TC_LAYOUTS.find((l) => l.stages === 2 && l.loop === 'streamB' && l.copy === 8 && l.swizzle) ?? F16_TC_LAYOUTS[0];
    const codes = (['NT', 'NN', 'TN'] as const).flatMap((form) => [F16_TC_LAYOUTS[0], all].map((l) => f16TcCode({ cfg: { M: 16, N: 16, K: 16 }, ...FORM_TRANS[form], sgSize: 32, ...l })));
    return [...codes, splitKSrc, JSON.stringify(F16_TC_LAYOUTS)].join('\n--\n');
  }
  if (family === 'matmul') {
    // The generated text: plain, vec4 with the k loop written out, the 8x16 and stream-K edits, the LEAN text.
    const codes = [matmulCode(false, false, false), matmulCode(true, true, true, 8, true, false, false),
      matmulCode(true, true, true, 16, false, true, true), matmulCode(true, false, true, 8, false, false, true)];
    return [...codes, splitKSrc, streamKSrc, JSON.stringify(MATMUL_VARIANTS)].join('\n--\n');
  }
  return [attnFwd, attnBwdResident, attnBwdStream, attnBwdBlocked, attnBwdI8, attnBwd, attnDqDs, attnDs, attnFwdBlockedIo, attnFwdBlocked,
    attnLoad, JSON.stringify(ATTENTION_CANDIDATES)].join('\n--\n');
}

const hashes = new Map<KernelFamily, string>();

/** The code hash of a kernel family (computed once). */
export function codeHash(family: KernelFamily): string {
  let h = hashes.get(family);
  if (!h) hashes.set(family, (h = `${HOST_VERSION[family]}-${hashText(familyText(family))}`));
  return h;
}

/** Every family's code hash. */
export function codeHashes(): Record<KernelFamily, string> {
  return { matmul: codeHash('matmul'), attention: codeHash('attention'), f16gemm: codeHash('f16gemm'), f16attn: codeHash('f16attn'), i8tc: codeHash('i8tc'), i8quant: codeHash('i8quant') };
}
