/**
 * safetensors reader and writer, byte-compatible with the Hugging Face library.
 *
 * File layout: [u64 LE N][N bytes of UTF-8 JSON header][tensor bytes]. The header maps each tensor
 * name to {dtype, shape, data_offsets: [begin, end)} (offsets relative to the end of the header), plus an
 * optional "__metadata__": {string: string}. Data are little-endian, C order, packed with no gaps; the
 * byte ranges, sorted, must tile the data section exactly.
 *
 * Writing follows the Rust library (`safetensors::serialize`, used by `save_file`) byte for byte:
 * tensors ordered by dtype descending (the crate's Dtype enum order, i.e. largest alignment first),
 * then by name; "__metadata__" first in the JSON; compact JSON; the header padded with spaces to a
 * multiple of 8, so every tensor starts 8-byte aligned relative to the file start.
 *
 * Reading validates everything before touching tensor bytes, so a corrupt or truncated file gives an
 * Error naming the problem instead of garbage. Returned arrays are views into `bytes` when aligned
 * (zero-copy for multi-hundred-MB checkpoints), copies otherwise; they share memory with the input.
 */

/** Dtypes in the order of the Rust crate's `Dtype` enum (the writer sorts by it, descending). */
const DTYPE_ORDER = ['BOOL', 'U8', 'I8', 'F8_E5M2', 'F8_E4M3', 'I16', 'U16', 'F16', 'BF16', 'I32', 'U32', 'F32', 'F64', 'I64', 'U64'] as const;
export type SafeDtype = (typeof DTYPE_ORDER)[number];

const DTYPE_SIZE: Record<SafeDtype, number> = {
  BOOL: 1, U8: 1, I8: 1, F8_E5M2: 1, F8_E4M3: 1, I16: 2, U16: 2, F16: 2, BF16: 2, I32: 4, U32: 4, F32: 4, F64: 8, I64: 8, U64: 8,
};

/** Same limit as the Rust crate: a larger header is treated as corruption. */
const MAX_HEADER_SIZE = 100_000_000;

/**
 * Typed array each dtype is returned as. F16/BF16 come back as raw bits (Uint16Array) and FP8 as raw
 * bytes: JS has no such number types, and decoding is the caller's choice (see bf16ToF32 / f16ToF32).
 */
export interface SafeArrayOf {
  BOOL: Uint8Array; U8: Uint8Array; I8: Int8Array; F8_E5M2: Uint8Array; F8_E4M3: Uint8Array;
  I16: Int16Array; U16: Uint16Array; F16: Uint16Array; BF16: Uint16Array;
  I32: Int32Array; U32: Uint32Array; F32: Float32Array; F64: Float64Array; I64: BigInt64Array; U64: BigUint64Array;
}
export type SafeArray = SafeArrayOf[SafeDtype];

export interface SafeTensorIn {
  name: string;
  dtype: SafeDtype;
  shape: number[];
  /** Raw little-endian element data; its byteLength must equal prod(shape) × dtype size. */
  data: ArrayBufferView;
}

export interface SafeTensor {
  dtype: SafeDtype;
  shape: number[];
  data: SafeArray;
}

export interface SafeTensorsFile {
  /** In file (offset) order. */
  tensors: Map<string, SafeTensor>;
  metadata: Record<string, string>;
}

function isDtype(s: unknown): s is SafeDtype {
  return typeof s === 'string' && (DTYPE_ORDER as readonly string[]).includes(s);
}

export function dtypeSize(d: SafeDtype): number {
  return DTYPE_SIZE[d];
}

function numel(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The library compares names as Rust `str` (UTF-8 bytes), which equals code-point order, not UTF-16. */
function compareUtf8(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done || y.done) return x.done && y.done ? 0 : x.done ? -1 : 1;
    const d = x.value.codePointAt(0)! - y.value.codePointAt(0)!;
    if (d !== 0) return d;
  }
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export function writeSafetensors(tensors: SafeTensorIn[], metadata?: Record<string, string>): Uint8Array {
  if (!LITTLE_ENDIAN) throw new Error('safetensors: big-endian hosts are not supported');
  const seen = new Set<string>();
  for (const t of tensors) {
    if (seen.has(t.name)) throw new Error(`safetensors: duplicate tensor name "${t.name}"`);
    if (t.name === '__metadata__') throw new Error('safetensors: "__metadata__" is reserved and cannot name a tensor');
    seen.add(t.name);
    if (!isDtype(t.dtype)) throw new Error(`safetensors: tensor "${t.name}" has unknown dtype ${String(t.dtype)}`);
    if (!Array.isArray(t.shape) || t.shape.some((d) => !Number.isSafeInteger(d) || d < 0)) {
      throw new Error(`safetensors: tensor "${t.name}" has invalid shape ${JSON.stringify(t.shape)}`);
    }
    const want = numel(t.shape) * DTYPE_SIZE[t.dtype];
    if (t.data.byteLength !== want) {
      throw new Error(`safetensors: tensor "${t.name}" (${t.dtype} [${t.shape.join(', ')}]) needs ${want} bytes, data has ${t.data.byteLength}`);
    }
  }
  if (metadata) {
    for (const [k, v] of Object.entries(metadata)) {
      if (typeof v !== 'string') throw new Error(`safetensors: metadata "${k}" must be a string, got ${typeof v}`);
    }
  }
  const order = [...tensors].sort(
    (a, b) => DTYPE_ORDER.indexOf(b.dtype) - DTYPE_ORDER.indexOf(a.dtype) || compareUtf8(a.name, b.name),
  );
  // Built by hand rather than JSON.stringify(object) so that key order is the library's even for
  // names that look like array indices ("0", "1"), which JS objects would move to the front.
  const parts: string[] = [];
  if (metadata !== undefined) parts.push(`"__metadata__":${JSON.stringify(metadata)}`);
  let offset = 0;
  for (const t of order) {
    const n = t.data.byteLength;
    parts.push(`${JSON.stringify(t.name)}:{"dtype":"${t.dtype}","shape":[${t.shape.join(',')}],"data_offsets":[${offset},${offset + n}]}`);
    offset += n;
  }
  const json = new TextEncoder().encode(`{${parts.join(',')}}`);
  const headerLen = json.length + ((8 - (json.length % 8)) % 8);
  const out = new Uint8Array(8 + headerLen + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerLen), true);
  out.set(json, 8);
  out.fill(0x20, 8 + json.length, 8 + headerLen);
  let pos = 8 + headerLen;
  for (const t of order) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), pos);
    pos += t.data.byteLength;
  }
  return out;
}

interface Entry {
  name: string;
  dtype: SafeDtype;
  shape: number[];
  begin: number;
  end: number;
}

function fail(msg: string): never {
  throw new Error(`safetensors: ${msg}`);
}

function parseEntry(name: string, v: unknown): Entry {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail(`entry "${name}" is not an object`);
  const o = v as Record<string, unknown>;
  const extra = Object.keys(o).filter((k) => k !== 'dtype' && k !== 'shape' && k !== 'data_offsets');
  if (extra.length) fail(`entry "${name}" has unknown field(s) ${extra.join(', ')}`);
  if (!isDtype(o.dtype)) fail(`tensor "${name}" has unknown dtype ${JSON.stringify(o.dtype)}`);
  const shape = o.shape;
  if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || (d as number) < 0)) {
    fail(`tensor "${name}" has invalid shape ${JSON.stringify(shape)} (want an array of non-negative integers)`);
  }
  const off = o.data_offsets;
  if (!Array.isArray(off) || off.length !== 2 || off.some((d) => !Number.isSafeInteger(d) || (d as number) < 0)) {
    fail(`tensor "${name}" has invalid data_offsets ${JSON.stringify(off)} (want [begin, end])`);
  }
  const [begin, end] = off as number[];
  if (end < begin) fail(`tensor "${name}" has data_offsets [${begin}, ${end}] with end before begin`);
  return { name, dtype: o.dtype, shape: shape as number[], begin, end };
}

function typedView(dtype: SafeDtype, buf: ArrayBuffer, byteOffset: number, byteLength: number): SafeArray {
  const n = byteLength / DTYPE_SIZE[dtype];
  switch (dtype) {
    case 'F32': return new Float32Array(buf, byteOffset, n);
    case 'F64': return new Float64Array(buf, byteOffset, n);
    case 'I32': return new Int32Array(buf, byteOffset, n);
    case 'U32': return new Uint32Array(buf, byteOffset, n);
    case 'I16': return new Int16Array(buf, byteOffset, n);
    case 'U16': case 'F16': case 'BF16': return new Uint16Array(buf, byteOffset, n);
    case 'I64': return new BigInt64Array(buf, byteOffset, n);
    case 'U64': return new BigUint64Array(buf, byteOffset, n);
    case 'I8': return new Int8Array(buf, byteOffset, n);
    default: return new Uint8Array(buf, byteOffset, n);
  }
}

export function readSafetensors(bytes: Uint8Array): SafeTensorsFile {
  if (!LITTLE_ENDIAN) throw new Error('safetensors: big-endian hosts are not supported');
  if (!(bytes instanceof Uint8Array)) fail('input must be a Uint8Array');
  if (bytes.length < 8) fail(`file is ${bytes.length} bytes, too short for the 8-byte header length`);
  const n64 = new DataView(bytes.buffer, bytes.byteOffset, 8).getBigUint64(0, true);
  if (n64 > BigInt(MAX_HEADER_SIZE)) fail(`header length ${n64} is above the ${MAX_HEADER_SIZE}-byte limit (corrupt or not a safetensors file)`);
  const n = Number(n64);
  if (8 + n > bytes.length) fail(`header length ${n} runs past the end of the ${bytes.length}-byte file (truncated?)`);
  if (n < 2) fail(`header length ${n} is too small for a JSON object`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes.subarray(8, 8 + n));
  } catch {
    fail('header is not valid UTF-8');
  }
  if (text[0] !== '{') fail(`header does not start with "{" (got ${JSON.stringify(text.slice(0, 16))}): not a safetensors file`);
  let header: unknown;
  try {
    header = JSON.parse(text);
  } catch (e) {
    fail(`header is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof header !== 'object' || header === null || Array.isArray(header)) fail('header JSON is not an object');

  const metadata: Record<string, string> = {};
  const entries: Entry[] = [];
  for (const [name, v] of Object.entries(header as Record<string, unknown>)) {
    if (name === '__metadata__') {
      if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('"__metadata__" is not an object');
      for (const [k, s] of Object.entries(v as Record<string, unknown>)) {
        if (typeof s !== 'string') fail(`"__metadata__" value for "${k}" is not a string`);
        metadata[k] = s;
      }
      continue;
    }
    entries.push(parseEntry(name, v));
  }

  // The sorted byte ranges must tile [0, data length) with no gap or overlap (as the Rust crate checks).
  const dataStart = 8 + n;
  const dataLen = bytes.length - dataStart;
  entries.sort((a, b) => a.begin - b.begin || a.end - b.end);
  let cursor = 0;
  for (const e of entries) {
    if (e.begin < cursor) {
      const prev = entries.find((p) => p !== e && p.begin <= e.begin && p.end > e.begin);
      fail(`tensor "${e.name}" bytes [${e.begin}, ${e.end}) overlap${prev ? ` tensor "${prev.name}" [${prev.begin}, ${prev.end})` : ' another tensor'}`);
    }
    if (e.begin > cursor) fail(`gap in the data section: bytes [${cursor}, ${e.begin}) belong to no tensor (before "${e.name}")`);
    if (e.end > dataLen) fail(`tensor "${e.name}" bytes [${e.begin}, ${e.end}) run past the ${dataLen}-byte data section (truncated?)`);
    const want = numel(e.shape) * DTYPE_SIZE[e.dtype];
    if (!Number.isSafeInteger(want)) fail(`tensor "${e.name}" shape [${e.shape.join(', ')}] is too large`);
    if (e.end - e.begin !== want) {
      fail(`tensor "${e.name}" is ${e.dtype} [${e.shape.join(', ')}] = ${want} bytes but data_offsets [${e.begin}, ${e.end}) span ${e.end - e.begin}`);
    }
    cursor = e.end;
  }
  if (cursor !== dataLen) fail(`data section is ${dataLen} bytes but the tensors cover ${cursor} (${dataLen > cursor ? 'trailing bytes' : 'truncated'})`);

  const tensors = new Map<string, SafeTensor>();
  for (const e of entries) {
    const abs = bytes.byteOffset + dataStart + e.begin;
    const len = e.end - e.begin;
    const aligned = abs % DTYPE_SIZE[e.dtype] === 0;
    const data = aligned
      ? typedView(e.dtype, bytes.buffer as ArrayBuffer, abs, len)
      : typedView(e.dtype, bytes.slice(dataStart + e.begin, dataStart + e.end).buffer as ArrayBuffer, 0, len);
    tensors.set(e.name, { dtype: e.dtype, shape: [...e.shape], data });
  }
  return { tensors, metadata };
}

/** Exact widening of bfloat16 bits (the upper half of an f32). */
export function bf16ToF32(bits: Uint16Array): Float32Array {
  const out = new Uint32Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = bits[i] << 16;
  return new Float32Array(out.buffer);
}

/** Exact widening of IEEE half-precision bits (subnormals, infinities and NaN included). */
export function f16ToF32(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  for (let i = 0; i < bits.length; i++) {
    const h = bits[i];
    const s = h & 0x8000 ? -1 : 1;
    const e = (h >> 10) & 0x1f;
    const m = h & 0x3ff;
    out[i] = e === 0 ? s * m * 2 ** -24 : e === 31 ? (m ? NaN : s * Infinity) : s * (1 + m / 1024) * 2 ** (e - 15);
  }
  return out;
}
