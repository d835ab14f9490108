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

/** A checkpoint's Hugging Face files (model.safetensors, config.json; those present) as downloads named after the run. */
export function downloadCheckpoint(slug: string, files: Partial<Record<'model.safetensors' | 'config.json', Uint8Array | string>>): void {
  for (const name of ['model.safetensors', 'config.json'] as const) {
    const f = files[name];
    if (f !== undefined) download(`${slug}-${name}`, f, name.endsWith('.json') ? 'application/json' : 'application/octet-stream');
  }
}
