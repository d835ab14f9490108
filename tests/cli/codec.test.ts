import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { readNpy, writeNpy } from '../../src/engine/io/npy';
import { QUANT_FORMATS, type QuantFormat } from '../../src/engine/quant/formats';
import { codeBytes } from '../../src/engine/quant/pack';
import { dequantizeRef, type Granularity, quantizeRef } from '../../src/engine/quant/quantizer';
import { tacoCompressRef, tacoDecompressRef, tacoPayload } from '../../src/engine/quant/taco';
import { bundleForTests, ROOT } from '../helpers/bundle';

const EXAMPLE = path.join(ROOT, 'public/examples/activations.npy');
let dir: string;
const bundled = bundleForTests('src/cli/codec.ts');

function spawnCli(entry: string[], args: string[]) {
  const r = spawnSync(process.execPath, [...entry, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  const lines = r.stdout.trim().split('\n');
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, json: r.status === 0 ? JSON.parse(lines[lines.length - 1]) : null };
}

/** `npm run codec -- …` exactly: scripts/run-node.mjs bundles src/cli/codec.ts and runs it. */
const codec = (...args: string[]) => spawnCli(['scripts/run-node.mjs', 'src/cli/codec.ts'], args);
/** The same bundle made once (for the many bad-input cases, where run-node's bundling step dominates). */
const codecFast = (...args: string[]) => spawnCli([bundled()], args);

/** The one error line (Dawn may print adapter warnings to stderr before it). */
function errorLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.startsWith('error:'));
  expect(lines.length).toBe(1);
  return lines[0];
}

const example = () => readNpy(readFileSync(EXAMPLE));

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'codec-cli-'));
});

describe('codec CLI on the shipped example', () => {
  it('the example is a 64×384 float32 tensor with outlier channels', () => {
    const a = example();
    expect(a.dtype).toBe('<f4');
    expect(a.shape).toEqual([64, 384]);
    const colMax = new Float64Array(384);
    a.data.forEach((v, i) => (colMax[i % 384] = Math.max(colMax[i % 384], Math.abs(v))));
    const sorted = [...colMax].sort((p, q) => p - q);
    expect(sorted[383] / sorted[192]).toBeGreaterThan(10); // outliers dominate the median channel
  });

  it.each(QUANT_FORMATS)('--ref %s: output, payload and metrics match the library', (fmt) => {
    const out = path.join(dir, `${fmt}.npy`);
    const pay = path.join(dir, `${fmt}.bin`);
    const r = codec('--codec', fmt, '--in', EXAMPLE, '--out', out, '--payload', pay, '--ref');
    expect(r.status, r.stderr).toBe(0);
    const x = example().data as Float32Array;
    const q = quantizeRef(x, fmt, { kind: 'group', size: 128 });
    const want = dequantizeRef(q);
    const got = readNpy(readFileSync(out));
    expect(got.shape).toEqual([64, 384]);
    expect(got.dtype).toBe('<f4');
    expect(Buffer.from((got.data as Float32Array).buffer).equals(Buffer.from(want.buffer))).toBe(true);
    const bits = fmt === 'int4' ? 4 : 8;
    const payload = readFileSync(pay);
    const codes = codeBytes(q.words, x.length, bits);
    expect(payload.length).toBe(codes.length + 4 * q.scales.length);
    expect(payload.subarray(0, codes.length).equals(Buffer.from(codes))).toBe(true);
    expect(payload.subarray(codes.length).equals(Buffer.from(q.scales.buffer))).toBe(true);
    let se = 0;
    let sx = 0;
    let mx = 0;
    for (let i = 0; i < x.length; i++) {
      se += (want[i] - x[i]) ** 2;
      sx += x[i] ** 2;
      mx = Math.max(mx, Math.abs(want[i] - x[i]));
    }
    expect(r.json).toEqual({
      codec: fmt,
      n: 24576,
      bits_per_element: bits + 32 / 128,
      payload_bytes: payload.length,
      mse: se / x.length,
      rel_mse: se / sx,
      snr_db: 10 * Math.log10(sx / se),
      max_abs_err: mx,
    });
  });

  it('--ref taco: TACO reference output and payload ([codes][s][a])', () => {
    const out = path.join(dir, 'taco.npy');
    const pay = path.join(dir, 'taco.bin');
    const r = codec('--codec', 'taco', '--group', '256', '--in', EXAMPLE, '--out', out, '--payload', pay, '--ref');
    expect(r.status, r.stderr).toBe(0);
    const x = example().data as Float32Array;
    const c = tacoCompressRef(x, 256);
    const got = readNpy(readFileSync(out)).data as Float32Array;
    expect(Buffer.from(got.buffer).equals(Buffer.from(tacoDecompressRef(c, x.length, 256).buffer))).toBe(true);
    expect(readFileSync(pay).equals(Buffer.from(tacoPayload(c)))).toBe(true);
    expect(r.json.bits_per_element).toBe(8 + 64 / 256);
    expect(r.json.snr_db).toBeGreaterThan(25);
  });

  it('GPU (default) gives byte-identical output and payload to --ref (int4 stochastic row, taco)', () => {
    const runs: [string, string[]][] = [
      ['int4', ['--codec', 'int4', '--granularity', 'row', '--rounding', 'stochastic', '--seed', '9']],
      ['taco', ['--codec', 'taco']],
    ];
    for (const [name, args] of runs) {
      const files = (tag: string) => ['--out', path.join(dir, `${name}.${tag}.npy`), '--payload', path.join(dir, `${name}.${tag}.bin`)];
      const gpu = codec(...args, '--in', EXAMPLE, ...files('gpu'));
      expect(gpu.status, gpu.stderr).toBe(0);
      expect(gpu.stdout).toMatch(/\[gpu: /);
      const ref = codec(...args, '--in', EXAMPLE, ...files('ref'), '--ref');
      expect(ref.status, ref.stderr).toBe(0);
      expect(gpu.json).toEqual(ref.json);
      for (const ext of ['npy', 'bin']) {
        expect(readFileSync(path.join(dir, `${name}.gpu.${ext}`)).equals(readFileSync(path.join(dir, `${name}.ref.${ext}`))), `${name} .${ext}`).toBe(true);
      }
    }
  });

  it('granularities, stochastic seeds and shapes other than 2-D', () => {
    const x = example().data as Float32Array;
    const cube = path.join(dir, 'cube.npy');
    writeFileSync(cube, writeNpy(x.slice(0, 2 * 3 * 64), [2, 3, 64]));
    const cases: [string[], QuantFormat, Granularity, number?][] = [
      [['--granularity', 'row'], 'int8', { kind: 'row', rowLength: 64 }],
      [['--granularity', 'column'], 'fp8-e5m2', { kind: 'column', rowLength: 64 }],
      [['--granularity', 'tensor'], 'int4', { kind: 'tensor' }],
      [['--group', '33', '--rounding', 'stochastic', '--seed', '5'], 'fp8-e4m3', { kind: 'group', size: 33 }, 5],
    ];
    for (const [args, fmt, g, seed] of cases) {
      const out = path.join(dir, 'cube.out.npy');
      const r = codecFast('--codec', fmt, ...args, '--in', cube, '--out', out, '--ref');
      expect(r.status, r.stderr).toBe(0);
      const want = dequantizeRef(quantizeRef(x.slice(0, 384), fmt, g, seed === undefined ? {} : { rounding: 'stochastic', seed }));
      const got = readNpy(readFileSync(out));
      expect(got.shape).toEqual([2, 3, 64]);
      expect([...got.data]).toEqual([...want]);
    }
    // A different seed changes the stochastic codes.
    const a = codecFast('--codec', 'int4', '--rounding', 'stochastic', '--seed', '1', '--in', cube, '--out', path.join(dir, 's1.npy'), '--ref');
    const b = codecFast('--codec', 'int4', '--rounding', 'stochastic', '--seed', '2', '--in', cube, '--out', path.join(dir, 's2.npy'), '--ref');
    expect(a.json.mse).not.toBe(b.json.mse);
  });
});

describe('codec CLI rejects bad input with one error line and exit code 2', () => {
  const out = () => path.join(dir, 'bad.out.npy');
  const file = (name: string, bytes: Uint8Array) => {
    const p = path.join(dir, name);
    writeFileSync(p, bytes);
    return p;
  };

  it.each([
    ['not a .npy file', () => file('text.npy', new TextEncoder().encode('just some text, not numpy')), /not a \.npy file/],
    ['float64 data', () => file('f8.npy', writeNpy(Float64Array.of(1, 2, 3), [3])), /expected float32 \('<f4'\) data, got '<f8'/],
    ['int32 data', () => file('i4.npy', writeNpy(Int32Array.of(1, 2), [2])), /got '<i4'/],
    ['truncated data', () => file('trunc.npy', writeNpy(new Float32Array(10), [10]).subarray(0, 128 + 20)), /truncated data/],
    ['truncated header', () => file('trunch.npy', writeNpy(new Float32Array(10), [10]).subarray(0, 30)), /truncated .npy header/],
    ['Fortran order', () => {
      const b = writeNpy(new Float32Array(6), [2, 3]);
      const text = new TextDecoder('latin1').decode(b.subarray(0, 128)).replace("'fortran_order': False", "'fortran_order': True ");
      for (let i = 0; i < 128; i++) b[i] = text.charCodeAt(i);
      return file('fortran.npy', b);
    }, /Fortran-ordered/],
    ['empty array', () => file('empty.npy', writeNpy(new Float32Array(0), [0, 4])), /no elements/],
    ['missing file', () => path.join(dir, 'does-not-exist.npy'), /cannot read .*ENOENT/],
  ])('%s', (_name, make, msg) => {
    const r = codecFast('--codec', 'int8', '--in', make(), '--out', out(), '--ref');
    expect(r.status).toBe(2);
    expect(errorLine(r.stderr)).toMatch(msg);
  });

  it.each([
    [['--codec', 'int3'], /--codec must be one of/],
    [[], /--codec is required/],
    [['--codec', 'int8', '--group', '0'], /--group expects a positive integer/],
    [['--codec', 'int8', '--group', '1.5'], /--group expects a positive integer/],
    [['--codec', 'int8', '--granularity', 'block'], /--granularity must be/],
    [['--codec', 'int8', '--rounding', 'up'], /--rounding must be/],
    [['--codec', 'int8', '--seed=-1'], /--seed expects/],
    [['--codec', 'taco', '--granularity', 'row'], /taco quantizes groups only/],
    [['--codec', 'taco', '--group', '100'], /taco needs --group in 32, 64, 128, 256, 512/],
    [['--codec', 'taco', '--rounding', 'stochastic'], /taco rounds to nearest only/],
    [['--codec', 'int8', '--bogus'], /Unknown option '--bogus'/],
  ])('options %j', (args, msg) => {
    const r = codecFast(...args, '--in', EXAMPLE, '--out', out(), '--ref');
    expect(r.status).toBe(2);
    expect(errorLine(r.stderr)).toMatch(msg);
  });

  it('--out or --payload naming the input is refused and the input is left as it was', () => {
    const src = file('keep.npy', writeNpy(Float32Array.of(1, 2, 3, 4), [4]));
    const before = readFileSync(src);
    for (const args of [['--out', src], ['--out', path.join(dir, '.', 'keep.npy')], ['--out', out(), '--payload', src]]) {
      const r = codecFast('--codec', 'int8', '--in', src, ...args, '--ref');
      expect(r.status).toBe(2);
      expect(errorLine(r.stderr)).toMatch(/is the --in file/);
    }
    expect(readFileSync(src).equals(before)).toBe(true);
  });

  it('a missing --out is reported', () => {
    const r = codecFast('--codec', 'int8', '--in', EXAMPLE, '--ref');
    expect(r.status).toBe(2);
    expect(errorLine(r.stderr)).toMatch(/--out Y.npy is required/);
  });
});
