import { describe, expect, it } from 'vitest';
import { unrollLoops, wgslIf, wgslSection } from '../../src/engine/kernels/wgsl';

const loop = (bound: string, body: string[], indent = '  ') =>
  [`${indent}// unroll`, `${indent}for (var j = 0u; j < ${bound}; j++) {`, ...body.map((l) => `${indent}  ${l}`), `${indent}}`];

describe('WGSL assembly', () => {
  it('wgslSection returns one section of a snippet file, and names the missing one', () => {
    const src = ['//--- a', 'fn a() {}', '//--- b', 'fn b() {}', ''].join('\n');
    expect(wgslSection(src, 'b').trim()).toBe('fn b() {}');
    expect(() => wgslSection(src, 'c')).toThrow(/section 'c' not found/);
  });

  it('wgslIf keeps one side of each #if block as written and drops the markers', () => {
    const src = ['a', '  // #if X', '  x1', '// #else', '  y1', '// #endif', 'b', '// #if X', 'x2', '// #endif', 'c'].join('\n');
    expect(wgslIf(src, { X: true })).toBe(['a', '  x1', 'b', 'x2', 'c'].join('\n'));
    expect(wgslIf(src, { X: false })).toBe(['a', '  y1', 'b', 'c'].join('\n'));
    expect(wgslIf('a\nb', {})).toBe('a\nb');
    expect(() => wgslIf(src, {})).toThrow(/no value for 'X'/);
    expect(() => wgslIf('// #if X\n// #if X\n// #endif\n// #endif', { X: true })).toThrow(/no nesting/);
    expect(() => wgslIf('// #if X\na', { X: true })).toThrow(/has no #endif/);
    expect(() => wgslIf('// #endif', {})).toThrow(/#endif without #if/);
    expect(() => wgslIf('// #if X\n// #else\n// #else\n// #endif', { X: true })).toThrow(/second #else/);
  });

  it('unrollLoops writes a marked loop out as BOUND blocks with a constant counter', () => {
    const src = ['fn f() {', '  var s = 0.0;', ...loop('N', ['s += x[j]; // a { comment } brace']), '  return;', '}'].join('\n');
    const out = unrollLoops(src, { N: 3 });
    expect(out).not.toContain('for (');
    expect(out).not.toContain('// unroll');
    expect(out.match(/let j = (\d)u;/g)).toEqual(['let j = 0u;', 'let j = 1u;', 'let j = 2u;']);
    expect(out.match(/s \+= x\[j\];/g)).toHaveLength(3);
    expect(out.split('\n').slice(0, 6)).toEqual(['fn f() {', '  var s = 0.0;', '  {', '    let j = 0u;', '    s += x[j]; // a { comment } brace', '  }']);
    expect(out.endsWith('  return;\n}')).toBe(true);
    // A bound of 0 leaves nothing; a literal bound needs no value.
    expect(unrollLoops(src, { N: 0 })).toBe(['fn f() {', '  var s = 0.0;', '  return;', '}'].join('\n'));
    expect(unrollLoops(loop('2', ['a();']).join('\n'), {}).match(/a\(\);/g)).toHaveLength(2);
  });

  it('unrollLoops writes out nested marked loops and leaves unmarked ones', () => {
    const inner = ['// unroll', 'for (var i = 0u; i < M; i++) {', '  s += x[i + j];', '}', 'for (var u = 0u; u < 4u; u++) { t += 1.0; }'];
    const out = unrollLoops(loop('N', inner).join('\n'), { N: 2, M: 3 });
    expect(out.match(/s \+= x\[i \+ j\];/g)).toHaveLength(6);
    expect(out.match(/for \(var u/g)).toHaveLength(2);
    expect(out).not.toContain('for (var i');
  });

  it('unrollLoops refuses what it cannot write out', () => {
    expect(() => unrollLoops(loop('N', ['s += 1.0;']).join('\n'), {})).toThrow(/no count for the loop bound 'N'/);
    expect(() => unrollLoops(loop('N', ['s += 1.0;']).join('\n'), { N: 2.5 })).toThrow(/no count/);
    expect(() => unrollLoops(loop('N', ['if (s > 1.0) { break; }']).join('\n'), { N: 2 })).toThrow(/break or continue/);
    expect(() => unrollLoops(loop('N', ['continue;']).join('\n'), { N: 2 })).toThrow(/break or continue/);
    expect(() => unrollLoops(['// unroll', 'for (var j = 1u; j < N; j++) {', '}'].join('\n'), { N: 2 })).toThrow(/is not 'for/);
    expect(() => unrollLoops(['// unroll', 'x = 1;'].join('\n'), {})).toThrow(/is not 'for/);
    expect(() => unrollLoops(['// unroll', 'for (var j = 0u; j < N; j++) {', '  s += 1.0;'].join('\n'), { N: 2 })).toThrow(/does not end/);
    expect(() => unrollLoops(['// unroll', 'for (var j = 0u; j < N; j++) {', '  s += 1.0; }'].join('\n'), { N: 2 })).toThrow(/does not end/);
  });
});
