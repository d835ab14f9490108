import { useState } from 'react';
import { useStore } from 'zustand';
import type { DataController } from '../state/data-prep';
import { DATA_EXTENSIONS } from '../engine/train/data/datasets';
import { BUNDLED_DATASET } from '../worker/protocol';
import { useLabApi } from './context';
import { FilePicker } from './FilePicker';
import { formatBytes, formatCount } from './format';
import { ImportGeneratePanel } from './GeneratePanel';
import { HubImport } from './HubImport';

const ACCEPT = [...DATA_EXTENSIONS, '.safetensors', '.zip'].join(',');

/** Every file of a drop, folders walked (a dropped folder arrives as one entry). */
async function droppedFiles(dt: DataTransfer): Promise<File[]> {
  const entries = [...dt.items].map((i) => i.webkitGetAsEntry?.()).filter((e): e is FileSystemEntry => !!e);
  if (!entries.some((e) => e.isDirectory)) return [...dt.files];
  const out: File[] = [];
  const walk = async (e: FileSystemEntry): Promise<void> => {
    if (e.isFile) out.push(await new Promise<File>((res, rej) => (e as FileSystemFileEntry).file(res, rej)));
    else if (e.isDirectory) {
      const reader = (e as FileSystemDirectoryEntry).createReader();
      for (;;) {
        const batch = await new Promise<FileSystemEntry[]>((res, rej) => reader.readEntries(res, rej));
        if (batch.length === 0) break;
        for (const c of batch) await walk(c);
      }
    }
  };
  for (const e of entries) await walk(e);
  return out;
}

function useData(data: DataController) {
  return useStore(data.state);
}

/** The run's data (files, a folder, or a checkpoint to start from) and its tokenizer, prepared in the data worker. */
export function DataPanel() {
  const { data } = useLabApi();
  const s = useData(data);
  const [dragging, setDragging] = useState(false);
  const [vocab, setVocab] = useState(s.tokenizer.kind === 'bpe' ? s.tokenizer.vocabSize : 512);
  const busy = s.job !== null;
  const drop = (files: File[]) => void data.drop(files);
  const p = s.prepared;
  const tokKind = s.tokenizer.kind;

  return (
    <div
      className={`field dataset${dragging ? ' dragging' : ''}`}
      data-testid="dataset"
      data-settled={s.settled}
      onDragOver={(e) => { e.preventDefault(); setDragging(true); }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => { e.preventDefault(); setDragging(false); void droppedFiles(e.dataTransfer).then(drop); }}
    >
      <span>Data</span>
      <span className="dataset-row">
        <b data-testid="dataset-name">
          {s.files.length === 0 ? `${BUNDLED_DATASET} (bundled)` : s.files.map((f) => f.name).join(', ')}
        </b>
        <FilePicker testId="dataset-file" className="small" multiple accept={ACCEPT} disabled={busy} onFiles={drop}
          title="text, .jsonl, .json or .parquet data; or a model to start from (an exported .zip, or config.json + .safetensors + tokenizer.json)">
          pick / drop files
        </FilePicker>
        <FilePicker testId="dataset-folder" className="small" folder disabled={busy} onFiles={drop}>folder</FilePicker>
        {s.files.length > 0 && (
          <button type="button" className="small" disabled={busy} onClick={() => void data.useBundled()}>use bundled</button>
        )}
      </span>
      <HubImport disabled={busy} />
      {s.infos.some((i) => i.fields.length > 0) && (
        <label className="dataset-row small">
          text field
          <select data-testid="text-field" value={s.field} disabled={busy} onChange={(e) => void data.setField(e.target.value)}>
            {[...new Set([s.field, ...s.infos.flatMap((i) => i.fields)])].map((f) => <option key={f} value={f}>{f}</option>)}
          </select>
        </label>
      )}
      <span className="dataset-row small">
        <label>
          tokenizer{' '}
          <select data-testid="tokenizer" value={tokKind} disabled={busy || s.imported !== null}
            onChange={(e) => void data.setTokenizer(e.target.value === 'bpe' ? { kind: 'bpe', vocabSize: vocab } : { kind: 'char' })}>
            <option value="char">characters</option>
            <option value="bpe">byte-level BPE</option>
            {tokKind === 'file' && <option value="file">{s.tokenizer.kind === 'file' ? s.tokenizer.name : 'file'}</option>}
          </select>
        </label>
        <label>
          BPE vocabulary{' '}
          <input type="number" data-testid="bpe-vocab" min={257} max={65535} step={1} value={vocab} disabled={busy || s.imported !== null}
            onChange={(e) => setVocab(Number(e.target.value))} />
        </label>
        <button type="button" className="small" data-testid="bpe-train" disabled={busy || s.imported !== null || !(vocab >= 257 && vocab < 65536)}
          onClick={() => void data.setTokenizer({ kind: 'bpe', vocabSize: vocab })}>
          train BPE
        </button>
        <FilePicker testId="tokenizer-file" className="small" accept=".json" disabled={busy || s.imported !== null} onFiles={(f) => { if (f[0]) void data.tokenizerFile(f[0]); }}>
          tokenizer.json
        </FilePicker>
      </span>
      {s.imported && (
        <span className="dataset-row small" data-testid="imported-model">
          starts from the imported checkpoint ({s.imported.name}: {formatCount(s.imported.model.params)} params, vocabulary {s.imported.model.config.vocab_size})
          <button type="button" className="small" disabled={busy} onClick={() => void data.forgetImport()}>forget</button>
        </span>
      )}
      {s.imported && !busy && <ImportGeneratePanel name={s.imported.name} />}
      {s.job && (
        <span className="dataset-row small" data-testid="data-job">
          {/* First in the row: after the phase and percent it moved with every progress update, hard to click (and Playwright's click waited for it to hold still). */}
          <button type="button" className="small" data-testid="data-cancel" onClick={() => data.cancel()}>cancel</button>
          <progress max={s.job.total || 1} value={s.job.done} aria-label={s.job.phase} />
          {s.job.phase} {s.job.total > 0 && `${Math.round((100 * s.job.done) / s.job.total)}%`}
        </span>
      )}
      {p && !s.job && (
        <span className="small muted" data-testid="dataset-summary" data-tokens={p.stats.tokens.train + p.stats.tokens.val} data-vocab={p.tokenizer.vocabSize} data-cached={String(p.cached)}>
          {formatCount(p.stats.tokens.train + p.stats.tokens.val)} tokens of {formatBytes(p.stats.bytes.train + p.stats.bytes.val)}
          {' '}({p.stats.documents.train + p.stats.documents.val} documents, {formatCount(p.stats.tokens.val)} tokens validate)
          {' '}· {p.tokenizer.kind === 'char' ? 'characters' : p.tokenizer.source}, vocabulary {p.tokenizer.vocabSize}
          {p.cached ? ' · from the token cache' : ''}
        </span>
      )}
      {s.error && <span className="form-problem" data-testid="dataset-problem">{s.error}</span>}
    </div>
  );
}
