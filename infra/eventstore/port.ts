// The event store port: the one source of truth. Adapters beside this file (sqlite.ts,
// postgres.ts, esdb.ts) implement it; test/eventstore/contract.ts holds them to the same rules.
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { MessagePort } from 'node:worker_threads';
import type { FoldedEvent } from '../../domain/events.ts';

/** What the caller expects of the stream before the append. A number is the revision of its last event. */
export type ExpectedRevision = 'any' | 'no_stream' | 'stream_exists' | number;

export interface NewEvent {
  /** Unique forever: appending an id that is already stored returns the original result. */
  id: string;
  type: string;
  data: unknown;
  metadata?: Record<string, unknown>;
}

export interface RecordedEvent {
  id: string;
  type: string;
  stream: string;
  /** 0-based position of the event within its stream. */
  revision: number;
  /** Position in the global order, starting at 1, strictly increasing in commit order. */
  position: number;
  data: unknown;
  metadata: Record<string, unknown>;
  /** Milliseconds since the epoch, when the event was stored. */
  created: number;
}

/** A stored event with its data typed by its type (domain/events.ts): the store checks each event
 * against its schema when appended and reads it upcast to the current version (SchemaCheckedStore),
 * so its data is of that type. What a projection takes to narrow the data by the event's type. */
export type StoredEvent = RecordedEvent & FoldedEvent;

export interface AppendResult {
  /** Revision of the stream's last event after the append. */
  nextRevision: number;
  /** Global position of the last event appended. */
  position: number;
  /** When the store stamped the events (ms since the epoch), when it knows. */
  created?: number;
}

/**
 * Events in global order, each once, as batches of what has arrived (at most the batch size
 * asked for): a follower applies a batch at a time, and an event costs no step of its own.
 */
export interface Subscription extends AsyncIterable<RecordedEvent[]> {
  close(): void;
}

/**
 * An aggregate's state as of a revision of its stream: a load starts from it and reads only the
 * events after it (see aggregate.ts). The store keeps one per stream and kind.
 */
export interface Snapshot {
  /** The aggregate kind (an evolver's `snapshot.kind`): one stream may be folded by several. */
  kind: string;
  /** The version of the state's shape: a snapshot of another shape than the reader's is ignored. */
  shape: string;
  /** The revision of the stream's last event the state includes. */
  revision: number;
  /** The state as a JSON value. */
  state: unknown;
}

export interface EventStore {
  readonly kind: string;
  /** True when this process is the only one that appends (the embedded SQLite file): states it
   * cached after its own appends are then current without reading the stream's tail. */
  readonly exclusiveWriter?: boolean;
  /** True when reads answer in this process (the embedded SQLite file, which keeps each stream's
   * last revision in memory): reading a stream's tail after a cached state costs no round trip. */
  readonly localReads?: boolean;
  /** Events between snapshots of an aggregate's state (HUB_SNAPSHOT_EVERY); 0 or absent: loads
   * neither read nor write snapshots. */
  readonly snapshotEvery?: number;
  /** The stream's snapshot of that kind, if one is stored. */
  readSnapshot?(stream: string, kind: string): Promise<Snapshot | undefined>;
  /** Stores a snapshot in place of the stream's one of its kind, unless that one is of a later
   * revision (one of the same revision is replaced: it may be of another shape). */
  saveSnapshot?(stream: string, snapshot: Snapshot): Promise<void>;
  append(stream: string, events: NewEvent[], expected?: ExpectedRevision): Promise<AppendResult>;
  /** Events of one stream from a revision on; a missing stream reads as empty. */
  readStream(stream: string, fromRevision?: number, max?: number): Promise<RecordedEvent[]>;
  /** Events of every stream with a global position above `after` (0 reads from the start). */
  readAll(after?: number, max?: number): Promise<RecordedEvent[]>;
  /** Catches up from `after`, then follows live appends, in global order, each event once. */
  subscribe(after?: number, options?: SubscribeOptions): Subscription;
  /**
   * Embedded, with a writer thread: a link over which another thread of this process appends
   * straight to the store's writer, its events checked by the caller (SqliteEventStore).
   */
  connectAppender?(): WriterLink | undefined;
  /**
   * A reader waits for this thread to hear of `position` (a read after its caller's write): a
   * store that holds the news of other threads' commits for a batch (SqliteEventStore's
   * newsLingerMs) sends them now.
   */
  hasten?(position: number): void;
  /** The global position of the last stored event (0 when empty). */
  head(): Promise<number>;
  close(): Promise<void>;
}

export interface SubscribeOptions {
  /** Most events per page. */
  batchSize?: number;
  /**
   * Following live appends, a read after a page short of `batchSize` waits until this long after
   * the last one began: under a steady trickle of appends, one page per interval instead of one
   * per append (each costing its consumer a write of its own). Full pages (a backlog) are read
   * back to back, and an append after at least this long without a read is read at once. 0: every
   * append is read at once.
   */
  lingerMs?: number;
  /** How long a subscriber that is not woken by an append waits before it reads again anyway (a
   * missed signal); adapters that are woken by their store choose it (about a second). */
  pollMs?: number;
}

export class WrongExpectedRevisionError extends Error {
  readonly stream: string;
  readonly expected: ExpectedRevision;
  /** The stream's last revision, -1 when it does not exist. */
  readonly actual: number;
  constructor(stream: string, expected: ExpectedRevision, actual: number) {
    super(
      `stream ${stream}: expected ${describeExpected(expected)}, but ${actual < 0 ? 'it does not exist' : `it is at revision ${actual}`}`,
    );
    this.name = 'WrongExpectedRevisionError';
    this.stream = stream;
    this.expected = expected;
    this.actual = actual;
  }
}

/** Some but not all of an append's event ids are stored already: neither a retry nor a new append. */
export class DuplicateEventIdError extends Error {
  readonly stream: string;
  readonly id: string;
  constructor(stream: string, id: string) {
    super(`stream ${stream}: event id ${id} is stored already, but the rest of the append is not`);
    this.name = 'DuplicateEventIdError';
    this.stream = stream;
    this.id = id;
  }
}

const describeExpected = (e: ExpectedRevision) =>
  typeof e === 'number'
    ? `revision ${e}`
    : e === 'no_stream'
      ? 'no stream'
      : e === 'stream_exists'
        ? 'an existing stream'
        : 'any';

// ---------------------------------------------------------------- shared by the adapters

/**
 * Serialises an append's data and metadata to JSON up front (the SQL adapters store text), so that
 * one caller's unserialisable data fails that caller only, not the batch it would have joined.
 */
export function serialise(events: NewEvent[]): NewEvent[] {
  return events.map((e) => ({
    ...e,
    data: JSON.stringify(e.data ?? null),
    metadata: { json: JSON.stringify(e.metadata ?? {}) },
  }));
}

/**
 * The events of one append as recorded, without reading them back: numbered from the append's
 * result, stamped `created` by the store within this millisecond or so (the next load reads the
 * stored events).
 */
export function appendedEvents(stream: string, events: NewEvent[], appended: AppendResult): RecordedEvent[] {
  const n = events.length;
  const created = appended.created ?? Date.now();
  return events.map((e, i) => ({
    id: e.id,
    type: e.type,
    data: e.data,
    stream,
    revision: appended.nextRevision - n + 1 + i,
    position: appended.position - n + 1 + i,
    created,
    metadata: {},
  }));
}

/** What another thread needs to append straight to a store's writer thread: a port to it, and the
 * heads it shares (SharedHeads). */
export interface WriterLink {
  port: MessagePort;
  heads: SharedArrayBuffer;
}

/**
 * The store's head and the last revision of recently written streams, in memory the threads of
 * a process share: written by the store's one writer after each commit, before anyone hears of
 * it, and read by every thread without a message. So a thread knows at once that a stream has
 * nothing past the revision it holds (the check of a decision that changes nothing), and the head
 * never lags a write already answered (read-your-writes). Streams have a slot by their hash; a
 * stream whose slot another took since is not known (the reader reads the stream). A sequence
 * number per slot, odd while it is written, keeps a read from mixing two writes.
 */
export class SharedHeads {
  static readonly SLOTS = 1 << 18;
  readonly buffer: SharedArrayBuffer;
  private readonly position: BigInt64Array;
  /** Per slot: sequence, hash, second hash, revision. */
  private readonly slots: Int32Array;

  constructor(buffer = new SharedArrayBuffer(8 + SharedHeads.SLOTS * 16)) {
    this.buffer = buffer;
    this.position = new BigInt64Array(buffer, 0, 1);
    this.slots = new Int32Array(buffer, 8);
  }

  head(): number {
    return Number(Atomics.load(this.position, 0));
  }

  setHead(position: number): void {
    Atomics.store(this.position, 0, BigInt(position));
  }

  /** The stream's last revision, if its slot holds it. */
  revision(stream: string): number | undefined {
    const [h1, h2] = hashOf(stream);
    const at = (h1 & (SharedHeads.SLOTS - 1)) * 4;
    const s = this.slots;
    // A write takes nanoseconds: try again while one is under way, a few times at most (a writer
    // that died mid-write leaves its slot odd).
    for (let tries = 0; tries < 100; tries++) {
      const seq = Atomics.load(s, at);
      if (seq & 1) continue;
      const a = Atomics.load(s, at + 1);
      const b = Atomics.load(s, at + 2);
      const revision = Atomics.load(s, at + 3);
      if (Atomics.load(s, at) !== seq) continue;
      return seq !== 0 && a === h1 && b === h2 ? revision : undefined;
    }
    return undefined;
  }

  /** Only the store's one writer calls this. */
  setRevision(stream: string, revision: number): void {
    const [h1, h2] = hashOf(stream);
    const at = (h1 & (SharedHeads.SLOTS - 1)) * 4;
    const s = this.slots;
    Atomics.add(s, at, 1);
    Atomics.store(s, at + 1, h1);
    Atomics.store(s, at + 2, h2);
    Atomics.store(s, at + 3, revision);
    Atomics.add(s, at, 1);
  }

  /** Forgets every stream (the writer thread died: what it last wrote is not known). */
  forget(): void {
    for (let at = 0; at < this.slots.length; at += 4) {
      if (Atomics.load(this.slots, at) === 0) continue;
      Atomics.add(this.slots, at, 1);
      Atomics.store(this.slots, at + 1, 0);
      Atomics.store(this.slots, at + 2, 0);
      Atomics.add(this.slots, at, 1);
    }
  }
}

/** Two 32-bit FNV-1a-style hashes of a stream name (a slot's place and its check). */
function hashOf(text: string): [number, number] {
  let a = 0x811c9dc5;
  let b = 0x2545f491;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 13;
  }
  return [a | 0, b | 0];
}

export interface PendingAppend {
  stream: string;
  events: NewEvent[];
  expected: ExpectedRevision;
}

/** An append queued for the next group commit, with the caller waiting on it. */
export interface Waiting extends PendingAppend {
  resolve: (r: AppendResult) => void;
  reject: (e: Error) => void;
}

export interface StoredId {
  stream: string;
  revision: number;
  position: number;
  created: number;
}

export type Planned =
  | { kind: 'write'; firstRevision: number; firstPosition: number; result: AppendResult }
  | { kind: 'done'; result: AppendResult }
  | { kind: 'error'; error: Error };

/**
 * Decides a batch of appends that commit together (group commit): for each, whether it writes
 * (and at which revisions and positions), is an idempotent retry of a stored append, or fails.
 * Pure: the adapter looks up current revisions and stored ids, then writes what this returns.
 */
export function planBatch(
  batch: PendingAppend[],
  revisionOf: (stream: string) => number,
  storedIds: Map<string, StoredId>,
  lastPosition: number,
  now: number,
): Planned[] {
  const revisions = new Map<string, number>();
  const ids = new Map(storedIds);
  let position = lastPosition;
  return batch.map(({ stream, events, expected }) => {
    const current = revisions.get(stream) ?? revisionOf(stream);
    const known = events.map((e) => ids.get(e.id));
    if (known.length > 0 && known.every((k) => k?.stream === stream)) {
      const last = known[known.length - 1]!;
      return {
        kind: 'done',
        result: { nextRevision: last.revision, position: last.position, created: last.created },
      };
    }
    const clash = events.find(
      (e, i) => known[i] !== undefined || events.findIndex((o) => o.id === e.id) !== i,
    );
    if (clash) return { kind: 'error', error: new DuplicateEventIdError(stream, clash.id) };
    const ok =
      expected === 'any' ||
      (expected === 'no_stream' && current === -1) ||
      (expected === 'stream_exists' && current >= 0) ||
      expected === current;
    if (!ok) return { kind: 'error', error: new WrongExpectedRevisionError(stream, expected, current) };
    if (events.length === 0) return { kind: 'done', result: { nextRevision: current, position } };
    const firstRevision = current + 1;
    const firstPosition = position + 1;
    position += events.length;
    const nextRevision = current + events.length;
    revisions.set(stream, nextRevision);
    events.forEach((e, i) => {
      ids.set(e.id, { stream, revision: firstRevision + i, position: firstPosition + i, created: now });
    });
    return { kind: 'write', firstRevision, firstPosition, result: { nextRevision, position, created: now } };
  });
}

/** The events of an append a commit wrote, as a read of the log would answer them. */
export function committedEvents(
  append: PendingAppend,
  plan: { firstRevision: number; firstPosition: number },
  created: number,
): RecordedEvent[] {
  return append.events.map((e, j) => ({
    id: e.id,
    type: e.type,
    stream: append.stream,
    revision: plan.firstRevision + j,
    position: plan.firstPosition + j,
    data: JSON.parse(e.data as string),
    metadata: JSON.parse((e.metadata as { json: string }).json),
    created,
  }));
}

/**
 * The newest events a store committed itself, contiguous by position, parsed once at commit: every
 * in-process follower (the projections, the relay, the mailer…) reads each new event, and the store
 * that wrote them knows them without reading them back. The events are shared by the readers, which
 * treat them as read-only. A commit that does not follow the last (another writer's came between)
 * starts the tail again. With other writers (`soleWriter` false) a read past the last event is not
 * answered here: another process may have written since.
 */
export class CommittedTail {
  private readonly events: RecordedEvent[] = [];
  private readonly keep: number;
  private readonly soleWriter: boolean;

  constructor(keep: number, soleWriter: boolean) {
    this.keep = keep;
    this.soleWriter = soleWriter;
  }

  /** Position of the newest event held, 0 when none is. */
  get last(): number {
    return this.events.length === 0 ? 0 : this.events[this.events.length - 1]!.position;
  }

  /** The events of one commit, in position order (planBatch numbers a batch in its order). */
  add(written: RecordedEvent[]): void {
    if (written.length === 0) return;
    if (this.events.length > 0 && written[0]!.position !== this.last + 1) this.events.length = 0;
    this.events.push(...written);
    // Cut back to `keep` only once it is a quarter over: cutting the front of the array moves all
    // the rest, and once per commit that was 1.5 % of a core under the ingestion load.
    if (this.events.length > this.keep + Math.max(1, this.keep >> 2))
      this.events.splice(0, this.events.length - this.keep);
  }

  clear(): void {
    this.events.length = 0;
  }

  /** The page after `after` when the tail holds it; undefined when it must be read from the store. */
  page(after: number, max: number): RecordedEvent[] | undefined {
    const first = this.events[0]?.position;
    if (first === undefined || after + 1 < first) return undefined;
    if (!this.soleWriter && after >= this.last) return undefined;
    const from = after + 1 - first;
    return this.events.slice(from, from + max);
  }
}

/**
 * Wakes a store's subscribers a turn after a commit's appenders were answered: their answers, which
 * an API thread's channel sends at the end of this turn, go out before the subscribers' work on the
 * commit instead of waiting for it. The commits of one turn wake them once.
 */
export class SubscriberWake {
  private scheduled = false;
  private readonly wake: () => void;

  constructor(wake: () => void) {
    this.wake = wake;
  }

  soon(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() =>
      setImmediate(() => {
        this.scheduled = false;
        this.wake();
      }),
    );
  }
}

/**
 * A catch-up subscription over readAll: reads pages from the checkpoint, then waits for the
 * adapter's "something was appended" signal (or a poll interval, in case a signal was missed).
 */
export function catchUpSubscription(
  readAll: (after: number, max: number) => Promise<RecordedEvent[]>,
  onAppend: (wake: () => void) => () => void,
  after: number,
  options: SubscribeOptions = {},
): Subscription {
  const batchSize = options.batchSize ?? 500;
  const pollMs = options.pollMs ?? 1000;
  const lingerMs = options.lingerMs ?? 0;
  let closed = false;
  let wake: (() => void) | undefined;
  let signalled = false;
  const unlisten = onAppend(() => {
    signalled = true;
    wake?.();
  });
  const close = () => {
    closed = true;
    unlisten();
    wake?.();
  };
  async function* run(): AsyncGenerator<RecordedEvent[]> {
    let checkpoint = after;
    let lastRead = Number.NEGATIVE_INFINITY;
    // A signal after a read began may be of events that read missed: it is reset as a read begins.
    const read = () => {
      signalled = false;
      lastRead = performance.now();
      return readAll(checkpoint, batchSize);
    };
    /** Waits out the linger since the last read (see SubscribeOptions); a close ends it. */
    const lingered = async () => {
      const left = lastRead + lingerMs - performance.now();
      if (left <= 0 || closed) return;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        wake = () => {
          if (!closed) return; // appends meanwhile are read when the linger ends
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    };
    // The next page, read while the consumer handles this one when more is known to be waiting.
    let ahead: Promise<RecordedEvent[]> | undefined;
    try {
      while (!closed) {
        if (!ahead) await lingered();
        if (closed) return;
        const page = await (ahead ?? read());
        ahead = undefined;
        if (closed) return;
        if (page.length > 0) {
          checkpoint = page[page.length - 1]!.position;
          if (page.length === batchSize || signalled) {
            // More is waiting: read it while the consumer handles this page, a full page at once,
            // a short one once the linger is out.
            ahead = page.length === batchSize ? read() : lingered().then(() => (closed ? [] : read()));
            ahead.catch(() => {}); // awaited next round; dropped if the consumer closes first
          }
          yield page;
          if (closed) return; // closed while the consumer held the page: no wait for a poll
          // A backlog read from a store that answers at once (SQLite) would otherwise hold the
          // event loop until it is through.
          if (page.length === batchSize) await nextTurn();
        }
        if (ahead || signalled) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, pollMs);
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        wake = undefined;
      }
    } finally {
      close();
    }
  }
  const iterator = run();
  return { close, [Symbol.asyncIterator]: () => iterator };
}
