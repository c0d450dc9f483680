// The read store port: where projections keep read models. Adapters: memory.ts (embedded,
// rebuilt from the event store at start) and redis.ts (distributed). Every projection writes
// through the same small vocabulary, so it runs unchanged on both.
//
// A read model lives in a generation (a keyspace). The active generation answers reads; a replay
// builds the next one beside it and switches reads over atomically.

/** A document: top-level fields with JSON values (a Redis hash whose values are JSON). */
export type Doc = Record<string, unknown>;

/** What a projection asks for; pure data, applied in order, atomically with the checkpoint. */
export type Write =
  | { op: 'set'; key: string; doc: Doc } // replace the whole document
  | { op: 'patch'; key: string; doc: Doc } // set these fields; a null value removes the field
  | { op: 'del'; key: string }
  | { op: 'incr'; key: string; field: string; by: number }
  | { op: 'zadd'; key: string; member: string; score: number } // sorted index
  | { op: 'zrem'; key: string; member: string };

export interface Checkpoint {
  /** Global position of the last event applied (0: none). */
  position: number;
  /** When that event was stored (ms since the epoch; 0: none). */
  created: number;
}

/** Outcome of an apply: `moved` when the checkpoint was not where the writer thought (another
 * writer, or a crash replayed), `inactive` when the generation is no longer the active one. */
export type ApplyOutcome = 'ok' | 'moved' | 'inactive';

export interface RangeOptions {
  offset?: number;
  limit?: number;
  reverse?: boolean;
  /** Score bounds, inclusive. */
  min?: number;
  max?: number;
}

export type CheckpointListener = (
  projection: string,
  generation: number,
  position: number,
  wrote?: boolean,
) => void;

export interface ReadStore {
  readonly kind: string;

  /** The generation that answers reads (1 until a replay switches it). Readers may get a value
   * cached for up to a second; `fresh` asks the store itself (runners do). */
  activeGeneration(projection: string, fresh?: boolean): Promise<number>;
  /** Switches reads to `generation` at once (every reader sees it within a second). */
  activate(projection: string, generation: number): Promise<void>;

  checkpoint(projection: string, generation: number): Promise<Checkpoint>;
  /**
   * Applies the writes and moves the checkpoint from `from` to `to`, all or nothing. With
   * `onlyIfActive`, refuses when the generation is not the active one (a writer fenced out by a
   * switch never touches a dropped keyspace again).
   */
  apply(
    projection: string,
    generation: number,
    writes: Write[],
    from: number,
    to: Checkpoint,
    onlyIfActive: boolean,
  ): Promise<ApplyOutcome>;

  get(projection: string, generation: number, key: string): Promise<Doc | undefined>;
  range(projection: string, generation: number, key: string, options?: RangeOptions): Promise<string[]>;
  count(projection: string, generation: number, key: string, min?: number, max?: number): Promise<number>;

  /** Every document and index of a generation, keys sorted (operators' and tests' view). */
  dump(projection: string, generation: number): Promise<Record<string, unknown>>;
  /** Deletes a generation's keyspace and checkpoint; returns how many keys went. */
  drop(projection: string, generation: number): Promise<number>;

  /** Replay bookkeeping: the generation an unfinished replay is building, if any. */
  replayTarget(projection: string): Promise<number | undefined>;
  setReplayTarget(projection: string, generation: number | undefined): Promise<void>;
  /** A lease that keeps two replays of one projection from running at once. */
  lock(name: string, owner: string, ttlMs: number): Promise<boolean>;
  unlock(name: string, owner: string): Promise<void>;
  /** Who holds the lease now, if anyone (an operator's view: a replay running in another process). */
  lockHolder(name: string): Promise<string | undefined>;

  /** Called after every applied batch (in any process sharing the store); `wrote` is false for a
   * batch that only moved the checkpoint (said by the in-process stores; undefined: not known). */
  onCheckpoint(listener: CheckpointListener): () => void;

  close(): Promise<void>;
}
