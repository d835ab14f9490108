import type { GpuProbe } from './probe';
import type { GpuReport } from './protocol';

const FEATURES: [keyof GpuReport['features'], string][] = [
  ['subgroups', 'subgroups'],
  ['timestampQuery', 'timestamp-query'],
  ['shaderF16', 'shader-f16'],
  ['subgroupMatrix', 'subgroup matrix'],
];

/**
 * The adapter and the features the engine uses: from the page's probe, then from the worker's
 * device once a run has one (what the figures were measured on). Without WebGPU: acquireGpu's
 * message, which says how to turn it on.
 */
export function GpuInfo({ probe, measured }: { probe: GpuProbe; measured: GpuReport | null }) {
  if (probe.state === 'checking' && !measured) return <p className="notice" data-testid="webgpu-checking">Checking for WebGPU…</p>;
  const report = measured ?? (probe.state === 'available' ? probe.report : null);
  if (!report) {
    return (
      <div className="notice warn" role="alert" data-testid="webgpu-help">
        <h2>WebGPU is not available in this browser</h2>
        <p>{probe.state === 'unavailable' ? probe.message : ''}</p>
        <p>The benchmarks run on the GPU through WebGPU, so they cannot run here.</p>
      </div>
    );
  }
  const a = report.adapter;
  return (
    <div className="notice ok gpu-info" data-testid="adapter" data-vendor={a.vendor} data-architecture={a.architecture}>
      <div>
        WebGPU adapter: <b data-testid="adapter-name">{[a.vendor, a.architecture, a.device].filter(Boolean).join(' ') || 'unnamed adapter'}</b>
        {a.description && <span className="muted"> — {a.description}</span>}
      </div>
      <ul className="features">
        {FEATURES.map(([k, label]) => (
          <li key={k} className={report.features[k] ? 'on' : 'off'} data-testid={`feature-${k}`} data-on={report.features[k]}>
            {report.features[k] ? '✓' : '✗'} {label}
          </li>
        ))}
      </ul>
      {report.i8TensorCores && (
        <p className="small" data-testid="i8-tensor-cores">
          INT8 GEMMs on subgroup matrices: {report.i8TensorCores.chosen ?? 'not used (no configuration computed exactly)'}
        </p>
      )}
      {!report.features.timestampQuery && <p className="small muted">No timestamp queries on this device: figures are wall clock (submit to completion), which adds latency to small problems.</p>}
    </div>
  );
}
