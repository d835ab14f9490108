import { useEffect, useRef, useState } from 'react';
import { stopReasonText } from '../engine/model/generate';
import type { Generation } from '../worker/generate-client';
import { DEFAULT_GENERATE_PARAMS, type FromGenerate, type GenerateParams } from '../worker/generate-protocol';
import { useLabApi } from './context';
import { NumberField } from './NumberField';

interface Out {
  text: string;
  tokens: number;
  tokensPerS: number | null;
  status: string;
  error: string | null;
}

const EMPTY: Out = { text: '', tokens: 0, tokensPerS: null, status: '', error: null };

/** What to generate from: a run's latest checkpoint or an imported model (`id` names it in the page). */
export interface GenerateSource {
  id: string;
  title: string;
  generate(params: GenerateParams, on: (msg: FromGenerate) => void): Promise<Generation | null>;
}

/** Prompted generation from the run's latest checkpoint (KV cache, in the generation worker), streamed as it comes. */
export function RunGeneratePanel({ runId, checkpointStep }: { runId: string; checkpointStep: number }) {
  const { runs } = useLabApi();
  return <GeneratePanel source={{ id: runId, title: `Generate from the checkpoint after step ${checkpointStep}`, generate: (p, on) => runs.generate(runId, p, on) }} />;
}

/** Prompted generation from the model imported for the next run, before any training. */
export function ImportGeneratePanel({ name }: { name: string }) {
  const { runs, data } = useLabApi();
  const generate = async (p: GenerateParams, on: (msg: FromGenerate) => void) => {
    const files = await data.importedFiles();
    if (!files) {
      on({ type: 'error', id: -1, message: 'no imported model' });
      return null;
    }
    return runs.generateFrom(`import:${name}`, files, p, on);
  };
  return <GeneratePanel source={{ id: 'import', title: `Generate from the imported model (${name})`, generate }} />;
}

function GeneratePanel({ source }: { source: GenerateSource }) {
  const [p, setP] = useState<GenerateParams>(DEFAULT_GENERATE_PARAMS);
  const [out, setOut] = useState<Out>(EMPTY);
  const [running, setRunning] = useState(false);
  const handle = useRef<Generation | null>(null);
  useEffect(() => () => handle.current?.stop(), []);
  const set = (patch: Partial<GenerateParams>) => setP((q) => ({ ...q, ...patch }));

  const onEvent = (msg: FromGenerate) => {
    switch (msg.type) {
      case 'status':
        return setOut((o) => ({ ...o, status: msg.phase }));
      case 'text':
        return setOut((o) => ({ ...o, text: o.text + msg.text, tokens: msg.tokens, tokensPerS: msg.tokensPerS, status: 'generating' }));
      case 'done':
        handle.current = null;
        setRunning(false);
        return setOut((o) => ({ ...o, tokens: msg.tokens, tokensPerS: msg.tokensPerS, status: `${stopReasonText(msg.reason, msg.ctx)}; prefill ${msg.prefillMs.toFixed(0)} ms` }));
      case 'error':
        handle.current = null;
        setRunning(false);
        return setOut((o) => ({ ...o, status: '', error: msg.message }));
    }
  };

  const start = async () => {
    setOut({ ...EMPTY, status: 'starting' });
    setRunning(true);
    try {
      handle.current = await source.generate(p, onEvent);
    } catch (e) {
      onEvent({ type: 'error', id: -1, message: (e as Error).message });
    }
  };

  return (
    <section className="generate" aria-labelledby={`gen-${source.id}`} data-testid="generate" data-source={source.id}>
      <h3 id={`gen-${source.id}`}>{source.title}</h3>
      <label className="field">
        <span>Prompt</span>
        <textarea data-testid="gen-prompt" rows={2} value={p.prompt} onChange={(e) => set({ prompt: e.target.value })} />
      </label>
      <div className="row">
        <NumberField label="Temperature" testId="gen-temperature" min={0} value={p.temperature} onChange={(v) => v !== undefined && v >= 0 && set({ temperature: v })} />
        <NumberField label="Top-k (0 = all)" testId="gen-top-k" integer min={0} value={p.topK} onChange={(v) => v !== undefined && v >= 0 && set({ topK: v })} />
        <NumberField label="Top-p" testId="gen-top-p" min={0} value={p.topP} onChange={(v) => v !== undefined && v > 0 && v <= 1 && set({ topP: v })} />
        <NumberField label="Max tokens" testId="gen-max-tokens" integer min={1} value={p.maxTokens} onChange={(v) => v !== undefined && v >= 1 && set({ maxTokens: v })} />
        <NumberField label="Seed" testId="gen-seed" integer min={0} value={p.seed} onChange={(v) => v !== undefined && v >= 0 && set({ seed: v })} />
      </div>
      <div className="buttons">
        <button type="button" data-testid="gen-start" disabled={running} onClick={() => void start()}>Generate</button>
        <button type="button" data-testid="gen-stop" disabled={!running} onClick={() => handle.current?.stop()}>Stop</button>
      </div>
      <p className="muted small" data-testid="gen-status" data-running={running}>
        {out.tokens > 0 && <>{out.tokens} tokens{out.tokensPerS !== null && <> · <b data-testid="gen-tps">{out.tokensPerS.toFixed(1)}</b> tokens/s</>} · </>}
        {out.status}
      </p>
      {out.error && <div className="error" role="alert" data-testid="gen-error">{out.error}</div>}
      <pre className="gen-output" data-testid="gen-output" role="log" aria-live="polite" aria-label="Generated text">{out.text}</pre>
    </section>
  );
}
