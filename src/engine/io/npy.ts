/**
 * NumPy .npy reader and writer (format versions 1.0, 2.0, 3.0), little-endian numeric dtypes, C order.
 * File layout: "\x93NUMPY", major, minor, header length (u16 for v1, u32 for v2/v3), a Python dict
 * literal {'descr': …, 'fortran_order': …, 'shape': (…), } padded with spaces and '\n' so the data
 * starts on a 64-byte boundary, then the raw array bytes.
 * No dependency on Node: works on bytes, so the lab page can read and write the same files.
 */

export type NpyDtype = '<f4' | '<f8' | '<i4' | '<u4' | '<i2' | '<u2' | '|i1' | '|u1';
export type NpyData = Float32Array | Float64Array | Int32Array | Uint32Array | Int16Array | Uint16Array | Int8Array | Uint8Array;

export interface NpyArray {
  dtype: NpyDtype;
  shape: number[];
  data: NpyData;
  /** Always false unless read with { allowFortran: true } (then data is in Fortran order). */
  fortranOrder: boolean;
}

export class NpyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NpyError';
  }
}

type Ctor = { new (buf: ArrayBuffer): NpyData; BYTES_PER_ELEMENT: number };

const DTYPES: Record<NpyDtype, Ctor> = {
  '<f4': Float32Array,
  '<f8': Float64Array,
  '<i4': Int32Array,
  '<u4': Uint32Array,
  '<i2': Int16Array,
  '<u2': Uint16Array,
  '|i1': Int8Array,
  '|u1': Uint8Array,
};

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const ALIGN = 64;

/** Accepts numpy's spellings of the same dtype ('=' native, no prefix, any order mark on one-byte types). */
function normaliseDescr(descr: string): NpyDtype {
  let d = descr;
  if (d.startsWith('=')) d = `<${d.slice(1)}`; // every host we run on is little-endian
  if (/^[fiu]\d$/.test(d)) d = `<${d}`;
  if (/^[<>|]?[iu]1$/.test(d)) d = `|${d.slice(-2)}`; // byte order means nothing for one byte
  if (d in DTYPES) return d as NpyDtype;
  if (d.startsWith('>')) throw new NpyError(`big-endian dtype '${descr}' is not supported (convert with a.astype('<${d.slice(1)}'))`);
  throw new NpyError(`unsupported dtype '${descr}' (supported: ${Object.keys(DTYPES).join(', ')})`);
}

function parseHeader(h: string): { descr: string; fortran: boolean; shape: number[] } {
  const t = h.trim();
  if (!t.startsWith('{') || !t.endsWith('}')) throw new NpyError(`header is not a dict literal: ${JSON.stringify(t.slice(0, 80))}`);
  const descr = /['"]descr['"]\s*:\s*['"]([^'"]*)['"]/.exec(t);
  const fortran = /['"]fortran_order['"]\s*:\s*(True|False)/.exec(t);
  const shape = /['"]shape['"]\s*:\s*\(([^)]*)\)/.exec(t);
  if (!descr) throw new NpyError("header has no 'descr' string (structured dtypes are not supported)");
  if (!fortran) throw new NpyError("header has no 'fortran_order' True/False");
  if (!shape) throw new NpyError("header has no 'shape' tuple");
  const dims = shape[1]
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '')
    .map((s) => {
      const v = /^(\d+)L?$/.exec(s);
      if (!v) throw new NpyError(`bad shape entry '${s}'`);
      return Number(v[1]);
    });
  return { descr: descr[1], fortran: fortran[1] === 'True', shape: dims };
}

export function readNpy(bytes: Uint8Array, opts: { allowFortran?: boolean } = {}): NpyArray {
  if (bytes.length < 10 || MAGIC.some((b, i) => bytes[i] !== b)) throw new NpyError('not a .npy file (missing \\x93NUMPY magic)');
  const major = bytes[6];
  const minor = bytes[7];
  if (major < 1 || major > 3) throw new NpyError(`unsupported .npy format version ${major}.${minor}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const pre = major === 1 ? 10 : 12;
  if (bytes.length < pre) throw new NpyError('truncated .npy header');
  const hlen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  if (bytes.length < pre + hlen) throw new NpyError(`truncated .npy header (needs ${hlen} bytes, file has ${bytes.length - pre})`);
  const header = new TextDecoder(major === 3 ? 'utf-8' : 'latin1').decode(bytes.subarray(pre, pre + hlen));
  const { descr, fortran, shape } = parseHeader(header);
  if (fortran && !opts.allowFortran) {
    throw new NpyError('Fortran-ordered arrays are not supported (save a C-ordered array: np.ascontiguousarray(a))');
  }
  const dtype = normaliseDescr(descr);
  const ctor = DTYPES[dtype];
  const count = shape.reduce((a, b) => a * b, 1);
  const need = count * ctor.BYTES_PER_ELEMENT;
  const have = bytes.length - pre - hlen;
  if (have < need) throw new NpyError(`truncated data: shape (${shape.join(', ')}) ${dtype} needs ${need} bytes, file has ${have}`);
  if (have > need) throw new NpyError(`${have - need} unexpected bytes after the data of shape (${shape.join(', ')}) ${dtype}`);
  // Copy into a fresh, aligned buffer (the data need not be aligned in memory; and a Node Buffer's
  // slice() is a view into a shared pool, not a copy).
  const copy = new Uint8Array(need);
  copy.set(bytes.subarray(pre + hlen, pre + hlen + need));
  return { dtype, shape, data: new ctor(copy.buffer), fortranOrder: fortran };
}

function dtypeOf(data: NpyData): NpyDtype {
  for (const [d, c] of Object.entries(DTYPES) as [NpyDtype, Ctor][]) if (data instanceof c) return d;
  throw new NpyError(`unsupported array type ${(data as object).constructor.name}`);
}

export function writeNpy(data: NpyData, shape: number[]): Uint8Array {
  if (shape.some((d) => !Number.isInteger(d) || d < 0)) throw new NpyError(`bad shape (${shape.join(', ')})`);
  const count = shape.reduce((a, b) => a * b, 1);
  if (count !== data.length) throw new NpyError(`shape (${shape.join(', ')}) holds ${count} elements, data has ${data.length}`);
  const dtype = dtypeOf(data);
  const tuple = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  let dict = `{'descr': '${dtype}', 'fortran_order': False, 'shape': ${tuple}, }`;
  let major = 1;
  let pre = 10;
  if (dict.length + 1 + pre > 65535) {
    major = 2;
    pre = 12;
  }
  const total = Math.ceil((pre + dict.length + 1) / ALIGN) * ALIGN;
  dict = dict.padEnd(total - pre - 1, ' ') + '\n';
  const out = new Uint8Array(total + data.byteLength);
  out.set(MAGIC, 0);
  out[6] = major;
  out[7] = 0;
  const view = new DataView(out.buffer);
  if (major === 1) view.setUint16(8, dict.length, true);
  else view.setUint32(8, dict.length, true);
  for (let i = 0; i < dict.length; i++) out[pre + i] = dict.charCodeAt(i);
  out.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), total);
  return out;
}
