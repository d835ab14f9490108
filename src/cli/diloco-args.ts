/**
 * --diloco H with --wire, --streaming, --overlap, --outer-lr, --outer-momentum: one parser for the
 * headless peer and the DiLoCo benches, checked as the group checks them (resolveDiloco).
 */
import { type DilocoConfig, resolveDiloco } from '../parallel/diloco/diloco';
import { WIRE_FORMATS, type WireFormat } from '../engine/scheme/wire';
import { num, UsageError } from './common';

export const DILOCO_FLAGS = ['wire', 'streaming', 'overlap', 'outer-lr', 'outer-momentum'] as const;

export const DILOCO_ARGS = {
  diloco: { type: 'string' }, wire: { type: 'string' }, streaming: { type: 'string' }, overlap: { type: 'string' },
  'outer-lr': { type: 'string' }, 'outer-momentum': { type: 'string' },
} as const;

export function dilocoArgs(a: Record<string, string | boolean | undefined>, defaultH: number): DilocoConfig {
  const s = (k: string) => a[k] as string | undefined;
  const wire = s('wire') ?? 'int8';
  if (!(WIRE_FORMATS as readonly string[]).includes(wire)) throw new UsageError(`--wire must be one of ${WIRE_FORMATS.join(', ')}, got '${wire}'`);
  const c: DilocoConfig = {
    innerSteps: num('diloco', s('diloco'), { int: true, min: 1 }) ?? defaultH,
    wire: wire as WireFormat,
    fragments: num('streaming', s('streaming'), { int: true, min: 1 }),
    overlap: num('overlap', s('overlap'), { int: true, min: 0 }),
    outerLr: num('outer-lr', s('outer-lr'), { min: 0 }),
    outerMomentum: num('outer-momentum', s('outer-momentum'), { min: 0 }),
  };
  try {
    resolveDiloco(c);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  return c;
}
