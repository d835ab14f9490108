/**
 * The LM head and its loss, in one place: logits = hF·Wᵀ, softmax cross-entropy and, for training,
 * the head's backward — dlogits in place of the logits, then dX = dlogits·W into the final norm's
 * output gradient and dW = dlogitsᵀ·hF (none when the head is frozen: LoRA/QLoRA). Each runs over
 * chunks of RunPlan.logitsRows token rows (plan/logits.ts), so only one chunk's logits exist at a
 * time; one chunk is the whole batch. The training step's forward therefore carries the head's
 * backward (a chunk's dlogits are overwritten by the next chunk's logits), and its loss-only twin
 * serves evaluation.
 *
 * Shapes: N = B·T tokens, C hidden, V vocab; hF, dX: [N, C]; W: [V, C]; logits: [rows, V].
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { crossEntropyCount, crossEntropyMean, crossEntropyRows } from '../kernels/crossentropy/crossentropy';
import { matmul, type MatmulArgs } from '../kernels/matmul/matmul';
import { logitsChunks } from '../plan/logits';
import type { ModelDims } from './dims';

export interface LmHeadArgs {
  rt: Runtime;
  dims: ModelDims;
  /** Token rows per chunk (RunPlan.logitsRows; N = one chunk). */
  rows: number;
  /** The final norm's output [N, C] as the forward wrote it. */
  hF: GPUBuffer;
  /** The head's weight [V, C] (the embedding when tied). */
  w: Binding;
  /** [rows, V]: one chunk's logits, then its dlogits in place. */
  logits: GPUBuffer;
  targets: GPUBuffer;
  losses: GPUBuffer;
  loss: GPUBuffer;
  ceWs: GPUBuffer;
  /** Training: the head's backward (absent: forward and loss only). */
  train?: {
    /** dX [N, C], written a chunk of rows at a time (may be hF's own buffer: a chunk's hF rows are dead by its dX). */
    dx: GPUBuffer;
    /** Loss scaling's state: dlogits are scaled before anything reads them. */
    lossScale?: GPUBuffer;
    /**
     * The dX GEMM (K = vocabulary) with a split-K workspace: a chunk of a few hundred rows gives it a
     * grid of ~10 workgroups over K = 49,152 (SmolLM2: 34 % of an H100 f16 step in one pass); absent: one pass.
     */
    dxGemm?(args: Omit<MatmulArgs, 'workspace'>): Dispatch[];
    /** The head's weight gradient (absent: frozen). */
    dw?: {
      /** dW [V, C]: the first chunk writes it, the others accumulate. */
      out: Binding;
      /** Dispatches that put hF's rows [row0, row0 + rows) back as stored (dequantized) for dW, or none when hF is saved fp32. */
      load(row0: number, rows: number): Dispatch[];
      /** The dW GEMM (with its split-K workspace). */
      gemm(args: Omit<MatmulArgs, 'workspace'>): Dispatch[];
    };
  };
}

export interface LmHead {
  /** Forward and loss only: the logits are read and left, nothing else written (evaluation, a forward-only model). */
  loss: Dispatch[];
  /** The training step's: forward, loss and the head's backward chunk by chunk (null without `train`). */
  train: Dispatch[] | null;
  /** How many chunks: with one, `loss`'s first dispatch leaves the whole batch's logits in the logits buffer. */
  chunks: number;
}

export function buildLmHead(a: LmHeadArgs): LmHead {
  const { rt, dims } = a;
  const { N, C, V } = dims;
  const chunks = logitsChunks(N, a.rows);
  const one = chunks.length === 1;
  const ce = { targets: a.targets, losses: a.losses, workspace: a.ceWs, dims: { N, V } };
  const count = crossEntropyCount(rt, { label: 'xent', ...ce });
  const loss: Dispatch[] = [];
  const train: Dispatch[] = [];
  chunks.forEach(({ row0, rows }, i) => {
    const tag = one ? '' : `.c${i}`;
    const at = (buffer: GPUBuffer): Binding => ({ buffer, offset: row0 * C * 4, size: rows * C * 4 });
    const logits: Binding = { buffer: a.logits, offset: 0, size: rows * V * 4 };
    const hF = at(a.hF);
    const gemm = matmul(rt, { label: `lm_head${tag}`, a: hF, b: a.w, c: logits, M: rows, N: V, K: C, transB: true });
    const chunk = { row0, rows };
    loss.push(gemm, ...(i === 0 ? [count] : []), crossEntropyRows(rt, { label: `xent${tag}`, ...ce, logits, chunk }));
    const t = a.train;
    if (!t) return;
    // Fused CE forward + backward: the chunk's per-row losses and dlogits in place of its logits (times the loss
    // scale where the step scales: the backward of scale·loss).
    train.push(gemm, ...(i === 0 ? [count] : []), crossEntropyRows(rt, { label: `xent${tag}`, ...ce, logits, dlogits: logits, chunk, lossScale: t.lossScale }));
    // dW before dX: dX may overwrite these hF rows (hF's live copy is dX's buffer when hF is stored quantized).
    if (t.dw) {
      train.push(...t.dw.load(row0, rows));
      train.push(...t.dw.gemm({ label: `lm_head.dw${tag}`, a: logits, b: hF, c: t.dw.out, M: V, N: C, K: rows, transA: true, accumulate: i > 0 }));
    }
    const dx = { label: `lm_head.dx${tag}`, a: logits, b: a.w, c: at(t.dx), M: rows, N: C, K: V };
    train.push(...(t.dxGemm ? t.dxGemm(dx) : [matmul(rt, dx)]));
  });
  const mean = crossEntropyMean(rt, { label: 'xent', ...ce, loss: a.loss });
  loss.push(mean);
  if (a.train) train.push(mean);
  return { loss, train: a.train ? train : null, chunks: chunks.length };
}
