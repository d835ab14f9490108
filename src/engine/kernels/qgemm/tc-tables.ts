/**
 * The INT8 tensor-core GEMM's block layouts (qgemm-tc.ts): the candidates enableI8TensorCores
 * checks in order, and per GEMM shape the ones measured faster on a GPU model.
 */
import type { MeasuredTable } from '../matmul/tables';

/** How a workgroup of the tensor-core GEMM covers its block (the spelling-independent part of I8TcSpec). */
export interface I8TcLayout {
  tilesM: number;
  tilesN: number;
  sgM: number;
  sgN: number;
  /** Bytes of K staged per step: a multiple of the config's K and of 16 (vec4 loads). */
  BK: number;
  /** Padding bytes per staged row (a multiple of 16). */
  PAD: number;
  /**
   * Result tiles of a tile row stored per epilogue round (divides tilesN; default 1): each round is
   * two workgroup barriers, and a row strip of EPI tiles writes EPI·N consecutive floats of C.
   */
  EPI?: number;
}

/**
 * Block shapes bench/i8tc-tune.ts tries; enableI8TensorCores takes the first that is exact. The first
 * is the H200's best at 4096³ (the layout of every shape without one in MEASURED_I8TC_LAYOUTS). One
 * subgroup per workgroup is slowest but needs no uniformity filter.
 */
export const I8_TC_LAYOUTS: I8TcLayout[] = [
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 4 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 128, PAD: 16, EPI: 4 },
  { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 },
  { tilesM: 4, tilesN: 2, sgM: 2, sgN: 2, BK: 128, PAD: 16, EPI: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 128, PAD: 16 },
  { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 128, PAD: 16 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 64, PAD: 16 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 32 },
  // One subgroup per workgroup: offsets are workgroup-uniform, for a Dawn without the diagnostic rule.
  { tilesM: 4, tilesN: 2, sgM: 1, sgN: 1, BK: 128, PAD: 16 },
];

/**
 * Layouts per GEMM shape (M×N×K) that bench/i8tc-tune.ts measured faster than the first of
 * I8_TC_LAYOUTS, with their subgroup-matrix configuration (M×N×K of the tile). Each is checked bit
 * for bit on the device by enableI8TensorCores before any GEMM uses it.
 */
export const MEASURED_I8TC_LAYOUTS: { match: MeasuredTable['match']; source: string; table: Record<string, { cfg: [number, number, number]; layout: I8TcLayout }> }[] = [
  {
    match: { vendor: 'nvidia', device: 'h200' },
    source: 'bench/i8tc-tune.ts on an NVIDIA H200 (driver 580.159.04, Dawn/Vulkan), the base model\'s forward, dX and dW shapes at 16×512 tokens',
    table: {
      '8192x768x768': { cfg: [16, 16, 32], layout: { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 } },
      '8192x2560x768': { cfg: [16, 8, 32], layout: { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 } },
      '8192x768x2560': { cfg: [16, 16, 32], layout: { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 } },
      '8192x768x5120': { cfg: [16, 16, 32], layout: { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 } },
      // dW of gate/up and down over 8192 tokens: one pass in this layout beats the first layout split
      // over K (a shape with its own layout runs unsplit); q/k/v/o's 768×768 keep the split.
      '2560x768x8192': { cfg: [16, 16, 32], layout: { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 128, PAD: 16 } },
      '768x2560x8192': { cfg: [16, 16, 32], layout: { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 128, PAD: 16 } },
    },
  },
];
