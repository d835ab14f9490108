import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { bf16ToF32, f16ToF32, readSafetensors, writeSafetensors, type SafeDtype, type SafeTensorIn } from '../../src/engine/io/safetensors';

const enc = (s: string) => new TextEncoder().encode(s);

/** Assembles a file from a literal header (padded by the caller) and raw data bytes. */
function rawFile(header: string, data: ArrayLike<number> = [], headerLen?: number): Uint8Array {
  const h = enc(header);
  const n = headerLen ?? h.length;
  const out = new Uint8Array(8 + h.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), true);
  out.set(h, 8);
  out.set(Array.from(data), 8 + h.length);
  return out;
}

const f32bytes = (...v: number[]) => Array.from(new Uint8Array(new Float32Array(v).buffer));

describe('safetensors writer: byte-exact with the format', () => {
  it('one F32 tensor, header padded with spaces to a multiple of 8', () => {
    // Built by hand from the spec: compact JSON (65 bytes) + 7 spaces = 72, then the data.
    const header = '{"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}}';
    expect(header.length).toBe(65);
    const want = rawFile(header + ' '.repeat(7), f32bytes(0, 1, 2, 3, 4, 5));
    expect(Array.from(want.subarray(0, 8))).toEqual([72, 0, 0, 0, 0, 0, 0, 0]);
    const got = writeSafetensors([{ name: 'attn0', dtype: 'F32', shape: [1, 1, 2, 3], data: new Float32Array([0, 1, 2, 3, 4, 5]) }]);
    expect(Array.from(got)).toEqual(Array.from(want));
  });

  it('header already a multiple of 8 gets no padding', () => {
    const header = '{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}';
    expect(header.length).toBe(64);
    const got = writeSafetensors([{ name: 'attn.0', dtype: 'F32', shape: [1, 2, 3], data: new Float32Array([0, 1, 2, 3, 4, 5]) }]);
    expect(Array.from(got)).toEqual(Array.from(rawFile(header, f32bytes(0, 1, 2, 3, 4, 5))));
  });

  it('empty file and metadata-only file', () => {
    expect(Array.from(writeSafetensors([]))).toEqual([8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32]);
    const header = '{"__metadata__":{"framework":"pt"}}';
    expect(Array.from(writeSafetensors([], { framework: 'pt' }))).toEqual(Array.from(rawFile(header + ' '.repeat(5))));
  });

  it('orders tensors by dtype (largest first, as the Rust crate) then by name; __metadata__ first', () => {
    const got = writeSafetensors(
      [
        { name: 'b', dtype: 'U8', shape: [3], data: new Uint8Array([7, 8, 9]) },
        { name: 'z', dtype: 'F32', shape: [1], data: new Float32Array([1]) },
        { name: 'a', dtype: 'F32', shape: [2], data: new Float32Array([2, 3]) },
        { name: 'c', dtype: 'I32', shape: [], data: new Int32Array([-1]) },
        { name: '10', dtype: 'F32', shape: [0], data: new Float32Array(0) },
      ],
      { format: 'pt' },
    );
    const header =
      '{"__metadata__":{"format":"pt"},' +
      '"10":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},' +
      '"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' +
      '"z":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},' +
      '"c":{"dtype":"I32","shape":[],"data_offsets":[12,16]},' +
      '"b":{"dtype":"U8","shape":[3],"data_offsets":[16,19]}}';
    const pad = ' '.repeat((8 - (enc(header).length % 8)) % 8);
    const data = [...f32bytes(2, 3, 1), 255, 255, 255, 255, 7, 8, 9];
    expect(Array.from(got)).toEqual(Array.from(rawFile(header + pad, data)));
  });

  it('rejects inconsistent input', () => {
    const t = (o: Partial<SafeTensorIn>): SafeTensorIn => ({ name: 'x', dtype: 'F32', shape: [2], data: new Float32Array(2), ...o });
    expect(() => writeSafetensors([t({ shape: [3] })])).toThrow(/needs 12 bytes, data has 8/);
    expect(() => writeSafetensors([t({}), t({})])).toThrow(/duplicate tensor name "x"/);
    expect(() => writeSafetensors([t({ name: '__metadata__' })])).toThrow(/reserved/);
    expect(() => writeSafetensors([t({ shape: [-2] })])).toThrow(/invalid shape/);
  });
});

describe('safetensors round trip', () => {
  it('all dtypes, metadata, unicode names, zero-size tensors', () => {
    const tensors: SafeTensorIn[] = [
      { name: 'model.embed_tokens.weight', dtype: 'F32', shape: [3, 2], data: new Float32Array([1.5, -2, 3e-8, 4, 5, Math.PI]) },
      { name: 'ids', dtype: 'I32', shape: [4], data: new Int32Array([0, -1, 2 ** 31 - 1, -(2 ** 31)]) },
      { name: 'bytes', dtype: 'U8', shape: [2, 1], data: new Uint8Array([0, 255]) },
      { name: 'half', dtype: 'F16', shape: [2], data: new Uint16Array([0x3c00, 0xc000]) },
      { name: 'brain', dtype: 'BF16', shape: [2], data: new Uint16Array([0x3f80, 0x4049]) },
      { name: 'small', dtype: 'I8', shape: [3], data: new Int8Array([-128, 0, 127]) },
      { name: 'unsigned', dtype: 'U32', shape: [1], data: new Uint32Array([4294967295]) },
      { name: 'double', dtype: 'F64', shape: [1], data: new Float64Array([1 / 3]) },
      { name: 'empty', dtype: 'F32', shape: [0, 5], data: new Float32Array(0) },
      { name: 'ünïcødé ✓', dtype: 'U8', shape: [], data: new Uint8Array([42]) },
    ];
    const meta = { format: 'pt', note: 'quote " and \\ and\nnewline' };
    const file = readSafetensors(writeSafetensors(tensors, meta));
    expect(file.metadata).toEqual(meta);
    expect([...file.tensors.keys()].sort()).toEqual(tensors.map((t) => t.name).sort());
    for (const t of tensors) {
      const r = file.tensors.get(t.name)!;
      expect(r.dtype).toBe(t.dtype);
      expect(r.shape).toEqual(t.shape);
      expect(r.data.constructor).toBe(t.data.constructor);
      expect(Array.from(r.data as ArrayLike<number>)).toEqual(Array.from(t.data as unknown as ArrayLike<number>));
    }
    expect(Array.from(f16ToF32(file.tensors.get('half')!.data as Uint16Array))).toEqual([1, -2]);
    expect(Array.from(bf16ToF32(file.tensors.get('brain')!.data as Uint16Array))).toEqual([1, 3.140625]);
  });

  it('reads from an unaligned byteOffset (copies) and from a subarray', () => {
    const bytes = writeSafetensors([{ name: 'w', dtype: 'F32', shape: [3], data: new Float32Array([1, 2, 3]) }]);
    const shifted = new Uint8Array(bytes.length + 1);
    shifted.set(bytes, 1);
    const r = readSafetensors(shifted.subarray(1));
    expect(Array.from(r.tensors.get('w')!.data as Float32Array)).toEqual([1, 2, 3]);
  });

  it('property: random F32 tensor sets survive a round trip and re-serialize identically', () => {
    const dtypes: SafeDtype[] = ['F32', 'I32', 'U8', 'F16', 'BF16', 'I8', 'U32'];
    fc.assert(
      fc.property(
        fc.uniqueArray(
          fc.record({ name: fc.string({ minLength: 1, maxLength: 8 }), dtype: fc.constantFrom(...dtypes), shape: fc.array(fc.integer({ min: 0, max: 4 }), { maxLength: 3 }) }),
          { selector: (t) => t.name, maxLength: 6 },
        ),
        fc.dictionary(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 })),
        (specs, meta) => {
          const tensors = specs
            .filter((s) => s.name !== '__metadata__')
            .map((s, i) => {
              const nbytes = s.shape.reduce((a, b) => a * b, 1) * (s.dtype === 'F16' || s.dtype === 'BF16' ? 2 : s.dtype === 'U8' || s.dtype === 'I8' ? 1 : 4);
              const data = new Uint8Array(nbytes).map((_, j) => (i * 31 + j * 7) & 255);
              return { ...s, data };
            });
          const bytes = writeSafetensors(tensors, meta);
          const r = readSafetensors(bytes);
          expect(r.metadata).toEqual(meta);
          for (const t of tensors) {
            const got = r.tensors.get(t.name)!;
            expect(got.shape).toEqual(t.shape);
            expect(Array.from(new Uint8Array(got.data.buffer, got.data.byteOffset, got.data.byteLength))).toEqual(Array.from(t.data));
          }
          const again = writeSafetensors(
            [...r.tensors].map(([name, t]) => ({ name, ...t })),
            r.metadata,
          );
          expect(Array.from(again)).toEqual(Array.from(bytes));
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('safetensors reader: corrupt input gives a clear error', () => {
  const good = writeSafetensors(
    [
      { name: 'a', dtype: 'F32', shape: [2], data: new Float32Array([1, 2]) },
      { name: 'b', dtype: 'F32', shape: [2], data: new Float32Array([3, 4]) },
    ],
    { format: 'pt' },
  );

  it('truncated anywhere', () => {
    expect(() => readSafetensors(good.subarray(0, 5))).toThrow(/too short for the 8-byte header length/);
    expect(() => readSafetensors(good.subarray(0, 20))).toThrow(/runs past the end .* \(truncated\?\)/);
    expect(() => readSafetensors(good.subarray(0, good.length - 1))).toThrow(/tensor "b" .* run past the 15-byte data section/);
    // Every prefix fails with an Error from this module (never a RangeError or a silent success).
    for (let k = 0; k < good.length; k++) expect(() => readSafetensors(good.subarray(0, k)), `prefix ${k}`).toThrow(/^safetensors: /);
  });

  it('bad header length', () => {
    const huge = good.slice();
    new DataView(huge.buffer).setBigUint64(0, 2n ** 63n, true);
    expect(() => readSafetensors(huge)).toThrow(/header length .* above the 100000000-byte limit/);
    const long = good.slice();
    new DataView(long.buffer).setBigUint64(0, BigInt(good.length), true);
    expect(() => readSafetensors(long)).toThrow(/runs past the end/);
    const short = good.slice();
    new DataView(short.buffer).setBigUint64(0, 16n, true);
    expect(() => readSafetensors(short)).toThrow(/not valid JSON/);
  });

  it('bad JSON, not an object, not UTF-8', () => {
    expect(() => readSafetensors(rawFile('{"a": oops}     '))).toThrow(/header is not valid JSON/);
    expect(() => readSafetensors(rawFile('[1,2,3] '))).toThrow(/does not start with "\{"/);
    const bad = rawFile('{"a":1}  ');
    bad[10] = 0xff;
    expect(() => readSafetensors(bad)).toThrow(/not valid UTF-8/);
    expect(() => readSafetensors(rawFile('{"__metadata__":{"k":1}}'))).toThrow(/"__metadata__" value for "k" is not a string/);
  });

  it('bad entries', () => {
    const one = (entry: string, data: number[] = [0, 0, 0, 0]) => rawFile(`{"t":${entry}}`, data);
    expect(() => readSafetensors(one('{"dtype":"F31","shape":[1],"data_offsets":[0,4]}'))).toThrow(/unknown dtype "F31"/);
    expect(() => readSafetensors(one('{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}'))).toThrow(/invalid shape/);
    expect(() => readSafetensors(one('{"dtype":"F32","shape":[1],"data_offsets":[4,0]}'))).toThrow(/end before begin/);
    expect(() => readSafetensors(one('{"dtype":"F32","shape":[1]}'))).toThrow(/invalid data_offsets undefined/);
    expect(() => readSafetensors(one('{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}'))).toThrow(/unknown field\(s\) x/);
  });

  it('overlapping, gapped, out-of-range offsets and wrong sizes', () => {
    const two = (a: string, b: string, n: number) =>
      rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":${a}},"b":{"dtype":"F32","shape":[2],"data_offsets":${b}}}`, new Array(n).fill(0));
    expect(() => readSafetensors(two('[0,8]', '[4,12]', 12))).toThrow(/tensor "b" bytes \[4, 12\) overlap tensor "a" \[0, 8\)/);
    expect(() => readSafetensors(two('[0,8]', '[0,8]', 8))).toThrow(/overlap/);
    expect(() => readSafetensors(two('[0,8]', '[12,20]', 20))).toThrow(/gap in the data section: bytes \[8, 12\)/);
    expect(() => readSafetensors(two('[0,8]', '[8,16]', 12))).toThrow(/run past the 12-byte data section/);
    expect(() => readSafetensors(two('[0,8]', '[8,12]', 12))).toThrow(/"b" is F32 \[2\] = 8 bytes but data_offsets \[8, 12\) span 4/);
    expect(() => readSafetensors(two('[0,8]', '[8,16]', 20))).toThrow(/data section is 20 bytes but the tensors cover 16 \(trailing bytes\)/);
    expect(() => readSafetensors(rawFile('{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}'))).toThrow(/too large|span/);
  });
});
