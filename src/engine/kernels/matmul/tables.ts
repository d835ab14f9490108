/**
 * GEMM picks measured per GPU model by bench/gemm-tune.ts, used by matmul-choice.ts when nothing
 * was tuned at run time on this device: keys are shapeKey() (`MxNxK` + N/T for each transpose),
 * values are choice names (`<variant>`, or `<variant>_sk<S>` for split-K, taken only by calls that
 * pass a large enough workspace). A table applies when every field of `match` is a substring of the
 * corresponding field of the adapter's info (lower case).
 * To add a GPU: run gemm_tune with --json and paste its `tunedTable` and `rankedTable` here, with
 * the adapter line it printed and the date.
 */
export interface MeasuredTable {
  match: { vendor?: string; architecture?: string; device?: string; description?: string };
  /** Where the figures come from: command, GPU, date. */
  source: string;
  /**
   * `vendor/architecture` (engine/tune/adapter.ts adapterFamily) of the GPUs this table seeds when
   * they have no table of their own and nothing tuned: the same chip family runs the same picks
   * well enough to start from (the H200's for an H100). Tuning on the GPU replaces them.
   */
  seeds?: string;
  table: Record<string, string>;
  /**
   * Where `table`'s pick is split-K: the choices a call with less workspace should take, fastest
   * first, each needing less workspace than the one before, down to a single pass (gemm_tune's
   * `rankedTable`). A call takes the first whose workspace it has; the model's forward and dX GEMMs
   * have none, its dW GEMMs a dead backward scratch buffer ([N, C] or [N, F] floats: LlamaModel.dwMatmul).
   */
  ranked?: Record<string, string[]>;
}

export const MEASURED_TABLES: MeasuredTable[] = [
  {
    match: { vendor: 'nvidia', device: 'h200' },
    seeds: 'nvidia/hopper',
    source: 'bench/gemm-tune.ts --json on an NVIDIA H200 (driver 580.159.04, Dawn/Vulkan), the base model\'s shapes and the squares '
      + 'with the LEAN (_ia) variants and stream-K over 264 workgroups; the 65-wide (vocabulary) shapes keep an earlier tune\'s picks, '
      + 'because a later tune timed them at the GPU\'s idle clock (the tunes: docs/records/README.md)',
    table: {
      '4096x4096x4096NN': '128x128k8_8x16_ia_st264',
      '4096x4096x4096NT': '128x256k8_8x16',
      '16384x384x384NT': '64x64k16_8x8',
      '16384x384x384NN': '128x128k8_8x16',
      '384x384x16384TN': '64x64k16_8x8_sk32',
      '16384x1024x384NT': '128x128k8_8x16_np',
      '16384x384x1024NN': '128x128k8_8x16_sk2',
      '1024x384x16384TN': '256x128k8_8x8_sk32',
      '16384x384x1024NT': '64x64k16_8x8',
      '16384x1024x384NN': '128x128k8_8x16',
      '384x1024x16384TN': '128x128k8_8x16_sk32',
      '16384x65x384NT': '256x128k8_8x8_sk2',
      '16384x384x65NN': '128x128k16_8x8_np',
      '65x384x16384TN': '128x128k8_8x8_sk32',
      '8192x768x768NT': '128x128k16_8x8_np',
      '8192x768x768NN': '128x128k8_8x16',
      '768x768x8192TN': '128x256k8_8x16_ia_sk7',
      '8192x2560x768NT': '128x256k8_8x16_ia',
      '8192x768x2560NN': '128x128k8_8x16_ia_st264',
      '2560x768x8192TN': '128x128k8_8x16_ia_st264',
      '8192x768x2560NT': '128x256k8_8x16_ia_sk2',
      '8192x2560x768NN': '128x128k8_8x16_ia',
      '768x2560x8192TN': '128x128k8_8x16_ia_st264',
      '8192x65x768NT': '64x64k16_8x8',
      '8192x768x65NN': '128x128k16_8x8_np',
      '65x768x8192TN': '128x128k8_8x8_sk32',
      '2048x2048x2048NN': '128x128k8_8x16_ia',
      '4096x4096x4096TN': '128x128k8_8x16_ia_st264',
      '8192x8192x8192NN': '128x128k8_8x16_ia_st264',
    },
    ranked: {
      '384x384x16384TN': ['64x64k16_8x8_sk32', '64x64k16_4x4_sk16', '64x64k16_4x4_sk8', '32x32k16_4x4_sk4', '64x64k16_4x4_sk2', '64x64k16_4x4'],
      '16384x384x1024NN': ['128x128k8_8x16_sk2', '128x128k16_8x8'],
      '1024x384x16384TN': ['256x128k8_8x8_sk32', '64x64k16_8x8_sk8', '64x64k16_8x8_sk2', '64x64k16_4x4'],
      '384x1024x16384TN': ['128x128k8_8x16_sk32', '64x64k16_8x8_sk8', '64x64k16_8x8_sk2', '64x64k16_4x4'],
      '16384x65x384NT': ['256x128k8_8x8_sk2', '128x128k8_8x8_sw8'],
      '65x384x16384TN': ['128x128k8_8x8_sk32', '32x32k16_4x4_sk16', '64x64k16_4x4_sk8', '32x32k16_4x4_sk4', '32x32k16_4x4_sk2', '32x32k16_4x4'],
      '768x768x8192TN': ['128x256k8_8x16_ia_sk7', '128x256k8_8x16_ia_sk6', '64x64k16_8x8_ia_sk5', '64x64k16_8x8_ia_sk3', '32x32k16_4x4_sk2', '64x64k16_8x8_ia'],
      '8192x768x2560NN': ['128x128k8_8x16_ia_st264', '128x128k8_8x16_ia'],
      '2560x768x8192TN': ['128x128k8_8x16_ia_st264', '128x256k8_8x16_ia_sk2', '128x128k8_8x16_ia'],
      '8192x768x2560NT': ['128x256k8_8x16_ia_sk2', '128x128k8_8x16_np_st264', '64x64k16_8x8_ia'],
      '768x2560x8192TN': ['128x128k8_8x16_ia_st264', '128x256k8_8x16_ia_sk2', '128x128k8_8x16_ia'],
      '65x768x8192TN': ['128x128k8_8x8_sk32', '128x128k8_8x8_sk16', '32x32k16_4x4_sk8', '64x64k16_4x4_sk4', '32x32k16_4x4_sk2', '32x32k16_4x4'],
      '4096x4096x4096NN': ['128x128k8_8x16_ia_st264', '128x128k8_8x16_ia'],
      '4096x4096x4096TN': ['128x128k8_8x16_ia_st264', '128x256k8_8x16_ia'],
      '8192x8192x8192NN': ['128x128k8_8x16_ia_st264', '128x128k8_8x16_ia'],
    },
  },
];
