import { it } from 'vitest';
import { testRuntime } from '../helpers/gpu';
import fwdSrc from '../../shaders/attention.wgsl?raw';
import bwdSrc from '../../shaders/attention_bwd.wgsl?raw';
import { writeSync } from 'node:fs';
const log = (...a: unknown[]) => writeSync(2, a.map(String).join(' ') + '\n');
it('compile times', async () => {
  const rt = await testRuntime();
  const D = Number(process.env.D ?? 8);
  const t = JSON.parse(process.env.T ?? '[32,32,256]');
  const list: [string, string, Record<string, number>][] = [
    [fwdSrc, 'attn_fwd', { D, BQ: t[0], BK: t[1], NT: t[2] }],
    [bwdSrc, 'attn_bwd_di', { D }],
    [bwdSrc, 'attn_bwd_dq', { D, BM: t[0], BN: t[1], NT: t[2] }],
    [bwdSrc, 'attn_bwd_dkdv', { D, BM: t[0], BN: t[1], NT: t[2] }],
  ];
  for (const [code, ep, c] of list) {
    const t0 = performance.now();
    rt.pipelines.get({ label: ep, code, entryPoint: ep, constants: c });
    log(ep, JSON.stringify(c), (performance.now() - t0).toFixed(0), 'ms');
  }
});
