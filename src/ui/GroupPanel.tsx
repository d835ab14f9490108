/**
 * The peer-group panel: create a group (optional passphrase) and share its link, or join the group
 * this page's link names; then the roster, the group run's settings with Start/Stop, the run's
 * status and errors, and per-step plots comparing runs (fp32 against compressed exchange).
 */
import { useEffect, useRef, useState } from 'react';
import { useStore } from 'zustand';
import { activeRun, groupRunCsv, groupRunJson, type GroupNotice, hashHex, hashTrail, shortPeer, type GroupRun, type GroupState } from '../state/group/group';
import { PRESETS } from '../engine/model/config';
import { modelFromText } from '../state/explain';
import { DEFAULT_DILOCO, dilocoOf, GROUP_MODES, GROUP_PRESETS, groupConfigProblem, type GroupMode, groupSchemeFields } from '../state/group/config';
import { pageGroupLab } from '../state/group/page';
import { useLab } from './context';
import { download, downloadCheckpoint, fileSlug } from './download';
import { GroupCharts } from './GroupCharts';
import { GroupRoster } from './GroupRoster';
import { IceSettings } from './IceSettings';
import { NumberField } from './NumberField';
import './Group.css';

function useGroup<T>(selector: (s: GroupState) => T): T {
  return useStore(pageGroupLab().store, selector);
}

function CopyLink({ link }: { link: string }) {
  const [copied, setCopied] = useState<'yes' | 'no' | null>(null);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(link);
      setCopied('yes');
    } catch {
      setCopied('no'); // no clipboard permission (e.g. not a secure origin): the field is selectable
    }
  };
  return (
    <div className="group-link">
      <input readOnly value={link} data-testid="group-link" onFocus={(e) => e.currentTarget.select()} aria-label="group link" />
      <button type="button" data-testid="group-copy" onClick={() => void copy()}>Copy link</button>
      {copied === 'yes' && <span className="muted small" data-testid="group-copied">copied</span>}
      {copied === 'no' && <span className="muted small">copy it from the field (no clipboard access here)</span>}
    </div>
  );
}

/** Before joining: the invitation of this page's link, and creating a group. */
function Lobby() {
  const { controller } = pageGroupLab();
  const invite = useGroup((s) => s.invite);
  const inviteError = useGroup((s) => s.inviteError);
  const joinError = useGroup((s) => s.joinError);
  const connecting = useGroup((s) => s.phase === 'connecting');
  // While connecting: the members found so far and how far each link got (a slow or stuck join says where).
  const links = useGroup((s) => s.roster.filter((e) => !e.self).map((e) => `${shortPeer(e.id)} ${e.state}`).join(', '));
  const [createPass, setCreatePass] = useState('');
  const [joinPass, setJoinPass] = useState('');
  const askPassphrase = joinError !== null && /passphrase/i.test(joinError);
  return (
    <div className="group-lobby">
      {inviteError && <div className="error" role="alert" data-testid="group-invite-error">This page's group link is not valid: {inviteError}</div>}
      {invite && (
        <div className="group-invite" data-testid="group-invite">
          <p>
            This link invites you to a training group (room <code>{invite.room.slice(0, 8)}…</code>{invite.server ? <> on {invite.server}</> : null}).
            {askPassphrase ? ' The group needs its passphrase:' : ' If the group has a passphrase, enter it:'}
          </p>
          <form className="group-row" onSubmit={(e) => { e.preventDefault(); void controller.join(joinPass); }}>
            <input type="password" placeholder="passphrase (if any)" value={joinPass} onChange={(e) => setJoinPass(e.target.value)}
              data-testid="group-join-passphrase" aria-label="passphrase" autoComplete="off" autoFocus={askPassphrase} />
            <button type="submit" className="primary" data-testid="group-join" disabled={connecting}>Join group</button>
          </form>
        </div>
      )}
      <form className="group-row" onSubmit={(e) => { e.preventDefault(); void controller.create(createPass); }}>
        <input type="password" placeholder="optional passphrase" value={createPass} onChange={(e) => setCreatePass(e.target.value)}
          data-testid="group-passphrase" aria-label="new group passphrase" autoComplete="new-password" />
        <button type="submit" data-testid="group-create" disabled={connecting}>Create a group</button>
        <span className="muted small">The link is the key (128 random bits); a passphrase adds a second one, never sent.</span>
      </form>
      <IceSettings />
      {connecting && (
        <p className="progress" data-testid="group-connecting" data-links={links}>
          <span className="spinner" /> connecting to the PeerServer and the members…{links && <span className="muted small"> ({links})</span>}
        </p>
      )}
      {connecting && <Notices />}
      {joinError && <div className="error" role="alert" data-testid="group-error"><b>Could not join:</b> {joinError}</div>}
    </div>
  );
}

const FIELD_LABELS = { steps: 'steps', batch: 'batch / member', seq: 'context', seed: 'seed' } as const;

function RunForm({ run }: { run: GroupRun | null }) {
  const { store, controller } = pageGroupLab();
  const draft = useGroup((s) => s.draft);
  const world = useGroup((s) => s.roster.filter((e) => e.state === 'admitted').length);
  const gpu = useLab((s) => s.gpu);
  const [customError, setCustomError] = useState<string | null>(null);
  const problem = customError ?? groupConfigProblem(draft, Math.max(world, 1));
  const set = store.getState().setDraft;
  const busy = run !== null;
  const noGpu = gpu.state === 'unavailable';
  return (
    <div className="group-form" data-testid="group-form">
      <label className="field">
        <span>exchange</span>
        <select value={draft.mode} disabled={busy} data-testid="group-mode" onChange={(e) => {
          const mode = e.target.value as GroupMode;
          set({ mode, diloco: mode === 'diloco' ? draft.diloco : undefined }); // DiLoCo's fields belong to its mode only
        }}>
          {Object.entries(GROUP_MODES).map(([k, m]) => <option key={k} value={k}>{m.label}</option>)}
        </select>
        <small className="muted" data-testid="group-scheme-fields">scheme: {groupSchemeFields(draft, Math.max(world, 1))}</small>
      </label>
      <label className="field">
        <span>model</span>
        <select value={draft.preset} disabled={busy} data-testid="group-preset" onChange={(e) => set({ preset: e.target.value as GroupState['draft']['preset'] })}>
          {GROUP_PRESETS.map((p) => <option key={p} value={p}>{draft.model ? `custom (${p}'s recipe)` : p}</option>)}
        </select>
      </label>
      <label className="field">
        <span>custom model</span>
        <input type="checkbox" data-testid="group-custom-model" checked={draft.model !== undefined} disabled={busy} onChange={(e) => {
          setCustomError(null);
          set({ model: e.target.checked ? PRESETS[draft.preset] : undefined });
        }} />
      </label>
      {draft.model && <CustomModel busy={busy} onProblem={setCustomError} problem={customError} />}
      {(['steps', 'batch', 'seq', 'seed'] as const).map((k) => (
        <NumberField key={k} label={FIELD_LABELS[k]} value={draft[k]} min={k === 'seed' ? 0 : 1} integer disabled={busy} testId={`group-${k}`}
          onChange={(v) => v !== undefined && set({ [k]: v })} />
      ))}
      {draft.mode === 'diloco' && <DilocoFields busy={busy} />}
      <div className="buttons">
        {busy ? (
          <button type="button" data-testid="group-stop" disabled={run.status === 'stopping'} onClick={() => controller.stop()}>
            {run.status === 'stopping' ? 'Stopping…' : 'Stop (whole group)'}
          </button>
        ) : (
          <button type="button" className="primary" data-testid="group-start" disabled={problem !== null || noGpu} onClick={() => controller.start()}>
            Start on {world} member{world === 1 ? '' : 's'}
          </button>
        )}
      </div>
      {!busy && problem && <p className="form-problem" data-testid="group-config-problem">{problem}</p>}
      {!busy && noGpu && <p className="form-problem">This page has no WebGPU: it can stay in the group but not train.</p>}
    </div>
  );
}

/** The custom model's config.json (Hugging Face keys); the draft takes it only when it is valid, Start waits otherwise. */
function CustomModel({ busy, problem, onProblem }: { busy: boolean; problem: string | null; onProblem(p: string | null): void }) {
  const { store } = pageGroupLab();
  const model = useGroup((s) => s.draft.model);
  const preset = useGroup((s) => s.draft.preset);
  const [text, setText] = useState(() => JSON.stringify(model, null, 2));
  // A model set from elsewhere (a run another member started) replaces the text; one typed here does not.
  const typed = useRef(model);
  useEffect(() => {
    if (model === typed.current) return;
    typed.current = model;
    setText(JSON.stringify(model, null, 2));
    onProblem(null);
  }, [model, onProblem]);
  const edit = (t: string) => {
    setText(t);
    const r = modelFromText(t, PRESETS[preset]);
    if ('error' in r) return onProblem(`custom model: ${r.error}`);
    onProblem(null);
    typed.current = r.model;
    store.getState().setDraft({ model: r.model });
  };
  return (
    <label className="field custom-config">
      <span>model config (config.json keys)</span>
      <textarea data-testid="group-custom-model-json" rows={7} spellCheck={false} value={text} disabled={busy} onChange={(e) => edit(e.target.value)}
        aria-invalid={problem !== null} />
    </label>
  );
}

const DILOCO_LABELS = { innerSteps: 'inner steps H', fragments: 'fragments (streaming > 1)', outerLr: 'outer lr', outerMomentum: 'outer momentum' } as const;

/** DiLoCo's fields: H, the pseudo-gradients' wire format, streaming fragments, the outer optimizer. */
function DilocoFields({ busy }: { busy: boolean }) {
  const { store } = pageGroupLab();
  const draft = useGroup((s) => s.draft);
  const d = { ...DEFAULT_DILOCO, ...dilocoOf(draft) };
  const set = (patch: Partial<typeof d>) => store.getState().setDraft({ diloco: { ...d, ...patch } });
  return (
    <>
      <label className="field">
        <span>pseudo-gradient wire</span>
        <select value={d.wire} disabled={busy} data-testid="group-diloco-wire" onChange={(e) => set({ wire: e.target.value as typeof d.wire })}>
          {(['int8', 'int4', 'fp32'] as const).map((w) => <option key={w} value={w}>{w}</option>)}
        </select>
      </label>
      {(['innerSteps', 'fragments', 'outerLr', 'outerMomentum'] as const).map((k) => (
        <NumberField key={k} label={DILOCO_LABELS[k]} value={d[k]} min={k === 'outerMomentum' ? 0 : k === 'outerLr' ? 0.001 : 1}
          integer={k === 'innerSteps' || k === 'fragments'} disabled={busy} testId={`group-diloco-${k}`}
          onChange={(v) => v !== undefined && set({ [k]: v })} />
      ))}
    </>
  );
}

/** The run's end checkpoint (one zip of its Hugging Face folder, as a lab run exports it), once this page holds one. */
function CheckpointButton({ run }: { run: GroupRun }) {
  const { controller } = pageGroupLab();
  const save = () => {
    const files = controller.checkpoint(run.id);
    if (files) downloadCheckpoint(`group-${fileSlug(run.label)}`, files);
  };
  return (
    <button type="button" className="small" data-testid="group-export-checkpoint" disabled={run.checkpointStep === null} onClick={save}
      title={run.checkpointStep === null ? 'the checkpoint is kept when the run ends' : `a zip of the Hugging Face folder (model.safetensors, config.json, tokenizer) after step ${run.checkpointStep}`}>
      Checkpoint
    </button>
  );
}

/** The status of this page's latest run: phase, numbers, weights hash, errors. */
function RunStatus({ run }: { run: GroupRun }) {
  const last = run.points.at(-1);
  const lastHash = run.points.findLast((p) => p.hash !== null)?.hash ?? null;
  // Every step as [step, members, loss, exchange bytes, fp32 bytes], for tests and scripts reading the page.
  const steps = run.points.map((p) => [p.step, p.world, p.loss, p.wireBytes, p.fp32WireBytes]);
  return (
    <div className="group-run" data-testid="group-run" data-run-id={run.id} data-status={run.status} data-mode={run.config.mode}
      data-points={run.points.length} data-world={last?.world ?? ''} data-hash={lastHash === null ? '' : hashHex(lastHash)}
      data-hashes={hashTrail(run.points)} data-steps={JSON.stringify(steps)} data-caught-up={run.caughtUpAt ?? ''}>
      <h3>
        {run.label} <span className={`badge badge-${run.status}`} data-testid="group-run-status">{run.status}</span>{' '}
        <button type="button" className="small" data-testid="group-export-json" onClick={() => download(`group-${fileSlug(run.label)}.json`, groupRunJson(run), 'application/json')}>JSON</button>{' '}
        <button type="button" className="small" data-testid="group-export-csv" onClick={() => download(`group-${fileSlug(run.label)}.csv`, groupRunCsv(run), 'text/csv')}>CSV</button>{' '}
        <CheckpointButton run={run} />
      </h3>
      <p className="muted small" data-testid="group-run-phase">{run.phase}{run.joinedLate && ' · joined late'}{run.caughtUpAt !== null && ` · caught up at step ${run.caughtUpAt}`}</p>
      {run.error && (
        <div className="error" role="alert" data-testid="group-run-error"><b>{run.error.title}:</b> {run.error.message}</div>
      )}
      {last && (
        <p className="small">
          step <b data-testid="group-step">{last.step + 1}</b> / {run.config.steps} · loss <b data-testid="group-loss">{last.loss === null ? '–' : last.loss.toFixed(4)}</b> · {last.world} member{last.world === 1 ? '' : 's'} · {last.stepMs.toFixed(0)} ms
          {lastHash !== null && <> · weights crc32 <code data-testid="group-hash">{hashHex(lastHash)}</code></>}
        </p>
      )}
    </div>
  );
}

/**
 * A passphrase refusal that a later join superseded (a peer retrying gets a new id, so the match is
 * by time): shown as settled, naming the peer where it is the one now admitted; null while it stands.
 */
function settledBy(n: GroupNotice, notices: readonly GroupNotice[], admitted: readonly string[]): string | null {
  const m = n.level === 'error' ? /wrong passphrase: peer (\S+)/.exec(n.text) : null;
  if (!m) return null;
  if (admitted.includes(m[1])) return `${shortPeer(m[1])} and this page have matched since`;
  return notices.some((x) => x.level === 'info' && x.at >= n.at && x.id > n.id && /joined the group/.test(x.text)) ? 'a peer has joined since with the right passphrase' : null;
}

function Notices() {
  const notices = useGroup((s) => s.notices);
  const rejected = useGroup((s) => s.rejected);
  const roster = useGroup((s) => s.roster);
  const admitted = roster.filter((e) => e.state === 'admitted').map((e) => e.id);
  if (notices.length === 0 && rejected === 0) return null;
  return (
    <div className="group-notices" data-testid="group-notices" data-rejected={rejected}>
      <ul>
        {notices.slice(-8).reverse().map((n) => {
          const fixed = settledBy(n, notices, admitted);
          return (
            <li key={n.id} className={fixed ? 'muted' : `notice-${n.level}`} data-testid="group-notice" data-level={fixed ? 'resolved' : n.level}>
              <span className="muted small">{new Date(n.at).toLocaleTimeString()}</span> {n.text}
              {fixed && ` — resolved: ${fixed}`}
            </li>
          );
        })}
      </ul>
      {rejected > 0 && <p className="muted small">{rejected} malformed or unexpected message(s) rejected</p>}
    </div>
  );
}

function Joined() {
  const { controller } = pageGroupLab();
  const room = useGroup((s) => s.room)!;
  const runs = useGroup((s) => s.runs);
  const run = activeRun({ runs });
  const latest = runs.at(-1) ?? null;
  return (
    <>
      <div className="group-row">
        <span>
          {room.role === 'host' ? 'You created this group' : 'You are in this group'}
          {room.hasPassphrase && ' (passphrase protected)'} as <code data-testid="group-self">{room.selfId}</code>.
        </span>
        <button type="button" data-testid="group-leave" onClick={() => controller.leave()}>Leave</button>
      </div>
      <CopyLink link={room.link} />
      {/* After a run the roster keeps its last steps and weights hashes. */}
      <GroupRoster run={run ?? latest} />
      <RunForm run={run} />
      {latest && <RunStatus run={latest} />}
      <Notices />
      <GroupCharts runs={runs} />
    </>
  );
}

export function GroupPanel() {
  const phase = useGroup((s) => s.phase);
  return (
    <section className="group-panel" data-testid="group-panel" data-phase={phase}>
      <h2>Peer group</h2>
      <p className="muted small">
        Train one model across tabs and machines over WebRTC: data parallel (gradients averaged every step, in fp32 or with AGoQ&apos;s
        8-bit all-reduce) or tensor parallel (heads and MLP units split across members, layer exchanges in fp32 or TACO&apos;s FP8).
        Every member trains on its own GPU; this page trains on its main thread.
      </p>
      {phase === 'joined' ? <Joined /> : <Lobby />}
    </section>
  );
}
