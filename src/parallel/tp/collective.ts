/**
 * What a tensor-parallel rank needs of its group: its place in it and two collectives. The peer
 * group (src/peers) provides it over a transport; the engine only sees this interface.
 */
export interface TpCollective {
  readonly rank: number;
  readonly size: number;
  /** Member ids in rank order (this rank's is members[rank]). */
  readonly members: readonly string[];
  /** Transport bytes sent and received so far (a step's are the difference). */
  readonly stats: Readonly<{ bytesSent: number; bytesReceived: number }>;
  /** Tags the collectives that follow with `step`. */
  setStep(step: number): void;
  /** Sends parts[r] to rank r; returns what each rank sent this one. */
  allToAll(parts: Uint8Array[]): Promise<Uint8Array[]>;
  /** Every rank's `part`, in rank order. */
  allGather(part: Uint8Array): Promise<Uint8Array[]>;
  /** The error that fails a collective over a bad payload (from `peer`, when known). */
  invalidPayload(message: string, peer?: string): Error;
}
