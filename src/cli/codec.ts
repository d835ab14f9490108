/**
 * npm run codec -- --codec C --in X.npy --out Y.npy [options]: quantizes a float32 .npy tensor with
 * one of the lab's codecs, writes the dequantized tensor (same shape, float32) and prints the error
 * metrics as one JSON line (the last line of stdout). GPU kernels by default (Dawn; SwiftShader when
 * there is no GPU), the plain-TS reference with --ref; both give identical codes.
 */
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { NpyError, readNpy, writeNpy } from '../engine/io/npy';
import { buildDequantize, buildQuantize } from '../engine/kernels/quantize/quantize';
import { tacoCompress, tacoDecompress } from '../engine/kernels/taco/taco';
import { BITS, QUANT_FORMATS, type QuantFormat } from '../engine/quant/formats';
import { type CodeBits, codeBytes } from '../engine/quant/pack';
import { dequantizeRef, type Granularity, granularityLabel, numScales, payloadBytes, quantizeRef } from '../engine/quant/quantizer';
import { tacoCompressRef, tacoDecompressRef, tacoPayload, tacoPayloadBytes, TACO_GROUP_SIZES } from '../engine/quant/taco';
import { fail, UsageError } from './common';

const CODECS = [...QUANT_FORMATS, 'taco'] as const;
type Codec = (typeof CODECS)[number];

const HELP = `usage: npm run codec -- --codec ${CODECS.join('|')} --in X.npy --out Y.npy [options]
  --granularity tensor|row|column|group   scale granularity (default group; taco: group only)
                                          row = each row of the last axis, column = each last-axis index
  --group G                   group size along the flattened C-order array (default 128;
                              taco: ${TACO_GROUP_SIZES.join(', ')}); ignored by tensor/row/column
  --rounding nearest|stochastic   rounding of the codes (default nearest; taco: nearest only)
  --seed S                    stochastic-rounding seed (default 0)
  --payload P.bin             also write the payload: codes, then fp32 scales (taco: codes, s, a)
  --ref                       run the TypeScript reference instead of the GPU kernels
The last line of stdout is JSON: {codec, n, bits_per_element, payload_bytes, mse, rel_mse, snr_db, max_abs_err}
(snr_db and rel_mse are null where they are infinite or undefined).`;

interface Options {
  codec: Codec;
  input: string;
  output: string;
  payload?: string;
  granularity: 'tensor' | 'row' | 'column' | 'group';
  group: number;
  stochastic: boolean;
  seed: number;
  ref: boolean;
}

function parse(argv: string[]): Options | null {
  let a;
  try {
    a = parseArgs({
      args: argv,
      options: {
        codec: { type: 'string' }, in: { type: 'string' }, out: { type: 'string' }, payload: { type: 'string' },
        granularity: { type: 'string' }, group: { type: 'string' }, rounding: { type: 'string' },
        seed: { type: 'string' }, ref: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (e) {
    throw new UsageError(`${(e as Error).message} (see --help)`);
  }
  if (a.help) {
    console.log(HELP);
    return null;
  }
  if (!a.codec) throw new UsageError(`--codec is required (${CODECS.join(', ')})`);
  if (!(CODECS as readonly string[]).includes(a.codec)) throw new UsageError(`--codec must be one of ${CODECS.join(', ')}, got '${a.codec}'`);
  const codec = a.codec as Codec;
  if (!a.in) throw new UsageError('--in X.npy is required');
  if (!a.out) throw new UsageError('--out Y.npy is required');
  // The output would replace the tensor being coded before anyone could compare the two.
  for (const [flag, p] of [['--out', a.out], ['--payload', a.payload]] as const) {
    if (p !== undefined && sameFile(a.in, p)) throw new UsageError(`${flag} ${p} is the --in file; write the result to another path`);
  }
  const granularity = (a.granularity ?? 'group') as Options['granularity'];
  if (!['tensor', 'row', 'column', 'group'].includes(granularity)) {
    throw new UsageError(`--granularity must be tensor, row, column or group, got '${a.granularity}'`);
  }
  const group = a.group === undefined ? 128 : Number(a.group);
  if (!Number.isInteger(group) || group < 1 || group > 2 ** 24) throw new UsageError(`--group expects a positive integer, got '${a.group}'`);
  const rounding = a.rounding ?? 'nearest';
  if (rounding !== 'nearest' && rounding !== 'stochastic') throw new UsageError(`--rounding must be nearest or stochastic, got '${a.rounding}'`);
  const seed = a.seed === undefined ? 0 : Number(a.seed);
  if (!Number.isInteger(seed) || seed < 0 || seed >= 2 ** 32) throw new UsageError(`--seed expects an integer in [0, 2^32), got '${a.seed}'`);
  if (codec === 'taco') {
    if (granularity !== 'group') throw new UsageError(`taco quantizes groups only (got --granularity ${granularity})`);
    if (!(TACO_GROUP_SIZES as readonly number[]).includes(group)) {
      throw new UsageError(`taco needs --group in ${TACO_GROUP_SIZES.join(', ')}, got ${group}`);
    }
    if (rounding !== 'nearest') throw new UsageError('taco rounds to nearest only (no --rounding stochastic)');
  }
  return {
    codec, input: a.in, output: a.out, payload: a.payload, granularity, group,
    stochastic: rounding === 'stochastic', seed, ref: !!a.ref,
  };
}

function sameFile(a: string, b: string): boolean {
  if (resolve(a) === resolve(b)) return true;
  try {
    const [x, y] = [statSync(a), statSync(b)];
    return x.dev === y.dev && x.ino === y.ino;
  } catch {
    return false;
  }
}

function readInput(path: string): { x: Float32Array; shape: number[] } {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (e) {
    throw new UsageError(`cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  let arr;
  try {
    arr = readNpy(bytes);
  } catch (e) {
    if (e instanceof NpyError) throw new UsageError(`${path}: ${e.message}`);
    throw e;
  }
  if (arr.dtype !== '<f4') throw new UsageError(`${path}: expected float32 ('<f4') data, got '${arr.dtype}' (convert with a.astype(np.float32))`);
  if (arr.data.length === 0) throw new UsageError(`${path}: the array has no elements (shape (${arr.shape.join(', ')}))`);
  return { x: arr.data as Float32Array, shape: arr.shape };
}

function granularityFor(o: Options, shape: number[], n: number): Granularity {
  const last = shape.length ? shape[shape.length - 1] : 1;
  switch (o.granularity) {
    case 'tensor':
      return { kind: 'tensor' };
    case 'row':
      return { kind: 'row', rowLength: last || n };
    case 'column':
      return { kind: 'column', rowLength: last || n };
    case 'group':
      return { kind: 'group', size: o.group };
  }
}

interface Coded {
  xhat: Float32Array;
  payload: Uint8Array;
  label: string;
}

function quantPayload(fmt: QuantFormat, n: number, words: Uint32Array, scales: Float32Array): Uint8Array {
  const codes = codeBytes(words, n, BITS[fmt] as CodeBits);
  const out = new Uint8Array(codes.length + 4 * scales.length);
  out.set(codes, 0);
  out.set(new Uint8Array(scales.buffer, scales.byteOffset, scales.byteLength), codes.length);
  return out;
}

function runRef(o: Options, x: Float32Array, gran: Granularity): Coded {
  if (o.codec === 'taco') {
    const c = tacoCompressRef(x, o.group);
    return { xhat: tacoDecompressRef(c, x.length, o.group), payload: tacoPayload(c), label: `group(${o.group})` };
  }
  const q = quantizeRef(x, o.codec, gran, { rounding: o.stochastic ? 'stochastic' : 'nearest', seed: o.seed });
  return { xhat: dequantizeRef(q), payload: quantPayload(o.codec, x.length, q.words, q.scales), label: granularityLabel(gran) };
}

async function runGpu(rt: Runtime, o: Options, x: Float32Array, gran: Granularity): Promise<Coded> {
  const n = x.length;
  const xb = rt.upload('activations', 'codec.x', x);
  if (o.codec === 'taco') {
    const bytes = tacoPayloadBytes(n, o.group);
    const pb = rt.createBuffer('comm', 'codec.taco.payload', bytes);
    const yb = rt.createBuffer('activations', 'codec.taco.y', 4 * n);
    rt.run([
      tacoCompress(rt, { label: 'codec.taco.compress', x: xb, payload: pb, n, G: o.group }),
      tacoDecompress(rt, { label: 'codec.taco.decompress', payload: pb, y: yb, n, G: o.group }),
    ]);
    return { xhat: await rt.readF32(yb, 0, n), payload: new Uint8Array(await rt.read(pb, 0, bytes)), label: `group(${o.group})` };
  }
  const spec = { format: o.codec, granularity: gran, n };
  const q = buildQuantize(rt, spec, xb, { rounding: o.stochastic ? 'stochastic' : 'nearest', seed: o.seed });
  const d = buildDequantize(rt, spec, q.words, q.scales);
  rt.run([...q.dispatches, ...d.dispatches]);
  const words = await rt.readU32(q.words, 0, q.numWords);
  const scales = await rt.readF32(q.scales, 0, q.numScales);
  return { xhat: await rt.readF32(d.out, 0, n), payload: quantPayload(o.codec, n, words, scales), label: granularityLabel(gran) };
}

/** Error metrics over the finite inputs (non-finite ones are coded as 0 and reported separately). */
function metrics(x: Float32Array, xhat: Float32Array) {
  let se = 0;
  let sx = 0;
  let maxAbs = 0;
  let m = 0;
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i])) continue;
    const e = xhat[i] - x[i];
    se += e * e;
    sx += x[i] * x[i];
    maxAbs = Math.max(maxAbs, Math.abs(e));
    m++;
  }
  const mse = m ? se / m : 0;
  const finiteOrNull = (v: number) => (Number.isFinite(v) ? v : null);
  return {
    finite: m,
    mse,
    rel_mse: sx > 0 ? se / sx : se === 0 ? 0 : null,
    snr_db: se > 0 ? finiteOrNull(10 * Math.log10(sx / se)) : null,
    max_abs_err: maxAbs,
  };
}

async function main(): Promise<void> {
  const o = parse(process.argv.slice(2));
  if (!o) return;
  const { x, shape } = readInput(o.input);
  const n = x.length;
  const gran = granularityFor(o, shape, n);
  let coded: Coded;
  let backend = 'ts-reference';
  if (o.ref) {
    coded = runRef(o, x, gran);
  } else {
    let gpu;
    try {
      gpu = await acquireNodeGpu();
    } catch (e) {
      throw new Error(`${(e as Error).message} (run with --ref for the TypeScript reference)`);
    }
    const rt = new Runtime(gpu);
    backend = `gpu: ${gpu.adapterInfo.description || gpu.adapterInfo.vendor || 'WebGPU'}`;
    coded = await runGpu(rt, o, x, gran);
    rt.destroy();
  }
  writeFileSync(o.output, writeNpy(coded.xhat, shape));
  if (o.payload) writeFileSync(o.payload, coded.payload);
  const bytes = o.codec === 'taco' ? tacoPayloadBytes(n, o.group) : payloadBytes(o.codec, n, numScales(gran, n));
  if (bytes !== coded.payload.length) throw new Error(`internal: payload is ${coded.payload.length} bytes, expected ${bytes}`);
  const r = metrics(x, coded.xhat);
  if (r.finite < n) console.error(`warning: ${n - r.finite} non-finite inputs were coded as 0 and left out of the metrics`);
  const rounding = o.stochastic ? `stochastic(seed ${o.seed})` : 'nearest';
  console.log(
    `${o.codec} ${coded.label} ${rounding} on (${shape.join(', ')}): ${bytes} payload bytes, ` +
      `${((8 * bytes) / n).toFixed(3)} bits/element, SNR ${r.snr_db === null ? 'inf' : r.snr_db.toFixed(2)} dB [${backend}]`,
  );
  console.log(
    JSON.stringify({
      codec: o.codec,
      n,
      bits_per_element: (8 * bytes) / n,
      payload_bytes: bytes,
      mse: r.mse,
      rel_mse: r.rel_mse,
      snr_db: r.snr_db,
      max_abs_err: r.max_abs_err,
    }),
  );
}

main().then(() => process.exit(0), fail);
