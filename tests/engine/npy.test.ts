import { describe, expect, it } from 'vitest';
import { NpyError, readNpy, writeNpy } from '../../src/engine/io/npy';

// Files written by NumPy 2.4 (np.save / np.lib.format.write_array), base64.
const NUMPY = {
  // np.arange(6, dtype='<f4').reshape(2, 3) * 0.5
  f4: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDMpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAAAAPwAAgD8AAMA/AAAAQAAAIEA=',
  // np.array([[1, 2], [3, 255]], dtype=np.uint8)
  u1: 'k05VTVBZAQB2AHsnZGVzY3InOiAnfHUxJywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDIsIDIpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoBAgP/',
  // np.float32(3.25)
  scalar: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKCksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAFBA',
  // np.arange(4, dtype='<i4'), format version 2.0
  v2: 'k05VTVBZAgB0AAAAeydkZXNjcic6ICc8aTQnLCAnZm9ydHJhbl9vcmRlcic6IEZhbHNlLCAnc2hhcGUnOiAoNCwpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAQAAAAIAAAADAAAA',
  // np.arange(4, dtype='<i2'), format version 3.0
  v3: 'k05VTVBZAwB0AAAAeydkZXNjcic6ICc8aTInLCAnZm9ydHJhbl9vcmRlcic6IEZhbHNlLCAnc2hhcGUnOiAoNCwpLCB9ICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAEAAgADAA==',
  // np.asfortranarray(np.arange(6, dtype='<f4').reshape(2, 3))
  fortran: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBUcnVlLCAnc2hhcGUnOiAoMiwgMyksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAAABAQAAAgD8AAIBAAAAAQAAAoEA=',
  // np.arange(3, dtype='>f4')
  bigEndian: 'k05VTVBZAQB2AHsnZGVzY3InOiAnPmY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDMsKSwgfSAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAoAAAAAP4AAAEAAAAA=',
};
const b64 = (s: string) => new Uint8Array(Buffer.from(s, 'base64'));

describe('readNpy', () => {
  it('reads NumPy-written files: f4 2-D, u1, 0-d scalar, v2 and v3 headers', () => {
    const a = readNpy(b64(NUMPY.f4));
    expect(a.dtype).toBe('<f4');
    expect(a.shape).toEqual([2, 3]);
    expect(a.data).toBeInstanceOf(Float32Array);
    expect([...a.data]).toEqual([0, 0.5, 1, 1.5, 2, 2.5]);
    const u = readNpy(b64(NUMPY.u1));
    expect(u.dtype).toBe('|u1');
    expect([...u.data]).toEqual([1, 2, 3, 255]);
    const s = readNpy(b64(NUMPY.scalar));
    expect(s.shape).toEqual([]);
    expect([...s.data]).toEqual([3.25]);
    const v2 = readNpy(b64(NUMPY.v2));
    expect(v2.dtype).toBe('<i4');
    expect([...v2.data]).toEqual([0, 1, 2, 3]);
    // A Node Buffer from a shared pool (what readFileSync returns): data must not leak past the array.
    const pooled = Buffer.from(b64(NUMPY.f4));
    expect(readNpy(pooled).data.length).toBe(6);
    const v3 = readNpy(b64(NUMPY.v3));
    expect(v3.dtype).toBe('<i2');
    expect([...v3.data]).toEqual([0, 1, 2, 3]);
  });

  it('rejects Fortran order (unless allowed) and big-endian data with clear errors', () => {
    expect(() => readNpy(b64(NUMPY.fortran))).toThrow(/Fortran-ordered/);
    const f = readNpy(b64(NUMPY.fortran), { allowFortran: true });
    expect(f.fortranOrder).toBe(true);
    expect([...f.data]).toEqual([0, 3, 1, 4, 2, 5]);
    expect(() => readNpy(b64(NUMPY.bigEndian))).toThrow(/big-endian dtype '>f4'/);
  });

  it('rejects non-npy bytes, truncation, trailing bytes, bad headers', () => {
    const good = b64(NUMPY.f4);
    expect(() => readNpy(new TextEncoder().encode('hello, this is not numpy'))).toThrow(NpyError);
    expect(() => readNpy(new Uint8Array(0))).toThrow(/magic/);
    expect(() => readNpy(good.subarray(0, 40))).toThrow(/truncated .npy header/);
    expect(() => readNpy(good.subarray(0, good.length - 1))).toThrow(/truncated data: shape \(2, 3\) <f4 needs 24 bytes, file has 23/);
    const longer = new Uint8Array(good.length + 4);
    longer.set(good);
    expect(() => readNpy(longer)).toThrow(/4 unexpected bytes/);
    const badVersion = good.slice();
    badVersion[6] = 9;
    expect(() => readNpy(badVersion)).toThrow(/version 9/);
    const hdr = (dict: string) => {
      const bytes = writeNpy(new Float32Array(0), [0]);
      const text = new TextDecoder('latin1').decode(bytes.subarray(10)).replace(/\{.*\}/, dict);
      const out = new Uint8Array(10 + text.length);
      out.set(bytes.subarray(0, 10));
      new DataView(out.buffer).setUint16(8, text.length, true);
      for (let i = 0; i < text.length; i++) out[10 + i] = text.charCodeAt(i);
      return out;
    };
    expect(() => readNpy(hdr("{'descr': '<c8', 'fortran_order': False, 'shape': (0,), }"))).toThrow(/unsupported dtype '<c8'/);
    expect(() => readNpy(hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"))).toThrow(/bad shape entry/);
    expect(() => readNpy(hdr("{'descr': '<f4', 'shape': (0,), }"))).toThrow(/fortran_order/);
    expect(() => readNpy(hdr("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (0,), }"))).toThrow(/descr/);
  });
});

describe('writeNpy', () => {
  it('writes byte-for-byte what NumPy writes', () => {
    expect(writeNpy(Float32Array.from([0, 0.5, 1, 1.5, 2, 2.5]), [2, 3])).toEqual(b64(NUMPY.f4));
    expect(writeNpy(Uint8Array.from([1, 2, 3, 255]), [2, 2])).toEqual(b64(NUMPY.u1));
    expect(writeNpy(Float32Array.of(3.25), [])).toEqual(b64(NUMPY.scalar));
  });

  it('round-trips every dtype and shape, data starts 64-byte aligned', () => {
    const cases = [
      [Float32Array.from([1.5, -2, NaN, Infinity]), [2, 2]],
      [Float64Array.from([Math.PI, -0]), [2]],
      [Int32Array.from([-1, 2 ** 31 - 1, 5]), [3, 1]],
      [Uint32Array.from([0, 2 ** 32 - 1]), [1, 2]],
      [Int16Array.from([-3]), [1, 1, 1]],
      [Uint16Array.from([65535, 1]), [2]],
      [Int8Array.from([-128, 127]), [2]],
      [Uint8Array.from([]), [0, 5]],
    ] as const;
    for (const [data, shape] of cases) {
      const bytes = writeNpy(data, [...shape]);
      expect((bytes.length - data.byteLength) % 64).toBe(0);
      const r = readNpy(bytes);
      expect(r.shape).toEqual(shape);
      expect(r.data.constructor).toBe(data.constructor);
      expect(Object.is(r.data[1], data[1]) || r.data.length < 2).toBe(true);
      expect([...r.data].map(String)).toEqual([...data].map(String));
    }
  });

  it('rejects a shape that does not match the data', () => {
    expect(() => writeNpy(new Float32Array(5), [2, 3])).toThrow(/holds 6 elements, data has 5/);
    expect(() => writeNpy(new Float32Array(0), [-1])).toThrow(/bad shape/);
  });
});
