/**
 * A run's checkpoint as one Hugging Face model folder in a zip (the page's export), and zips dropped
 * on the data panel unpacked into their files. The export holds what `from_pretrained` reads, under
 * the names it expects: model.safetensors, config.json and the tokenizer's files; the lab's own
 * training state (optimizer, lab.json) stays in the browser. Dropped back, it is a checkpoint to
 * start from, as any HF Llama folder is.
 */
import { strToU8, unzipSync, zipSync, type Zippable } from 'fflate';
import { loadCheckpoint, saveCheckpoint } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';

/**
 * The files of an HF export, in the order written; those a checkpoint lacks are left out. A LoRA
 * run's adds its adapter as PEFT's directory files (its model.safetensors is then the frozen base).
 */
export const HF_EXPORT_FILES = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'model.safetensors', 'adapter_config.json', 'adapter_model.safetensors'] as const;

export type HfExportFiles = Partial<Record<(typeof HF_EXPORT_FILES)[number], Uint8Array | string>>;

/** The zip of a checkpoint's HF files under `folder/` (weights stored, JSON deflated). */
export function checkpointArchive(folder: string, files: HfExportFiles): Uint8Array {
  const z: Zippable = {};
  for (const name of HF_EXPORT_FILES) {
    const f = files[name];
    if (f === undefined) continue;
    const bytes = typeof f === 'string' ? strToU8(f) : f;
    // Float weights barely compress, and deflating megabytes on the page's thread would stall it.
    z[`${folder}/${name}`] = [bytes, { level: name.endsWith('.json') ? 6 : 0 }];
  }
  if (!z[`${folder}/model.safetensors`] || !z[`${folder}/config.json`]) throw new Error('the checkpoint has no model.safetensors or config.json');
  return zipSync(z);
}

/**
 * A LoRA run's checkpoint as the full model with its adapters merged in (PEFT's merge_and_unload):
 * model.safetensors = W + (alpha/r)·B·A, the config and tokenizer files as they are, no adapter files.
 */
export function mergedExportFiles(files: HfExportFiles): HfExportFiles {
  const ck = loadCheckpoint(files as Record<string, Uint8Array | string>);
  if (!ck.adapters) throw new Error('the checkpoint has no LoRA adapters to merge');
  const params = mergeLora(ck.config, ck.adapters.spec, ck.params, ck.adapters.tensors);
  // The HF files only: the optimizer's moments and the adapter files belong to the adapters, not to this model.
  const out: HfExportFiles = {};
  for (const name of HF_EXPORT_FILES) if (files[name] !== undefined && !name.startsWith('adapter_')) out[name] = files[name];
  out['model.safetensors'] = saveCheckpoint({ config: ck.config, params })['model.safetensors'];
  return out;
}

export const isZip = (f: File): boolean => /\.zip$/i.test(f.name);

/**
 * The files of dropped zips as plain files named by their base names (a folder inside the zip is
 * the model's folder); other files pass through. Two files of one name are refused, naming it.
 */
export async function unpackZips(files: File[]): Promise<File[]> {
  if (!files.some(isZip)) return files;
  const out: File[] = [];
  for (const f of files) {
    if (!isZip(f)) {
      out.push(f);
      continue;
    }
    let entries: Record<string, Uint8Array>;
    try {
      entries = unzipSync(new Uint8Array(await f.arrayBuffer()), { filter: (e) => !e.name.endsWith('/') && !e.name.startsWith('__MACOSX/') });
    } catch (e) {
      throw new Error(`${f.name} is not a zip archive this page can read: ${(e as Error).message}`);
    }
    for (const [path, bytes] of Object.entries(entries)) {
      const name = path.slice(path.lastIndexOf('/') + 1);
      if (name.startsWith('.')) continue;
      out.push(new File([bytes as BlobPart], name, { type: name.endsWith('.json') ? 'application/json' : 'application/octet-stream' }));
    }
  }
  const seen = new Set<string>();
  for (const f of out) {
    if (seen.has(f.name)) throw new Error(`two files named ${f.name} in the drop: drop one model at a time`);
    seen.add(f.name);
  }
  return out;
}
