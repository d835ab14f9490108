/**
 * "Tune this GPU": times the kernel choices of the lab page's run of a preset at a batch and context
 * and scheme (the lab form's defaults unless set here or by the run view's link: ?preset=&batch=&seq=&scheme=) on this
 * GPU (engine/tune, in its own worker: tune.worker.ts) and keeps them in IndexedDB, where every later
 * run on this adapter takes them (its run view then says "tuned"). Progress with an estimate; Cancel
 * keeps what was tuned.
 */
import { useEffect, useRef, useState } from 'react';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { LAB_RUN_SHAPE } from '../engine/tune/lab-run';
import { stepCheckWords } from '../lab/tune-check';
import type { FromTuneWorker, ToTuneWorker } from './tune.worker';

type Phase = { kind: 'idle' } | { kind: 'running'; text: string; fraction: number } | { kind: 'done'; text: string } | { kind: 'error'; text: string };

const SCHEMES = Object.keys(SCHEME_PRESETS);

/**
 * The run the page was linked for (the run view's "tune this GPU": ?preset=micro&batch=8&seq=32&scheme=fp32),
 * else the lab form's defaults; a scheme that is no preset (an imported one) is named, and fp32 offered.
 */
function linkedRun(): { preset: PresetName; batch: string; seq: string; scheme: string; unknownScheme?: string } {
  const q = new URLSearchParams(location.search);
  const p = q.get('preset');
  const sc = q.get('scheme');
  const int = (k: string, d: number) => (/^\d+$/.test(q.get(k) ?? '') ? q.get(k)! : String(d));
  return {
    preset: PRESET_NAMES.includes(p as PresetName) ? p as PresetName : 'micro', batch: int('batch', LAB_RUN_SHAPE.batch), seq: int('seq', LAB_RUN_SHAPE.seq),
    scheme: sc && SCHEMES.includes(sc) ? sc : 'fp32', ...(sc && !SCHEMES.includes(sc) ? { unknownScheme: sc } : {}),
  };
}

export function TunePanel() {
  const [linked] = useState(linkedRun);
  const [preset, setPreset] = useState<PresetName>(linked.preset);
  const [batch, setBatch] = useState(linked.batch);
  const [seq, setSeq] = useState(linked.seq);
  const [scheme, setScheme] = useState(linked.scheme);
  const [budget, setBudget] = useState('90');
  const [phase, setPhase] = useState<Phase>({ kind: 'idle' });
  const worker = useRef<Worker | null>(null);
  useEffect(() => () => worker.current?.terminate(), []);

  const start = () => {
    const b = Number(batch);
    const t = Number(seq);
    if (!Number.isInteger(b) || b < 1 || !Number.isInteger(t) || t < 2) {
      setPhase({ kind: 'error', text: `batch and sequence length must be whole numbers (batch ≥ 1, sequence ≥ 2), got ${batch} and ${seq}` });
      return;
    }
    const what = `${preset} at batch ${b} × seq ${t}${scheme === 'fp32' ? '' : ` (${scheme})`}`;
    worker.current?.terminate();
    const w = new Worker(new URL('./tune.worker.ts', import.meta.url), { type: 'module', name: 'tune' });
    worker.current = w;
    setPhase({ kind: 'running', text: 'acquiring the GPU', fraction: 0 });
    w.onmessage = (ev: MessageEvent<FromTuneWorker>) => {
      const m = ev.data;
      if (m.type === 'started') setPhase({ kind: 'running', text: `${m.adapter}, ${what}: ${m.jobs} kernel choices to tune (${m.candidates} candidates, up to ~${Math.ceil(m.estimateS)} s)`, fraction: 0 });
      else if (m.type === 'progress') {
        const p = m.progress;
        setPhase({ kind: 'running', fraction: p.total ? p.done / p.total : 0, text: `${p.jobsDone} / ${p.jobs} choices: ${p.job}${p.candidate ? ` — ${p.candidate}` : ''} (~${Math.ceil(p.remainingS)} s left)` });
      } else if (m.type === 'done') {
        w.terminate();
        const check = m.stepCheck ? `; ${stepCheckWords(m.stepCheck)}` : '';
        const done = (m.tuned + m.cached === 0 ? 'nothing tuned' : `tuned: ${m.tuned} new, ${m.cached} already in the cache`) + check;
        setPhase({ kind: 'done', text: `${what}: ${m.cancelled ? 'cancelled; ' : ''}${done}${m.unfinished ? `, ${m.unfinished} not finished` : ''} (${m.seconds.toFixed(1)} s) on ${m.adapter}` });
      } else {
        w.terminate();
        setPhase({ kind: 'error', text: m.message });
      }
    };
    w.onerror = (ev) => {
      ev.preventDefault();
      setPhase({ kind: 'error', text: `tune worker failed: ${ev.message || 'could not load the worker script'}` });
    };
    w.postMessage({ type: 'tune', preset, batch: b, seq: t, scheme, budgetS: Math.max(1, Number(budget) || 90) } satisfies ToTuneWorker);
  };

  const running = phase.kind === 'running';
  return (
    <section id="tune" className="tune-panel" aria-label="Tune this GPU">
      <h2>Tune this GPU</h2>
      <p>Times the kernel choices a lab run of the model at this batch and sequence length makes on this GPU and keeps the fastest; every later run of those shapes on this GPU uses them.</p>
      <label>model{' '}
        <select value={preset} disabled={running} onChange={(e) => setPreset(e.target.value as PresetName)} data-testid="tune-model">
          {PRESET_NAMES.map((p) => <option key={p} value={p}>{p}</option>)}
        </select>
      </label>{' '}
      <label>batch{' '}
        <input type="number" min={1} value={batch} disabled={running} onChange={(e) => setBatch(e.target.value)} data-testid="tune-batch" style={{ width: '4em' }} />
      </label>{' '}
      <label>sequence length{' '}
        <input type="number" min={2} value={seq} disabled={running} onChange={(e) => setSeq(e.target.value)} data-testid="tune-seq" style={{ width: '4em' }} />
      </label>{' '}
      <label>scheme{' '}
        <select value={scheme} disabled={running} onChange={(e) => setScheme(e.target.value)} data-testid="tune-scheme">
          {SCHEMES.map((k) => <option key={k} value={k}>{k}</option>)}
        </select>
      </label>{' '}
      <label title="seconds for the whole tune, the step check included">budget (s){' '}
        <input type="number" min={1} value={budget} disabled={running} onChange={(e) => setBudget(e.target.value)} data-testid="tune-budget" style={{ width: '5em' }} />
      </label>{' '}
      {running
        ? <button type="button" onClick={() => worker.current?.postMessage({ type: 'cancel' } satisfies ToTuneWorker)} data-testid="tune-cancel">Cancel</button>
        : <button type="button" onClick={start} data-testid="tune-start">Tune this GPU</button>}
      {linked.unknownScheme && phase.kind === 'idle' && (
        <p className="muted small">The run used scheme {linked.unknownScheme}, which is not a preset here: pick the preset it matches, or tune it with <code>npm run tune -- --scheme FILE.json</code>.</p>
      )}
      {phase.kind !== 'idle' && (
        <p role="status" data-testid="tune-status" className={phase.kind === 'error' ? 'error' : undefined}>
          {phase.kind === 'running' && <progress value={phase.fraction} max={1} />} {phase.text}
        </p>
      )}
    </section>
  );
}
