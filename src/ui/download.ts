import { checkpointArchive, type HfExportFiles } from '../worker/checkpoint-archive';

/** Offers bytes or text as a file download (an object URL on a temporary link). */
export function download(name: string, data: Uint8Array | string, type: string): void {
  const part: BlobPart = typeof data === 'string' ? data : new Uint8Array(data);
  const url = URL.createObjectURL(new Blob([part], { type }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function fileSlug(s: string): string {
  return s.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase().slice(0, 60) || 'run';
}

/**
 * A checkpoint as one zip named after the run, holding the folder `<slug>/` with its Hugging Face
 * files under their own names (model.safetensors, config.json, tokenizer files): unzipped it loads
 * with from_pretrained, and dropped back on the data panel it is a model to start from.
 */
export function downloadCheckpoint(slug: string, files: HfExportFiles): void {
  download(`${slug}.zip`, checkpointArchive(slug, files), 'application/zip');
}
