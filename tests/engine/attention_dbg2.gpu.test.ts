import { it } from 'vitest';
import { testRuntime } from '../helpers/gpu';
import { readFileSync, writeSync } from 'node:fs';
const log = (...a: unknown[]) => writeSync(2, a.map(String).join(' ') + '\n');
it('compile times', async () => {
  const rt = process.env.FLAGS ? new (await import('../../src/engine/gpu/runtime')).Runtime(await (await import('../../src/engine/gpu/node')).acquireNodeGpu({ dawnFlags: JSON.parse(process.env.FLAGS) })) : await testRuntime();
  const code = readFileSync(process.env.CODEFILE!, 'utf8');
  for (const t of JSON.parse(process.env.TS!)) {
    const t0 = performance.now();
    rt.pipelines.get({ label: 'x', code, entryPoint: process.env.EP ?? 'attn_fwd', constants: { D: t[3] ?? 8, BQ: t[0], BK: t[1], NT: t[2] } });
    log(JSON.stringify(t), 'time', (performance.now() - t0).toFixed(0), 'ms');
  }
});
