/** What the group controller (group-controller.ts) is given: a room's transport, how to open one, its GPU and text. */
import type { DataParallelOptions } from '../../parallel/dp/dp';
import type { IceConfig } from '../../peers/transport/ice';
import type { PeerProblem } from '../../peers/peerjs/peerjs';
import type { PeerServerAddress } from '../../peers/room/room';
import type { PeerRole, RosterEntry } from '../../peers/room/roster';
import type { Transport, Unsubscribe } from '../../peers/transport/transport';
import type { Runtime } from '../../engine/gpu/runtime';

/** What the controller needs of a room's transport (PeerJsTransport has it all). */
export interface RoomTransport extends Transport {
  roster(): RosterEntry[];
  onProblem(h: (p: PeerProblem) => void): Unsubscribe;
  whenAdmitted(timeoutMs?: number): Promise<void>;
  /** Asks the peers not to drop this member for up to `ms` of silence (PeerJsTransport.announceBusy). */
  announceBusy?(ms: number): void;
}

export interface OpenRoomOptions {
  room: string;
  passphrase?: string;
  server: PeerServerAddress;
  role: PeerRole;
  /** STUN/TURN servers and policy; absent: host candidates only. */
  ice?: IceConfig;
}

export interface GroupDeps {
  /** The page's URL (its ?room= and ?server=, and where links point). */
  pageUrl: string;
  openTransport(o: OpenRoomOptions): Promise<RoomTransport>;
  /** The GPU runtime; asked for once and kept, so a second run of the same shapes compiles nothing. */
  runtime(): Promise<Runtime>;
  /** The training text (the bundled corpus). */
  loadText(): Promise<string>;
  /**
   * Building a model blocks this thread for up to this long (Dawn in Node compiles pipelines
   * synchronously; a page compiles in its GPU process): the peers are told first, so they wait.
   */
  buildBlocksMs?: number;
  /** How long joining waits to be admitted (default 30 s). */
  admitTimeoutMs?: number;
  /** Roster refresh period (default 1 s). */
  rosterEveryMs?: number;
  /** Data-parallel driver timings (tests shorten them). */
  dp?: Pick<DataParallelOptions, 'silenceMs' | 'joinTimeoutMs' | 'collectiveTimeoutMs' | 'heartbeatMs'>;
  /** Longest wait of one tensor-parallel collective, the first one (every member's compile) included (default 600 s). */
  tpTimeoutMs?: number;
}
