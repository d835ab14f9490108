import { useLab } from './context';

/** Says whether WebGPU works here and, when it does not, how to turn it on. */
export function WebGpuNotice() {
  const gpu = useLab((s) => s.gpu);
  if (gpu.state === 'checking') return <p className="notice" data-testid="webgpu-checking">Checking for WebGPU…</p>;
  if (gpu.state === 'available') {
    return (
      <p className="notice ok" data-testid="webgpu-ok">
        WebGPU adapter: <b>{gpu.adapter}</b>
      </p>
    );
  }
  return (
    <div className="notice warn" role="alert" data-testid="webgpu-help">
      <h2>WebGPU is not available in this browser</h2>
      <p>
        {gpu.detail}. Training runs on the GPU through WebGPU, so it cannot start here; everything else on the page still
        works.
      </p>
      <ul>
        <li>Use Chrome or Edge 113 or newer (desktop).</li>
        <li>
          On Linux, open <code>chrome://flags/#enable-unsafe-webgpu</code>, set it to <i>Enabled</i> (and{' '}
          <code>chrome://flags/#enable-vulkan</code>), then relaunch; or start Chrome with{' '}
          <code>--enable-unsafe-webgpu --enable-features=Vulkan</code>.
        </li>
        <li>
          Without a GPU, Chrome falls back to SwiftShader (a CPU implementation): slow, but enough for the <i>micro</i>{' '}
          preset.
        </li>
        <li>The page must be served from https:// or http://localhost (WebGPU needs a secure context).</li>
      </ul>
    </div>
  );
}
