/**
 * The data-parallel driver's own messages (src/parallel/dp/dp.ts), and their validation. Each one starts
 * with an 8-byte header: magic 'WDP1' (u32 LE), kind u8, version u8, reserved u16 = 0. Integers are
 * little-endian; peer ids are UTF-8, at most MAX_ID_BYTES each.
 *
 *  control (one frame of the run's control channel, outside any group):
 *   HELLO      fingerprint u32                           a peer asks to join
 *   WELCOME    fingerprint u32, epoch u32, members, key  every member of the admitting group admits it
 *   CLAIM      fingerprint u32, epoch u32, members, key  a member's answer to HELLO: the group it is in
 *   REFUSE     reason                                    its configuration differs
 *   BYE        reason                                    a member leaves the group
 *   HEARTBEAT  —                                         liveness while collectives wait
 *   TUNE       part u8, parts u8, adapter, then per      one part of a member's kernel tuning table,
 *              family: name, codeHash, u8 n, n entries   sent to the group's members on the same adapter
 *              (key, ms f32, u8 k, k picks); texts u16-prefixed; entries' contents judged by the
 *              receiver (engine/tune/shared.ts), the bounds per peer in tune-share.ts
 *  (key: the sender's Ed25519 public key 32 B ‖ signature 64 B over statementContext('welcome' or
 *  'claim', fingerprint, epoch, members) — agreement.ts; a joiner counts only signed ones.)
 *  in a group (the payloads of collectives):
 *   STATUS     fingerprint, epoch, step, weightsHash u32, flags u8 (1 = established), members,
 *              state digest (32 B: SHA-256 of the SHA-256s of step u32, weights, m, v; dp-sync.ts);
 *              sent signed and echoed (agreement.ts: body ‖ key ‖ signature, then an echo round)
 *   REPORT     step u32, flags u8 (1 = hashed), weightsHash u32, loss f32, joiners, accused
 *              sent signed and echoed too (agreement.ts, domain 'report')
 *   STATE      step u32, n u32, crc u32 of the 12n array bytes, then weights, m, v (n floats each)
 *
 * Every decoder throws DpMessageError with the reason on any defect; nothing it returns is unchecked.
 */
import { crc32, crc32Update } from '../../peers/collectives/crc32';
import { floatsHash } from '../../engine/kernels/hash/hash.ref';
import type { PeerId } from '../../peers/transport/transport';
import type { LossScaleCheckpoint } from '../../engine/train/trainer';

export const DP_MAGIC = 0x31504457; // 'W','D','P','1'
// 2: signed, echoed STATUS (agreement.ts), signed WELCOME, CLAIM; 3: signed, echoed REPORT. Other versions' messages are refused.
export const DP_VERSION = 3;
export const DP_HEADER_BYTES = 8;
export const MAX_ID_BYTES = 128;
const MAX_MEMBERS = 8;
const MAX_REASON_BYTES = 1000;

export enum DpKind {
  Hello = 1,
  Welcome = 2,
  Refuse = 3,
  Bye = 4,
  Heartbeat = 5,
  Status = 6,
  Report = 7,
  State = 8,
  Claim = 9,
  TuneShare = 10,
}

export class DpMessageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DpMessageError';
  }
}

// Float32Array ↔ bytes without per-element DataView calls (the state can be hundreds of MB).
if (new Uint8Array(Uint16Array.of(1).buffer)[0] !== 1) throw new Error('src/peers/dp-wire: a little-endian host is required');

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder('utf-8', { fatal: true });

/** Appends little-endian fields to a growing buffer. */
class Writer {
  private parts: Uint8Array[] = [];
  private len = 0;

  constructor(kind: DpKind) {
    this.u32(DP_MAGIC).u8(kind).u8(DP_VERSION).u16(0);
  }
  private push(b: Uint8Array): this {
    this.parts.push(b);
    this.len += b.length;
    return this;
  }
  private num(bytes: number, set: (dv: DataView) => void): this {
    const b = new Uint8Array(bytes);
    set(new DataView(b.buffer));
    return this.push(b);
  }
  u8(v: number): this {
    return this.num(1, (dv) => dv.setUint8(0, v));
  }
  u16(v: number): this {
    return this.num(2, (dv) => dv.setUint16(0, v, true));
  }
  u32(v: number): this {
    return this.num(4, (dv) => dv.setUint32(0, v >>> 0, true));
  }
  f32(v: number): this {
    return this.num(4, (dv) => dv.setFloat32(0, v, true));
  }
  text(s: string, maxBytes: number): this {
    const b = utf8.encode(s);
    if (b.length > maxBytes) throw new Error(`dp message: text of ${b.length} B exceeds ${maxBytes} B`);
    return this.u16(b.length).push(b);
  }
  ids(ids: readonly PeerId[]): this {
    if (ids.length > MAX_MEMBERS) throw new Error(`dp message: ${ids.length} peer ids, at most ${MAX_MEMBERS}`);
    this.u8(ids.length);
    for (const id of ids) this.text(id, MAX_ID_BYTES);
    return this;
  }
  raw(b: Uint8Array): this {
    return this.push(b.slice());
  }
  floats(x: Float32Array): this {
    return this.push(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
  }
  finish(): Uint8Array {
    const out = new Uint8Array(this.len);
    let o = 0;
    for (const p of this.parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }
}

/** Reads fields in order; any overrun or malformed field is a DpMessageError. */
class Reader {
  private off = DP_HEADER_BYTES;
  private readonly dv: DataView;

  constructor(
    private readonly bytes: Uint8Array,
    readonly kind: DpKind,
  ) {
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private take(n: number, what: string): number {
    if (this.off + n > this.bytes.length) throw new DpMessageError(`${DpKind[this.kind]}: truncated at ${what}`);
    const at = this.off;
    this.off += n;
    return at;
  }
  u8(what: string): number {
    return this.dv.getUint8(this.take(1, what));
  }
  u16(what: string): number {
    return this.dv.getUint16(this.take(2, what), true);
  }
  u32(what: string): number {
    return this.dv.getUint32(this.take(4, what), true);
  }
  f32(what: string): number {
    return this.dv.getFloat32(this.take(4, what), true);
  }
  text(what: string, maxBytes: number): string {
    const n = this.u16(what);
    if (n > maxBytes) throw new DpMessageError(`${DpKind[this.kind]}: ${what} of ${n} B exceeds ${maxBytes} B`);
    const at = this.take(n, what);
    try {
      return fromUtf8.decode(this.bytes.subarray(at, at + n));
    } catch {
      throw new DpMessageError(`${DpKind[this.kind]}: ${what} is not UTF-8`);
    }
  }
  ids(what: string): PeerId[] {
    const n = this.u8(`${what} count`);
    if (n > MAX_MEMBERS) throw new DpMessageError(`${DpKind[this.kind]}: ${n} ${what}, at most ${MAX_MEMBERS}`);
    const out: PeerId[] = [];
    for (let i = 0; i < n; i++) {
      const id = this.text(what, MAX_ID_BYTES);
      if (id.length === 0) throw new DpMessageError(`${DpKind[this.kind]}: empty peer id in ${what}`);
      if (out.includes(id)) throw new DpMessageError(`${DpKind[this.kind]}: ${what} lists ${id} twice`);
      out.push(id);
    }
    return out;
  }
  raw(n: number, what: string): Uint8Array {
    const at = this.take(n, what);
    return this.bytes.subarray(at, at + n).slice();
  }
  /** The rest of the message (for the state's arrays). */
  rest(): Uint8Array {
    return this.bytes.subarray(this.take(this.bytes.length - this.off, 'rest'));
  }
  end(): void {
    if (this.off !== this.bytes.length) throw new DpMessageError(`${DpKind[this.kind]}: ${this.bytes.length - this.off} trailing bytes`);
  }
}

/** The kind of a DP message, after checking its header. */
export function dpKind(bytes: Uint8Array): DpKind {
  if (!(bytes instanceof Uint8Array) || bytes.length < DP_HEADER_BYTES) throw new DpMessageError(`short message (${bytes?.length ?? 0} B)`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dv.getUint32(0, true) !== DP_MAGIC) throw new DpMessageError('not a data-parallel message (bad magic)');
  const kind = dv.getUint8(4);
  if (!(kind in DpKind) || typeof DpKind[kind] !== 'string') throw new DpMessageError(`unknown message kind ${kind}`);
  const version = dv.getUint8(5);
  if (version !== DP_VERSION) throw new DpMessageError(`unsupported version ${version} (this peer speaks ${DP_VERSION})`);
  if (dv.getUint16(6, true) !== 0) throw new DpMessageError('nonzero reserved bits');
  return kind as DpKind;
}

function reader(bytes: Uint8Array, want: DpKind): Reader {
  const kind = dpKind(bytes);
  if (kind !== want) throw new DpMessageError(`${DpKind[kind]} where ${DpKind[want]} was expected`);
  return new Reader(bytes, kind);
}

// ---- control ----

/** A signed membership statement of the control channel (agreement.ts's statementContext covers it). */
export interface SignedMembers {
  fingerprint: number;
  epoch: number;
  members: PeerId[];
  publicKey: Uint8Array;
  signature: Uint8Array;
}

/** One part of a member's tuning table (TUNE): `part` of `parts`, each family's entries in it. */
export interface TuneSharePart {
  part: number;
  parts: number;
  adapter: string;
  families: { family: string; codeHash: string; entries: { key: string; ms: number; picks: string[] }[] }[];
}

/** Most parts of one member's table (with control messages of 4 KiB: 64 KiB per peer). */
export const MAX_TUNE_PARTS = 16;
const MAX_TUNE_FAMILIES = 8;
const MAX_TUNE_ENTRIES = 255;
const MAX_TUNE_PICKS = 8;
const TUNE_TEXT = { adapter: 64, family: 32, codeHash: 64, key: 64, pick: 64 };

export type ControlMessage =
  | { kind: DpKind.Hello; fingerprint: number }
  | ({ kind: DpKind.TuneShare } & TuneSharePart)
  | ({ kind: DpKind.Welcome | DpKind.Claim } & SignedMembers)
  | { kind: DpKind.Refuse; reason: string }
  | { kind: DpKind.Bye; reason: string }
  | { kind: DpKind.Heartbeat };

export function encodeControl(m: ControlMessage): Uint8Array {
  const w = new Writer(m.kind);
  switch (m.kind) {
    case DpKind.Hello:
      return w.u32(m.fingerprint).finish();
    case DpKind.Welcome:
    case DpKind.Claim:
      if (m.publicKey.length !== 32 || m.signature.length !== 64) throw new Error('dp message: a key of 32 B and a signature of 64 B');
      return w.u32(m.fingerprint).u32(m.epoch).ids(m.members).raw(m.publicKey).raw(m.signature).finish();
    case DpKind.Refuse:
    case DpKind.Bye:
      return w.text(m.reason.slice(0, MAX_REASON_BYTES / 4), MAX_REASON_BYTES).finish();
    case DpKind.Heartbeat:
      return w.finish();
    case DpKind.TuneShare: {
      w.u8(m.part).u8(m.parts).text(m.adapter, TUNE_TEXT.adapter).u8(m.families.length);
      for (const f of m.families) {
        w.text(f.family, TUNE_TEXT.family).text(f.codeHash, TUNE_TEXT.codeHash).u8(f.entries.length);
        for (const e of f.entries) {
          w.text(e.key, TUNE_TEXT.key).f32(e.ms).u8(e.picks.length);
          for (const p of e.picks) w.text(p, TUNE_TEXT.pick);
        }
      }
      return w.finish();
    }
  }
}

function decodeTuneShare(r: Reader): TuneSharePart {
  const part = r.u8('part');
  const parts = r.u8('parts');
  if (parts < 1 || parts > MAX_TUNE_PARTS || part >= parts) throw new DpMessageError(`TuneShare: part ${part} of ${parts} (at most ${MAX_TUNE_PARTS} parts)`);
  const adapter = r.text('adapter', TUNE_TEXT.adapter);
  const nf = r.u8('family count');
  if (nf > MAX_TUNE_FAMILIES) throw new DpMessageError(`TuneShare: ${nf} families, at most ${MAX_TUNE_FAMILIES}`);
  const families: TuneSharePart['families'] = [];
  for (let i = 0; i < nf; i++) {
    const family = r.text('family', TUNE_TEXT.family);
    const codeHash = r.text('code hash', TUNE_TEXT.codeHash);
    const n = r.u8('entry count');
    if (n > MAX_TUNE_ENTRIES) throw new DpMessageError(`TuneShare: ${n} entries, at most ${MAX_TUNE_ENTRIES}`);
    const entries: TuneSharePart['families'][number]['entries'] = [];
    for (let j = 0; j < n; j++) {
      const key = r.text('key', TUNE_TEXT.key);
      const ms = r.f32('ms');
      const k = r.u8('pick count');
      if (k > MAX_TUNE_PICKS) throw new DpMessageError(`TuneShare: ${k} picks, at most ${MAX_TUNE_PICKS}`);
      const picks: string[] = [];
      for (let q = 0; q < k; q++) picks.push(r.text('pick', TUNE_TEXT.pick));
      entries.push({ key, ms, picks });
    }
    families.push({ family, codeHash, entries });
  }
  return { part, parts, adapter, families };
}

export function decodeControl(bytes: Uint8Array): ControlMessage {
  const kind = dpKind(bytes);
  const r = new Reader(bytes, kind);
  let m: ControlMessage;
  switch (kind) {
    case DpKind.Hello:
      m = { kind, fingerprint: r.u32('fingerprint') };
      break;
    case DpKind.Welcome:
    case DpKind.Claim: {
      const fingerprint = r.u32('fingerprint');
      const epoch = r.u32('epoch');
      if (epoch < 1 || epoch > MAX_EPOCH) throw new DpMessageError(`${DpKind[kind]}: epoch ${epoch} outside [1, ${MAX_EPOCH}]`);
      const members = r.ids('members');
      if (members.length === 0) throw new DpMessageError(`${DpKind[kind]}: no members`);
      m = { kind, fingerprint, epoch, members, publicKey: r.raw(32, 'public key'), signature: r.raw(64, 'signature') };
      break;
    }
    case DpKind.Refuse:
    case DpKind.Bye:
      m = { kind, reason: r.text('reason', MAX_REASON_BYTES) };
      break;
    case DpKind.Heartbeat:
      m = { kind };
      break;
    case DpKind.TuneShare:
      m = { kind, ...decodeTuneShare(r) };
      break;
    default:
      throw new DpMessageError(`${DpKind[kind]} is not a control message`);
  }
  r.end();
  return m;
}

/** Epochs number a run's successive groups in 16 bits of the frame run id (0 is the control channel). */
export const MAX_EPOCH = 0xffff;

// ---- group status (the first collective of every new group) ----

export interface GroupStatus {
  fingerprint: number;
  epoch: number;
  /** The group's members as this peer sees them (sorted). */
  members: PeerId[];
  step: number;
  weightsHash: number;
  /** Has trained in a group of this run (its state is the group's), as opposed to a fresh or joining peer. */
  established: boolean;
  /** What the member vouches for: SHA-256 over its whole training state (stateDigest). */
  stateDigest: Uint8Array;
}

export function encodeStatus(s: GroupStatus): Uint8Array {
  if (s.stateDigest.length !== 32) throw new Error(`encodeStatus: a state digest of ${s.stateDigest.length} B`);
  return new Writer(DpKind.Status).u32(s.fingerprint).u32(s.epoch).u32(s.step).u32(s.weightsHash).u8(s.established ? 1 : 0).ids(s.members).raw(s.stateDigest).finish();
}

export function decodeStatus(bytes: Uint8Array): GroupStatus {
  const r = reader(bytes, DpKind.Status);
  const s = { fingerprint: r.u32('fingerprint'), epoch: r.u32('epoch'), step: r.u32('step'), weightsHash: r.u32('weightsHash') };
  const flags = r.u8('flags');
  if (flags > 1) throw new DpMessageError(`Status: unknown flags ${flags}`);
  const members = r.ids('members');
  const stateDigest = r.raw(32, 'state digest');
  r.end();
  return { ...s, members, established: flags === 1, stateDigest };
}

// ---- end-of-step report ----

export interface StepReport {
  /** Steps taken after this one (the trainer's step index). */
  step: number;
  /** weightsHash of the weights after the step, when this step is a hash step. */
  weightsHash: number | null;
  /** This peer's loss on its shard (mean over its micro-batches). */
  loss: number;
  /** Peers that asked to join and that this peer can reach. */
  joiners: PeerId[];
  /** Members this peer saw abuse from since its last report: over its mailbox bound (a flood) or withholding. */
  accused: PeerId[];
}

export function encodeReport(r: StepReport): Uint8Array {
  return new Writer(DpKind.Report).u32(r.step).u8(r.weightsHash === null ? 0 : 1).u32(r.weightsHash ?? 0).f32(r.loss).ids(r.joiners).ids(r.accused).finish();
}

export function decodeReport(bytes: Uint8Array): StepReport {
  const r = reader(bytes, DpKind.Report);
  const step = r.u32('step');
  const flags = r.u8('flags');
  if (flags > 1) throw new DpMessageError(`Report: unknown flags ${flags}`);
  const hash = r.u32('weightsHash');
  const loss = r.f32('loss');
  if (!Number.isFinite(loss)) throw new DpMessageError(`Report: loss ${loss}`);
  const joiners = r.ids('joiners');
  const accused = r.ids('accused');
  r.end();
  return { step, weightsHash: flags === 1 ? hash : null, loss, joiners, accused };
}

// ---- training state (model, optimizer, step) for late joiners and partial steps ----

export interface TrainingState {
  weights: Float32Array;
  m: Float32Array;
  v: Float32Array;
  step: number;
  /** The loss scaler's state, in runs with loss scaling (every member must seed backward with one scale). */
  lossScale?: LossScaleCheckpoint;
}

const STATE_FIXED = DP_HEADER_BYTES + 12;
/** The loss scaler's trailer: scale, growth and backoff factors (f64, exact), interval, tracker, skipped (u32). */
export const LOSS_SCALE_BYTES = 36;

/** A state message's size; `lossScaled`: the run scales its loss (its plan decides, alike on every member). */
export function stateBytes(n: number, lossScaled = false): number {
  return STATE_FIXED + 12 * n + (lossScaled ? LOSS_SCALE_BYTES : 0);
}

/** The loss scaler's state as bytes: the state message's trailer, and a part of the members' state digest. */
export function lossScaleBytes(s: LossScaleCheckpoint): Uint8Array {
  const b = new Uint8Array(LOSS_SCALE_BYTES);
  const dv = new DataView(b.buffer);
  dv.setFloat64(0, s.scale, true);
  dv.setFloat64(8, s.growthFactor, true);
  dv.setFloat64(16, s.backoffFactor, true);
  dv.setUint32(24, s.growthInterval >>> 0, true);
  dv.setUint32(28, s.growthTracker >>> 0, true);
  dv.setUint32(32, s.skipped >>> 0, true);
  return b;
}

function readLossScale(b: Uint8Array): LossScaleCheckpoint {
  const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const s = {
    scale: dv.getFloat64(0, true), growthFactor: dv.getFloat64(8, true), backoffFactor: dv.getFloat64(16, true),
    growthInterval: dv.getUint32(24, true), growthTracker: dv.getUint32(28, true), skipped: dv.getUint32(32, true),
  };
  // The trainer checks it against its plan (restoreTrainingState); here only what no plan could accept.
  if (!(Number.isFinite(s.scale) && s.scale > 0 && Number.isFinite(s.growthFactor) && Number.isFinite(s.backoffFactor))) {
    throw new DpMessageError(`State: invalid loss scaler state ${JSON.stringify(s)}`);
  }
  return s;
}

function floatBytes(x: Float32Array): Uint8Array {
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
}

/** The hash all peers compare after a step (engine/kernels/hash.ref.ts; Model.hashFlat computes it on the GPU). */
export function weightsHash(weights: Float32Array): number {
  return floatsHash(weights);
}

export function encodeState(s: TrainingState): Uint8Array {
  const n = s.weights.length;
  if (s.m.length !== n || s.v.length !== n) throw new Error(`encodeState: weights ${n}, m ${s.m.length}, v ${s.v.length} floats`);
  // The scaler's trailer follows the arrays, under the same checksum.
  const tail = s.lossScale ? lossScaleBytes(s.lossScale) : new Uint8Array(0);
  const crc = crc32Update([s.weights, s.m, s.v].reduce((c, a) => crc32Update(c, floatBytes(a)), 0), tail);
  return new Writer(DpKind.State).u32(s.step).u32(n).u32(crc).floats(s.weights).floats(s.m).floats(s.v).raw(tail).finish();
}

export interface StateExpectation {
  /** Floats per array (the model's flat layout). */
  n: number;
  /** The step and weights hash the sender announced in its status. */
  step: number;
  weightsHash: number;
  /** The run scales its loss: the state must carry the scaler's trailer (and a run without must not). */
  lossScaled?: boolean;
}

/**
 * Decodes and checks a received state before anything is applied: length, header, the array
 * checksum, the announced step and weights hash, finite values, and v ≥ 0 (Adam's second moment).
 */
export function decodeState(bytes: Uint8Array, want: StateExpectation): TrainingState {
  const r = reader(bytes, DpKind.State);
  const size = stateBytes(want.n, want.lossScaled);
  if (bytes.length !== size) throw new DpMessageError(`State: ${bytes.length} B, expected ${size} B for ${want.n} floats per array${want.lossScaled ? ' and the loss scaler' : ''}`);
  const step = r.u32('step');
  const n = r.u32('n');
  const crc = r.u32('crc');
  if (n !== want.n) throw new DpMessageError(`State: ${n} floats per array, the model has ${want.n}`);
  if (step !== want.step) throw new DpMessageError(`State: step ${step}, the sender announced ${want.step}`);
  const body = r.rest();
  if (crc32(body) !== crc) throw new DpMessageError('State: checksum mismatch (corrupted in transit or by the sender)');
  // Copy into aligned arrays (the body may sit at any byte offset of a reassembled message).
  const all = new Float32Array(3 * n);
  new Uint8Array(all.buffer).set(body.subarray(0, 12 * n));
  const lossScale = want.lossScaled ? readLossScale(body.subarray(12 * n)) : undefined;
  const weights = all.subarray(0, n);
  const m = all.subarray(n, 2 * n);
  const v = all.subarray(2 * n);
  if (weightsHash(weights) !== want.weightsHash) throw new DpMessageError('State: weights hash differs from the one announced');
  for (let i = 0; i < all.length; i++) {
    if (!Number.isFinite(all[i])) {
      const which = i < n ? 'weights' : i < 2 * n ? 'm' : 'v';
      throw new DpMessageError(`State: non-finite ${which}[${i % n}] = ${all[i]}`);
    }
  }
  for (let i = 0; i < n; i++) if (v[i] < 0) throw new DpMessageError(`State: negative second moment v[${i}] = ${v[i]}`);
  return { weights, m, v, step, ...(lossScale ? { lossScale } : {}) };
}

/** JSON with sorted object keys: the same options give the same bytes whatever their construction order. */
export function stableJson(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(stableJson).join(',')}]`;
  if (x && typeof x === 'object') {
    const o = x as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${stableJson(o[k])}`).join(',')}}`;
  }
  return JSON.stringify(x) ?? 'null';
}

export function fingerprintOf(x: unknown): number {
  return crc32(utf8.encode(stableJson(x)));
}
