/** Test support: one Dawn runtime per worker (SwiftShader when no GPU), seeded data, comparisons. */
import { acquireNodeGpu } from '../../src/engine/gpu/node';
import { Runtime } from '../../src/engine/gpu/runtime';

let runtime: Promise<Runtime> | null = null;

export function testRuntime(): Promise<Runtime> {
  runtime ??= acquireNodeGpu().then((gpu) => new Runtime(gpu));
  return runtime;
}
