// Command handling over the event store: load an aggregate by folding its stream (from its
// snapshot on), decide new events from its state (a pure function supplied by the domain), append
// them at the revision that was read, and on a concurrent change read again and decide again.
import { createHash, getRandomValues } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { v7 } from 'uuid';
import { decideClaimName, decideReleaseName, nameStream, names } from '../../domain/names.ts';
import {
  type AppendResult,
  appendedEvents,
  type EventStore,
  type RecordedEvent,
  type Snapshot,
  WrongExpectedRevisionError,
} from './port.ts';

/**
 * Event ids: UUIDv7, time-ordered and, within a thread, increasing (uuid's own monotonic rule: a
 * counter seeded from the random bytes at each new millisecond). The random bytes come from a pool
 * refilled every 256 ids: uuid draws them with a getRandomValues call per id, 3 % of an API
 * thread's CPU under the ingestion load.
 */
const idPool = new Uint8Array(16 * 256);
let idPoolUsed = idPool.length;
const idClock = { msecs: 0, seq: 0 };
export function timeOrderedId(): string {
  if (idPoolUsed === idPool.length) {
    getRandomValues(idPool);
    idPoolUsed = 0;
  }
  const random = idPool.subarray(idPoolUsed, idPoolUsed + 16);
  idPoolUsed += 16;
  const now = Date.now();
  if (now > idClock.msecs) {
    idClock.msecs = now;
    idClock.seq = ((random[6]! & 0x7f) << 24) | (random[7]! << 16) | (random[8]! << 8) | random[9]!;
  } else {
    idClock.seq = (idClock.seq + 1) | 0;
    if (idClock.seq === 0) idClock.msecs++;
  }
  return v7({ random, msecs: idClock.msecs, seq: idClock.seq });
}

export interface Evolver<S> {
  initial: () => S;
  /**
   * Folds one event of the stream. A method, so that a domain aggregate may take the events typed
   * (domain/events.ts `FoldedEvent`, narrowed by their type): the store checks each against its
   * schema when appended and reads it upcast to the current version (SchemaCheckedStore).
   */
  evolve(state: S, event: Pick<RecordedEvent, 'type' | 'data' | 'created'>): S;
  /**
   * Keep snapshots of the state (see snapshotShape): `kind` names the aggregate in the store,
   * `shape` is the version of the state's shape. Bump it when what the state holds changes
   * without the text of `initial` or `evolve` changing (a helper they call, a type they build).
   */
  snapshot?: { kind: string; shape: number };
}

export interface Loaded<S> {
  state: S;
  /** Revision of the stream's last event; -1 when the stream does not exist. */
  revision: number;
  /** Revision of the stream's newest snapshot this process knows of (read or written); absent:
   * none. The snapshot policy counts from it. */
  snapshot?: number;
}

/**
 * Recently loaded states by stream, bounded. A load still reads the stream's tail after the
 * cached revision, so what it returns is never stale, also when another process appended
 * meanwhile: streams with many events (a device's metadata) then cost one short read, and none at
 * all on a store this process alone writes to. Commands may decide on a cached state first (see
 * handle), the append's expected revision checking it.
 */
export class StateCache<S> {
  private readonly entries: LRUCache<string, Loaded<S>>;
  constructor(max = 50_000) {
    this.entries = new LRUCache({ max });
  }
  get(stream: string): Loaded<S> | undefined {
    return this.entries.get(stream);
  }
  delete(stream: string): void {
    this.entries.delete(stream);
  }
  set(stream: string, loaded: Loaded<S>): void {
    this.entries.set(stream, loaded);
  }
}

/** How many states each cache of a store keeps (HUB_STATE_CACHE_ENTRIES), set before its first load. */
const cacheEntries = new WeakMap<EventStore, number>();
export function boundStateCaches(store: EventStore, entries: number): void {
  cacheEntries.set(store, entries);
}

/**
 * The process's cache for one store and one kind of aggregate: every load and command on that
 * kind shares it, so that on a store this process alone writes (SQLite) it is authoritative.
 */
const caches = new WeakMap<EventStore, Map<Evolver<unknown>, StateCache<unknown>>>();
export function cacheOf<S>(store: EventStore, evolver: Evolver<S>): StateCache<S> {
  let byKind = caches.get(store);
  if (!byKind) {
    byKind = new Map();
    caches.set(store, byKind);
  }
  let cache = byKind.get(evolver as Evolver<unknown>);
  if (!cache) {
    cache = new StateCache(cacheEntries.get(store));
    byKind.set(evolver as Evolver<unknown>, cache);
  }
  return cache as StateCache<S>;
}

/**
 * Events of one stream that another thread appended to the same store (whichever thread runs the
 * API threads' appends tells them: ThreadAppends in infra/threads.ts): a cached state of the
 * stream just before them moves on, so that this thread's next command on it decides on the
 * current state instead of missing its append; one further behind is forgotten (the next load
 * reads the stream).
 */
export function appendedElsewhere(store: EventStore, stream: string, events: RecordedEvent[]): void {
  const first = events[0];
  const last = events.at(-1);
  if (!first || !last) return;
  for (const [evolver, cache] of caches.get(store) ?? []) {
    const cached = cache.get(stream);
    if (!cached || cached.revision >= last.revision) continue;
    if (cached.revision !== first.revision - 1) {
      cache.delete(stream);
      continue;
    }
    let state = cached.state;
    for (const e of events) state = evolver.evolve(state, e);
    // The thread that appended took the snapshot the policy asked for, if any: not this one too.
    const snapshot = snapshotDue(store, evolver, last.revision, cached.snapshot)
      ? last.revision
      : cached.snapshot;
    cache.set(
      stream,
      snapshot === undefined
        ? { state, revision: last.revision }
        : { state, revision: last.revision, snapshot },
    );
  }
}

export async function load<S>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  cache: StateCache<S> = cacheOf(store, evolver),
): Promise<Loaded<S>> {
  const cached = cache.get(stream);
  if (cached && store.exclusiveWriter) return cached;
  const from = cached ?? (await fromStoredSnapshot(store, stream, evolver));
  let state = from?.state ?? evolver.initial();
  let revision = from?.revision ?? -1;
  for (let page = await store.readStream(stream, revision + 1, 1000); page.length > 0; ) {
    for (const e of page) {
      state = evolver.evolve(state, e);
      revision = e.revision;
    }
    if (page.length < 1000) break;
    page = await store.readStream(stream, revision + 1, 1000);
  }
  const loaded: Loaded<S> = { state, revision };
  if (from?.snapshot !== undefined) loaded.snapshot = from.snapshot;
  if (revision >= 0 && revision !== cached?.revision) {
    saveSnapshotIfDue(store, stream, evolver, loaded);
    cache.set(stream, loaded);
  }
  return loaded;
}

/** What `load` answers at once when it need not read (an exclusive writer's cached state), else
 * undefined: a hot path (the dispatcher, at every attempt) is spared a promise. */
export function loadedNow<S>(store: EventStore, stream: string, evolver: Evolver<S>): Loaded<S> | undefined {
  return store.exclusiveWriter ? cacheOf(store, evolver).get(stream) : undefined;
}

export interface Decided<T> {
  events: { type: string; data: unknown }[];
  /** What the command answers (computed from the state and the new events). */
  result: T;
}

/**
 * Commands on one stream in this process run one at a time, in arrival order: a device reporting
 * faster than the store answers queues here instead of racing itself into conflicts. Only
 * appends from other processes are left to the expected-revision check.
 */
const queues = new WeakMap<EventStore, Map<string, Promise<unknown>>>();
async function oneAtATime<T>(
  store: EventStore,
  stream: string,
  run: (queued: boolean) => Promise<T>,
): Promise<T> {
  let byStream = queues.get(store);
  if (!byStream) {
    byStream = new Map();
    queues.set(store, byStream);
  }
  const before = byStream.get(stream);
  const queued = () => run(true);
  const mine = before ? before.then(queued, queued) : run(false);
  const tail = mine.catch(() => {});
  byStream.set(stream, tail);
  try {
    return await mine;
  } finally {
    if (byStream.get(stream) === tail) byStream.delete(stream);
  }
}

/**
 * How long a command keeps deciding again after concurrent appends, ms, before its conflict is
 * the caller's (a 409). Each conflict means another writer's append went in, so trying again
 * cannot livelock; a count alone was not enough: five tries, a few ms apart, all fell within one
 * stall of an overloaded process (a 409 on PATCH device-meta at 1,000 a second on two API threads).
 */
export const CONFLICT_RETRY_MS = 2000;
/** Tries a command gets after conflicts however long they took (the first may have waited long). */
const CONFLICT_MIN_ATTEMPTS = 5;

/**
 * Runs a command: load, decide, append at the revision read. A concurrent append makes it read
 * and decide again (at least CONFLICT_MIN_ATTEMPTS times, and for up to `conflictRetryMs`, unless
 * `attempts` caps the tries); refusals are thrown by `decide` itself.
 *
 * On a store other processes append to as well, the first decision may be taken on the state this
 * process cached after its last command on the stream, without reading the stream's tail: the
 * append's expected revision refuses it if the stream moved since. Such a decision stands only
 * if it appends; one that refuses or changes nothing is taken again on a fresh read, so neither
 * answer ever rests on a stale state.
 */
export function handle<S, T>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  decide: (state: S, revision: number) => Decided<T> | Promise<Decided<T>>,
  o: {
    cache?: StateCache<S>;
    /** A state the caller just loaded: the first attempt decides on it instead of reading again. */
    loaded?: Loaded<S>;
    conflictRetryMs?: number;
    /** At most this many tries, however quick: 1 makes a conflict the caller's at once (a
     * single-use code, which a concurrent append has redeemed). */
    attempts?: number;
  } = {},
): Promise<{ result: T; appended: AppendResult | undefined; state: S; after: S }> {
  const cache = o.cache ?? cacheOf(store, evolver);
  const conflictRetryMs = o.conflictRetryMs ?? CONFLICT_RETRY_MS;
  let loaded = o.loaded;
  return oneAtATime(store, stream, async (queued) => {
    // A state loaded before waiting in the queue is stale by the time the command runs.
    if (queued) loaded = undefined;
    const started = Date.now();
    let speculate = !store.exclusiveWriter;
    for (let attempt = 1; ; ) {
      const cached = speculate && !loaded ? cache.get(stream) : undefined;
      const unverified = cached !== undefined;
      const { state, revision } = loaded ?? cached ?? (await load(store, stream, evolver, cache));
      loaded = undefined;
      speculate = false;
      let decided: Decided<T>;
      try {
        decided = await decide(state, revision);
      } catch (err) {
        if (!unverified) throw err;
        continue; // refused on a state that may be stale: read what is newer, decide again
      }
      const { events, result } = decided;
      if (events.length === 0) {
        if (!unverified) return { result, appended: undefined, state, after: state };
        continue;
      }
      try {
        // Time-ordered ids (UUIDv7): the stores' unique index on event ids then grows at its end,
        // instead of each commit dirtying a page of it per event (a random id's place).
        const newEvents = events.map((e) => ({ id: timeOrderedId(), type: e.type, data: e.data }));
        const appended = await store.append(stream, newEvents, revision < 0 ? 'no_stream' : revision);
        // The state after the append, without reading it back.
        let after = state;
        for (const e of appendedEvents(stream, newEvents, appended)) after = evolver.evolve(after, e);
        const current: Loaded<S> = { state: after, revision: appended.nextRevision };
        const snapshot = cache.get(stream)?.snapshot;
        if (snapshot !== undefined) current.snapshot = snapshot;
        saveSnapshotIfDue(store, stream, evolver, current);
        cache.set(stream, current);
        return { result, appended, state, after };
      } catch (err) {
        // Someone else wrote: the next load reads what is newer than the cached state (where this
        // process alone writes, the cache is the state itself: read it all again).
        if (store.exclusiveWriter) cache.delete(stream);
        if (!(err instanceof WrongExpectedRevisionError)) throw err;
        // A speculation that missed is not an attempt: the next one reads the stream.
        if (unverified) continue;
        const spent =
          o.attempts !== undefined
            ? attempt >= o.attempts
            : attempt >= CONFLICT_MIN_ATTEMPTS && Date.now() - started >= conflictRetryMs;
        if (spent) throw err;
        attempt++;
        // Writers racing on one stream (other processes or threads) step apart: a random wait
        // that doubles with each attempt (up to 64 ms), instead of meeting again at once.
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(2 ** attempt, 64)));
      }
    }
  });
}

// ---------------------------------------------------------------- snapshots

/**
 * The shape a snapshot of this evolver's state is stored with: its declared `shape` and a hash of
 * the source text of its `initial` and `evolve`. A change of either makes the snapshots stored
 * before it ignored (read again from the events: one full read per stream after such an upgrade),
 * never wrong. A change elsewhere that changes what the state holds needs the declared number
 * bumped. (SchemaCheckedStore adds the event schemas' versions: an upcast changes states too.)
 */
const shapes = new WeakMap<object, string>();
export function snapshotShape<S>(evolver: Evolver<S>): string | undefined {
  if (!evolver.snapshot) return undefined;
  let shape = shapes.get(evolver);
  if (shape === undefined) {
    const source = `${evolver.initial}\n${evolver.evolve}`;
    shape = `${evolver.snapshot.shape}.${createHash('sha256').update(source).digest('hex').slice(0, 12)}`;
    shapes.set(evolver, shape);
  }
  return shape;
}

/** The stream's snapshot for this evolver, of its shape, as a state to fold the events after it
 * into. Anything amiss (none, another shape, a store that fails to answer, a state that does not
 * decode) is no snapshot: the stream is read from its start. */
async function fromStoredSnapshot<S>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
): Promise<Loaded<S> | undefined> {
  const shape = snapshotShape(evolver);
  if (!shape || !store.snapshotEvery || !store.readSnapshot) return undefined;
  try {
    const found = await store.readSnapshot(stream, evolver.snapshot!.kind);
    if (!found || found.shape !== shape || !(found.revision >= 0)) return undefined;
    return { state: fromSnapshot(found.state) as S, revision: found.revision, snapshot: found.revision };
  } catch {
    return undefined;
  }
}

/** Whether the policy asks for a snapshot of a state at `revision`, the last one being at `last`. */
function snapshotDue<S>(
  store: EventStore,
  evolver: Evolver<S>,
  revision: number,
  last: number | undefined,
): boolean {
  const every = store.snapshotEvery ?? 0;
  return every > 0 && evolver.snapshot !== undefined && revision - (last ?? -1) >= every;
}

/**
 * Stores a snapshot of `loaded` when the policy asks for one, and records it there. The write is
 * not waited for, and is done after the current turn (the command's answer first); should it fail,
 * the next load reads a longer tail, and the next snapshot is due `snapshotEvery` events on.
 */
function saveSnapshotIfDue<S>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  loaded: Loaded<S>,
): void {
  if (!store.saveSnapshot || !snapshotDue(store, evolver, loaded.revision, loaded.snapshot)) return;
  loaded.snapshot = loaded.revision;
  const { state, revision } = loaded; // states are never changed in place: this one stays as it is
  setImmediate(() => {
    let snapshot: Snapshot;
    try {
      snapshot = {
        kind: evolver.snapshot!.kind,
        shape: snapshotShape(evolver)!,
        revision,
        state: toSnapshot(state),
      };
    } catch {
      return; // a state the encoding cannot hold exactly is not snapshotted
    }
    store.saveSnapshot!(stream, snapshot).catch(() => {});
  });
}

/**
 * A state as a JSON value that reads back as exactly the same state: JSON alone would lose Maps,
 * Sets and properties set to undefined, which aggregate states hold. Those become single-key
 * objects tagged `$map`, `$set`, `$undefined`; a key of the state's own that begins with `$` (user
 * metadata may have one) gets one `$` more, so no data is ever read as a tag. Records (plain
 * objects, or instances holding their data in own properties, as Avro's records do) are read back
 * as plain objects. Anything else (a Date, a non-finite number, a bigint) throws: such a state is
 * not snapshotted rather than read back changed.
 */
export function toSnapshot(value: unknown): unknown {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      if (!Number.isFinite(value)) throw new Error(`a snapshot cannot hold ${value}`);
      return value;
    case 'undefined':
      return { $undefined: true };
    case 'object': {
      if (value === null) return null;
      if (Array.isArray(value)) return value.map(toSnapshot);
      if (value instanceof Map) return { $map: [...value].map(([k, v]) => [toSnapshot(k), toSnapshot(v)]) };
      if (value instanceof Set) return { $set: [...value].map(toSnapshot) };
      if (Object.prototype.toString.call(value) !== '[object Object]')
        throw new Error(`a snapshot cannot hold a ${value.constructor?.name ?? 'special object'}`);
      return Object.fromEntries(
        Object.entries(value).map(([k, v]) => [k.startsWith('$') ? `$${k}` : k, toSnapshot(v)]),
      );
    }
    default:
      throw new Error(`a snapshot cannot hold a ${typeof value}`);
  }
}

/** The state a `toSnapshot` value stands for. */
export function fromSnapshot(value: unknown): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(fromSnapshot);
  const entries = Object.entries(value);
  const [tag, tagged] = entries.length === 1 ? entries[0]! : [];
  if (tag === '$undefined') return undefined;
  if (tag === '$map')
    return new Map((tagged as [unknown, unknown][]).map(([k, v]) => [fromSnapshot(k), fromSnapshot(v)]));
  if (tag === '$set') return new Set((tagged as unknown[]).map(fromSnapshot));
  return Object.fromEntries(entries.map(([k, v]) => [k.startsWith('$') ? k.slice(1) : k, fromSnapshot(v)]));
}

// ---------------------------------------------------------------- unique names

// The aggregate and its decisions are domain/names.ts; these run them against the store.
export { NameTakenError } from '../../domain/names.ts';

/** Who holds a unique name (a nick, an email, a PRN), read from the store: never stale. */
export async function nameOwner(store: EventStore, kind: string, value: string): Promise<string | undefined> {
  return (await load(store, nameStream(kind, value), names)).state.owner;
}

/**
 * Takes a unique name for an owner (decideClaimName): a no-op for the name's holder, a
 * NameTakenError (a conflict) when someone else holds it.
 */
export async function claimName(
  store: EventStore,
  kind: string,
  value: string,
  owner: string,
): Promise<AppendResult | undefined> {
  const { appended } = await handle(store, nameStream(kind, value), names, (s) => ({
    events: decideClaimName({ kind, value, owner }, s),
    result: undefined,
  }));
  return appended;
}

/** Gives a name back (decideReleaseName): only its holder can. */
export async function releaseName(
  store: EventStore,
  kind: string,
  value: string,
  owner: string,
): Promise<void> {
  await handle(store, nameStream(kind, value), names, (s) => ({
    events: decideReleaseName({ kind, value, owner }, s),
    result: undefined,
  }));
}
