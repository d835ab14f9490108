import { useMemo, useState } from 'react';
import { useStore } from 'zustand';
import { DEFAULT_HUB_ENDPOINT } from '../engine/io/hub/hub';
import { HubImportController } from '../state/hub-import';
import { useLabApi } from './context';
import { formatBytes } from './format';

/** The endpoint outlives a reload (a mirror is a setting); the token does not (it is a secret). */
const ENDPOINT_KEY = 'webgpu-lab.hub-endpoint';

function storedEndpoint(): string {
  try {
    return localStorage.getItem(ENDPOINT_KEY) ?? '';
  } catch {
    return '';
  }
}

/** The data panel's "from the Hub" row: a model id fetched (cached in the browser) and imported as the next run's model. */
export function HubImport({ disabled }: { disabled: boolean }) {
  const { store, data } = useLabApi();
  const hub = useMemo(() => new HubImportController(store, data), [store, data]);
  const s = useStore(hub.state);
  const [id, setId] = useState('');
  const [endpoint, setEndpoint] = useState(storedEndpoint);
  const [token, setToken] = useState('');
  const busy = s.job !== null;
  const start = () => {
    try {
      localStorage.setItem(ENDPOINT_KEY, endpoint);
    } catch {
      // Storage refused (private mode): the setting lasts this page only.
    }
    void hub.start(id, { endpoint, token });
  };

  return (
    <>
      {/* Not a <form>: the row sits inside the run form, and Enter here must fetch, not start a run. */}
      <span className="dataset-row small" data-testid="hub-import">
        <label>
          from the Hub{' '}
          <input type="text" data-testid="hub-id" placeholder="HuggingFaceTB/SmolLM2-135M" value={id} disabled={busy || disabled} spellCheck={false}
            title="a Llama-architecture model id on the Hugging Face Hub, optionally @revision" onChange={(e) => setId(e.target.value)}
            onKeyDown={(e) => { if (e.key === 'Enter') { e.preventDefault(); if (!busy && id.trim()) start(); } }} />
        </label>
        <button type="button" className="small" data-testid="hub-fetch" disabled={busy || disabled || !id.trim()} onClick={start}>fetch</button>
        <details>
          <summary>Hub settings</summary>
          <label>
            endpoint{' '}
            <input type="url" data-testid="hub-endpoint" placeholder={DEFAULT_HUB_ENDPOINT} value={endpoint} disabled={busy} onChange={(e) => setEndpoint(e.target.value)} />
          </label>{' '}
          <label title="a Hugging Face access token for gated or private models; kept in this page only, never stored">
            token{' '}
            <input type="password" data-testid="hub-token" autoComplete="off" placeholder="hf_…" value={token} disabled={busy} onChange={(e) => setToken(e.target.value)} />
          </label>
        </details>
      </span>
      {s.job && (
        <span className="dataset-row small" data-testid="hub-job">
          <progress max={s.job.total || 1} value={s.job.done} aria-label={`${s.job.phase} ${s.job.id}`} />
          {s.job.phase} {s.job.id}{s.job.file && ` · ${s.job.file}`}
          {s.job.total > 1 && ` · ${formatBytes(s.job.done)} of ${formatBytes(s.job.total)}`}
          <button type="button" className="small" data-testid="hub-cancel" onClick={() => hub.cancel()}>cancel</button>
        </span>
      )}
      {s.error && <span className="form-problem" data-testid="hub-problem">{s.error}</span>}
    </>
  );
}
