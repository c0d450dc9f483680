// Embedded event store: one SQLite file (node:sqlite) in WAL mode. One writer per file, and
// appends are group-committed: everything that arrives while a commit runs goes into the next
// transaction, so 256 concurrent appenders cost a handful of fsyncs, not 256.
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import {
  isMainThread,
  MessageChannel,
  type MessagePort,
  parentPort,
  receiveMessageOnPort,
  Worker,
  workerData,
} from 'node:worker_threads';
import { LRUCache } from 'lru-cache';
import { BACKSTOP_PAGES, BUSY_TIMEOUT_MS, unwatch, watch } from '../checkpointer.ts';
import { errorsCrossThreads, ThreadAppends, ThreadChannel } from '../threads.ts';
import {
  type AppendResult,
  CommittedTail,
  catchUpSubscription,
  committedEvents,
  DuplicateEventIdError,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type PendingAppend,
  type Planned,
  planBatch,
  type RecordedEvent,
  SharedHeads,
  type Snapshot,
  type StoredId,
  type SubscribeOptions,
  SubscriberWake,
  type Subscription,
  serialise,
  type Waiting,
  type WriterLink,
  WrongExpectedRevisionError,
} from './port.ts';

/** Streams whose last revision the writer remembers (the least recently written go first). */
const MAX_CACHED_STREAMS = 100_000;

const MIGRATIONS = [
  `CREATE TABLE events (
     position INTEGER PRIMARY KEY,
     stream   TEXT    NOT NULL,
     revision INTEGER NOT NULL,
     id       TEXT    NOT NULL UNIQUE,
     type     TEXT    NOT NULL,
     data     TEXT    NOT NULL,
     metadata TEXT    NOT NULL,
     created  INTEGER NOT NULL,
     UNIQUE (stream, revision)
   ) STRICT`,
  // One snapshot per stream and aggregate kind (see aggregate.ts): the newest revision stays.
  `CREATE TABLE snapshots (
     stream   TEXT    NOT NULL,
     kind     TEXT    NOT NULL,
     shape    TEXT    NOT NULL,
     revision INTEGER NOT NULL,
     state    TEXT    NOT NULL,
     PRIMARY KEY (stream, kind)
   ) STRICT`,
];

type Row = {
  position: number;
  stream: string;
  revision: number;
  id: string;
  type: string;
  data: string;
  metadata: string;
  created: number;
};

export interface SqliteOptions {
  /** `full` fsyncs each commit (durable across power loss), `normal` across process crashes only. */
  synchronous?: 'full' | 'normal';
  /** Most appends grouped into one transaction. */
  maxBatch?: number;
  /** How many of the newest events readAll serves from memory (at least; up to a quarter more). */
  tailEvents?: number;
  /**
   * Commit on a thread of its own (what the hub runs): the commit's SQLite work then runs beside
   * the HTTP work instead of between requests. Reads stay on the caller's thread.
   */
  writerThread?: boolean;
  /**
   * With a writer thread: post the queue as soon as it holds this many appends, instead of only
   * at the end of the event loop's turn. A saturated turn answers a hundred requests or more;
   * posting part-way lets the thread commit while the turn goes on, so the callers hear of their
   * commit a turn sooner. The thread merges what is waiting into one transaction.
   */
  postEvery?: number;
  /**
   * This process's other threads append through this store too (the embedded hub's API threads):
   * then the calling thread is not the file's only writer, and its aggregate caches must not pass
   * for the state.
   */
  sharedWithThreads?: boolean;
  /** Events between snapshots of an aggregate's state (see EventStore.snapshotEvery); 0: none. */
  snapshotEvery?: number;
  /**
   * With a writer thread: how long it may hold the news of commits that only other threads'
   * appends made (connectAppender) before telling this thread, ms (HUB_DERIVE_LINGER_MS). Nothing
   * here waits for them, and this thread's followers then take a steady rate's commits in
   * batches. News of this thread's own batches go at once, and the held ones before them.
   */
  newsLingerMs?: number;
}

/** A planned append as it crosses from the writer's thread: errors travel as their arguments. */
type WirePlan =
  | Exclude<Planned, { kind: 'error' }>
  | { kind: 'wrong'; args: [string, ExpectedRevision, number] }
  | { kind: 'duplicate'; args: [string, string] }
  | { kind: 'failed'; message: string };

/** The outcome of one group commit: a plan per append, or one error for all of them. */
type Committed = { plans: WirePlan[]; created: number } | { error: string; errcode?: number };
/**
 * What the writer thread tells the store of a group commit: for the store's own batches their
 * outcome, and for the appends other threads sent it directly (connectAppender) the appends with
 * their outcome, so that the store's tail, heads and subscribers follow every commit, in order.
 */
type CommitNews = Committed | { appended: PendingAppend[]; committed: Committed };

/** A snapshot for the writer thread to store: a message of its own, beside the appends' batches. */
type SnapshotWrite = { stream: string; snapshot: Snapshot };
/** The writer thread's answer to the snapshot messages it stored together (`error`: none were). */
type SnapshotsSaved = { saved: number; error?: string };

export class SqliteEventStore implements EventStore {
  readonly kind = 'sqlite';
  readonly exclusiveWriter: boolean;
  readonly localReads = true;
  readonly snapshotEvery: number;
  /** Reads (and, without a writer thread, the writes too). */
  private readonly db: DatabaseSync;
  private readonly path: string;
  private readonly synchronous: 'full' | 'normal';
  private readonly queue: Waiting[] = [];
  /**
   * Batches posted to the writer thread, oldest first. The thread commits them in order, one
   * transaction each, so a batch need not wait for the answer to the one before it.
   */
  private readonly committing: Waiting[][] = [];
  /**
   * The head and the streams' last revisions as the writer sets them after each commit, before
   * anyone hears of it (shared with the writer thread and the threads appending to it): head() is
   * never behind a write already answered, although this thread hears of the commit a little
   * later, and a read of a stream past its last revision needs no query.
   */
  private readonly shared = new SharedHeads();
  /** Snapshots posted to the writer thread, oldest first, waiting for it to store them. */
  private readonly saving: PromiseWithResolvers<void>[] = [];
  private flushScheduled = false;
  private lastPosition: number;
  /** The newest events (the file's only writer knows them without reading them back); older
   * positions are read from the file. */
  private readonly tail: CommittedTail;
  private readonly appended = new EventEmitter();
  private readonly wakeSubscribers = new SubscriberWake(() => this.appended.emit('append'));
  private readonly maxBatch: number;
  private readonly postEvery: number;
  private readonly newsLingerMs: number;
  private readonly writer: SqliteWriter | undefined;
  private thread: Worker | undefined;
  /** Set once close() has drained the queue: later appends are refused. */
  private closed = false;
  private closing: Promise<void> | undefined;
  private readonly sql: { readStream: StatementSync; readAll: StatementSync; readSnapshot: StatementSync };

  constructor(path: string, options: SqliteOptions = {}) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.path = path;
    this.synchronous = options.synchronous ?? 'full';
    this.db = openDatabase(path, this.synchronous);
    this.maxBatch = options.maxBatch ?? 1024;
    this.postEvery = options.postEvery ?? 32;
    this.newsLingerMs = options.newsLingerMs ?? 0;
    this.exclusiveWriter = !options.sharedWithThreads;
    this.snapshotEvery = options.snapshotEvery ?? 0;
    this.tail = new CommittedTail(options.tailEvents ?? 20_000, true);
    this.appended.setMaxListeners(0);
    this.sql = {
      readStream: this.db.prepare(
        'SELECT * FROM events WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?',
      ),
      readAll: this.db.prepare('SELECT * FROM events WHERE position > ? ORDER BY position LIMIT ?'),
      readSnapshot: this.db.prepare(
        'SELECT kind, shape, revision, state FROM snapshots WHERE stream = ? AND kind = ?',
      ),
    };
    this.lastPosition = headOf(this.db);
    this.shared.setHead(this.lastPosition);
    if (!options.writerThread || path === ':memory:') this.writer = new SqliteWriter(this.db, this.shared);
    // Started now, not at the first append: loading its code took the first command after a
    // restart 200-500 ms (it waits for the thread's answer); idle, the thread keeps no process up.
    else this.writerThread();
    watch(path);
  }

  append(stream: string, events: NewEvent[], expected: ExpectedRevision = 'any'): Promise<AppendResult> {
    if (this.closed || !this.db.isOpen) return Promise.reject(new Error('the event store is closed'));
    let serialised: NewEvent[];
    try {
      serialised = serialise(events);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ stream, events: serialised, expected, resolve, reject });
      this.scheduleFlush();
      if (!this.writer && this.queue.length >= this.postEvery) {
        try {
          this.flush();
        } catch {
          // Posting early is only sooner: the flush scheduled above tries again.
        }
      }
    });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.queue.length === 0) return;
    this.flushScheduled = true;
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  /** One transaction for everything queued; new arrivals wait for the next one. */
  private flush(): void {
    if (this.queue.length === 0) return;
    // The thread first: should starting it throw, the appends stay queued for the next flush.
    const thread = this.writer ? undefined : this.writerThread();
    const batch = this.queue.splice(0, this.maxBatch);
    const pending = batch.map(({ stream, events, expected }) => ({ stream, events, expected }));
    if (!thread) {
      this.settle(batch, this.writer!.commit(pending));
      return;
    }
    thread.ref(); // a commit under way keeps the process alive; an idle writer does not
    this.committing.push(batch);
    thread.postMessage(pending);
  }

  /**
   * A link over which another thread of this process (an API thread) appends straight to the
   * writer thread, its answers not waiting for this thread's turns: a port whose other end serves
   * `append` on a ThreadChannel (as `writer`), with the stream turns and the news to the other
   * such threads of ThreadAppends, and the heads the writer shares (SharedHeads). The caller checks
   * and serialises the events (SchemaCheck, serialise). Undefined without a writer thread. The
   * port closes should the writer thread end: the caller then appends through this store.
   */
  connectAppender(): WriterLink | undefined {
    if (this.writer || this.closed) return undefined;
    const { port1, port2 } = new MessageChannel();
    this.writerThread().postMessage({ appender: port1 }, [port1]);
    return { port: port2, heads: this.shared.buffer };
  }

  private writerThread(): Worker {
    if (this.thread) return this.thread;
    const thread = new Worker(new URL(import.meta.url), {
      workerData: {
        sqliteWriter: {
          path: this.path,
          synchronous: this.synchronous,
          heads: this.shared.buffer,
          newsLingerMs: this.newsLingerMs,
        },
      },
    });
    thread.on('message', (answers: CommitNews[] | SnapshotsSaved) => {
      if (Array.isArray(answers)) {
        for (const news of answers) {
          if ('appended' in news) {
            const theirs = news.appended.map((a) => ({ ...a, resolve: ignore, reject: ignore }));
            this.settle(theirs, news.committed);
            continue;
          }
          const batch = this.committing.shift();
          if (batch) this.settle(batch, news);
        }
      } else {
        for (const w of this.saving.splice(0, answers.saved))
          if (answers.error === undefined) w.resolve();
          else w.reject(new Error(answers.error));
      }
      if (this.committing.length === 0 && this.saving.length === 0) thread.unref();
    });
    const gone = (err: Error) => {
      if (this.thread !== thread) return;
      this.thread = undefined;
      // Whether the batches committed is unknown: their callers hear of the failure (a retry is
      // idempotent by event id), and the tail starts again after what the file holds.
      this.tail.clear();
      this.shared.forget();
      if (this.db.isOpen) this.lastPosition = headOf(this.db);
      this.shared.setHead(this.lastPosition);
      for (const batch of this.committing.splice(0)) for (const w of batch) w.reject(err);
      for (const w of this.saving.splice(0)) w.reject(err);
      this.scheduleFlush();
    };
    thread.on('error', gone);
    thread.on('exit', (code) => gone(new Error(`the event store's writer thread exited (${code})`)));
    thread.unref();
    this.thread = thread;
    return thread;
  }

  hasten(position: number): void {
    if (this.newsLingerMs > 0 && position > this.lastPosition) this.thread?.postMessage({ news: true });
  }

  /** Answers the callers of a committed batch and keeps the tail of the newest events. */
  private settle(batch: Waiting[], committed: Committed): void {
    if ('error' in committed) {
      answer(batch, committed);
      this.scheduleFlush();
      return;
    }
    const { plans, created } = committed;
    const written: RecordedEvent[] = [];
    batch.forEach((w, i) => {
      const plan = plans[i]!;
      if (plan.kind !== 'write') return;
      written.push(...committedEvents(w, plan, created));
      this.lastPosition = plan.result.position;
    });
    this.tail.add(written);
    answer(batch, committed);
    if (written.length > 0) this.wakeSubscribers.soon();
    this.scheduleFlush();
  }

  async readStream(stream: string, fromRevision = 0, max = 1000): Promise<RecordedEvent[]> {
    const last = this.shared.revision(stream);
    if (last !== undefined && fromRevision > last) return [];
    return (this.sql.readStream.all(stream, fromRevision, max) as Row[]).map(toRecorded);
  }

  async readAll(after = 0, max = 1000): Promise<RecordedEvent[]> {
    return this.tail.page(after, max) ?? (this.sql.readAll.all(after, max) as Row[]).map(toRecorded);
  }

  async readSnapshot(stream: string, kind: string): Promise<Snapshot | undefined> {
    const row = this.sql.readSnapshot.get(stream, kind) as
      | { kind: string; shape: string; revision: number; state: string }
      | undefined;
    return row && { ...row, state: JSON.parse(row.state) };
  }

  /** Written by the file's one writer (the writer thread, when there is one), in a transaction of
   * its own: the reading connection never contends for the write lock. */
  saveSnapshot(stream: string, snapshot: Snapshot): Promise<void> {
    if (this.closed || !this.db.isOpen) return Promise.reject(new Error('the event store is closed'));
    const write: SnapshotWrite = { stream, snapshot };
    if (this.writer) {
      const saved = this.writer.saveSnapshots([write]);
      return saved.error === undefined ? Promise.resolve() : Promise.reject(new Error(saved.error));
    }
    const thread = this.writerThread();
    const waiting = Promise.withResolvers<void>();
    thread.ref();
    this.saving.push(waiting);
    thread.postMessage({ snapshot: write });
    return waiting.promise;
  }

  subscribe(after = 0, options: SubscribeOptions = {}): Subscription {
    return catchUpSubscription(
      (from, max) => this.readAll(from, max),
      (wake) => {
        this.appended.on('append', wake);
        return () => this.appended.off('append', wake);
      },
      after,
      options,
    );
  }

  /** The writer's head: set before it answers anyone, so never behind what this thread has heard. */
  async head(): Promise<number> {
    return this.shared.head();
  }

  /** Once, however often it is called: the appends queued are written, later ones refused. */
  close(): Promise<void> {
    this.closing ??= this.shut();
    return this.closing;
  }

  private async shut(): Promise<void> {
    while (
      this.committing.length > 0 ||
      this.queue.length > 0 ||
      this.flushScheduled ||
      this.saving.length > 0
    ) {
      if (!this.flushScheduled) this.flush();
      await new Promise((r) => setImmediate(r));
    }
    this.closed = true;
    this.appended.removeAllListeners();
    const thread = this.thread;
    this.thread = undefined;
    await thread?.terminate();
    if (this.db.isOpen) {
      await unwatch(this.path);
      this.db.close();
    }
  }
}

/**
 * The file's one writer: decides each group commit (planBatch) against the revisions and event
 * ids it holds, and writes it in one transaction. Runs on the store's thread or a thread of its own.
 */
class SqliteWriter {
  private readonly db: DatabaseSync;
  private readonly shared: SharedHeads;
  private lastPosition: number;
  /** Last revision of recently written streams: this is the file's only writer. */
  private readonly revisions = new LRUCache<string, number>({ max: MAX_CACHED_STREAMS });
  private readonly sql: {
    insert: StatementSync;
    revision: StatementSync;
    byId: StatementSync;
    saveSnapshot: StatementSync;
  };

  constructor(db: DatabaseSync, shared: SharedHeads) {
    this.db = db;
    this.shared = shared;
    this.lastPosition = headOf(db);
    this.sql = {
      insert: db.prepare(
        'INSERT INTO events (position, stream, revision, id, type, data, metadata, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      ),
      revision: db.prepare('SELECT max(revision) AS r FROM events WHERE stream = ?'),
      byId: db.prepare('SELECT stream, revision, position, created FROM events WHERE id = ?'),
      // Replaces the stored snapshot unless it is of a later revision (one of the same revision may
      // be of another shape, written before an upgrade).
      saveSnapshot: db.prepare(
        `INSERT INTO snapshots (stream, kind, shape, revision, state) VALUES (?, ?, ?, ?, ?)
         ON CONFLICT (stream, kind) DO UPDATE
           SET shape = excluded.shape, revision = excluded.revision, state = excluded.state
           WHERE excluded.revision >= snapshots.revision`,
      ),
    };
  }

  /** Snapshots that waited for the writer together, in one transaction. */
  saveSnapshots(writes: SnapshotWrite[]): SnapshotsSaved {
    try {
      this.db.exec('BEGIN IMMEDIATE');
      for (const { stream, snapshot: s } of writes)
        this.sql.saveSnapshot.run(stream, s.kind, s.shape, s.revision, JSON.stringify(s.state));
      this.db.exec('COMMIT');
      return { saved: writes.length };
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      return { saved: writes.length, error: (err as Error).message };
    }
  }

  /** Batches that waited for the thread together: one transaction, an answer for each. */
  commitAll(batches: PendingAppend[][]): Committed[] {
    if (batches.length === 1) return [this.commit(batches[0]!)];
    const committed = this.commit(batches.flat());
    if ('error' in committed) return batches.map(() => committed);
    let at = 0;
    return batches.map((batch) => {
      at += batch.length;
      return { plans: committed.plans.slice(at - batch.length, at), created: committed.created };
    });
  }

  commit(batch: PendingAppend[]): Committed {
    try {
      return this.commitOrThrow(batch);
    } catch (err) {
      // Whatever failed (a lookup, the commit, a rollback), every caller of the batch hears of it.
      return { error: (err as Error).message, errcode: (err as { errcode?: number }).errcode };
    }
  }

  private commitOrThrow(batch: PendingAppend[]): Committed {
    const stored = new Map<string, StoredId>();
    for (const w of batch) {
      for (const e of w.events) {
        const row = this.sql.byId.get(e.id) as StoredId | undefined;
        if (row) stored.set(e.id, { ...row });
      }
    }
    const revisionOf = (stream: string) => {
      const cached = this.revisions.get(stream);
      if (cached !== undefined) return cached;
      const row = this.sql.revision.get(stream) as { r: number | null };
      return row.r ?? -1;
    };
    const now = Date.now();
    const plans = planBatch(batch, revisionOf, stored, this.lastPosition, now);
    try {
      this.db.exec('BEGIN IMMEDIATE');
      batch.forEach((w, i) => {
        const plan = plans[i]!;
        if (plan.kind !== 'write') return;
        w.events.forEach((e, j) => {
          this.sql.insert.run(
            plan.firstPosition + j,
            w.stream,
            plan.firstRevision + j,
            e.id,
            e.type,
            e.data as string,
            (e.metadata as { json: string }).json,
            now,
          );
        });
      });
      this.db.exec('COMMIT');
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      throw err;
    }
    batch.forEach((w, i) => {
      const plan = plans[i]!;
      if (plan.kind !== 'write') return;
      this.lastPosition = plan.result.position;
      this.revisions.set(w.stream, plan.result.nextRevision);
      this.shared.setRevision(w.stream, plan.result.nextRevision);
    });
    this.shared.setHead(this.lastPosition);
    return { plans: plans.map(toWire), created: now };
  }
}

const ignore = () => {};

/** Answers each append of a batch with its plan, or all of them with the batch's error. */
function answer(batch: Waiting[], committed: Committed): void {
  if ('error' in committed) {
    // SQLite's code crosses the thread with the message: a full disk or a read-only file is an
    // outage of the store (503), not a fault of ours.
    for (const w of batch)
      w.reject(Object.assign(new Error(committed.error), { errcode: committed.errcode }));
    return;
  }
  batch.forEach((w, i) => {
    const plan = committed.plans[i]!;
    if (plan.kind === 'write' || plan.kind === 'done') w.resolve(plan.result);
    else if (plan.kind === 'wrong') w.reject(new WrongExpectedRevisionError(...plan.args));
    else if (plan.kind === 'duplicate') w.reject(new DuplicateEventIdError(...plan.args));
    else w.reject(new Error(plan.message));
  });
}

const toWire = (plan: Planned): WirePlan => {
  if (plan.kind !== 'error') return plan;
  const e = plan.error;
  if (e instanceof WrongExpectedRevisionError)
    return { kind: 'wrong', args: [e.stream, e.expected, e.actual] };
  if (e instanceof DuplicateEventIdError) return { kind: 'duplicate', args: [e.stream, e.id] };
  return { kind: 'failed', message: e.message };
};

function openDatabase(path: string, synchronous: 'full' | 'normal'): DatabaseSync {
  // The busy timeout holds from the first statement on: switching to WAL waits for a connection
  // still letting go of the file (another process's, or one closing) instead of failing.
  const db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS });
  try {
    // Checkpoints run on a thread of their own (infra/checkpointer.ts), not in the writer's commits.
    db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = ${synchronous === 'normal' ? 'NORMAL' : 'FULL'};
             PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES};`);
    migrate(db);
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

const headOf = (db: DatabaseSync): number =>
  (db.prepare('SELECT coalesce(max(position), 0) AS p FROM events').get() as { p: number }).p;

function migrate(db: DatabaseSync): void {
  const { user_version: version } = db.prepare('PRAGMA user_version').get() as { user_version: number };
  for (let v = version; v < MIGRATIONS.length; v++) {
    db.exec('BEGIN IMMEDIATE');
    db.exec(MIGRATIONS[v]!);
    db.exec(`PRAGMA user_version = ${v + 1}`);
    db.exec('COMMIT');
  }
}

const toRecorded = (r: Row): RecordedEvent => ({
  id: r.id,
  type: r.type,
  stream: r.stream,
  revision: r.revision,
  position: r.position,
  data: JSON.parse(r.data),
  metadata: JSON.parse(r.metadata),
  created: r.created,
});

// The writer thread of a SqliteEventStore: commits the batches the store posts and the appends
// other threads send it directly (connectAppender), together, and tells the store of each commit
// (of the other threads' alone, up to newsLingerMs later, with the next).
if (!isMainThread && workerData?.sqliteWriter) {
  const { path, synchronous, heads, newsLingerMs } = workerData.sqliteWriter as {
    path: string;
    synchronous: 'full' | 'normal';
    heads: SharedArrayBuffer;
    newsLingerMs: number;
  };
  const writer = new SqliteWriter(openDatabase(path, synchronous), new SharedHeads(heads));
  const store = parentPort!;
  // The other threads' appends waiting for the next commit.
  const direct: Waiting[] = [];
  let commitScheduled = false;
  const appends = new ThreadAppends();
  errorsCrossThreads(WrongExpectedRevisionError, DuplicateEventIdError);

  // News of commits of the other threads' appends alone, held up to newsLingerMs for the next.
  const held: CommitNews[] = [];
  let lingering: NodeJS.Timeout | undefined;
  const sendNews = () => {
    clearTimeout(lingering);
    lingering = undefined;
    if (held.length > 0) store.postMessage(held.splice(0));
  };

  type FromStore = PendingAppend[] | { snapshot: SnapshotWrite } | { appender: MessagePort } | { news: true };
  const commitWaiting = (first?: FromStore) => {
    const batches: PendingAppend[][] = [];
    const snapshots: SnapshotWrite[] = [];
    let hasten = false;
    for (let m = first ?? receiveMessageOnPort(store)?.message; m; m = receiveMessageOnPort(store)?.message) {
      if (Array.isArray(m)) batches.push(m);
      else if ('snapshot' in m) snapshots.push(m.snapshot);
      else if ('news' in m) hasten = true;
      else connect(m.appender);
    }
    const own = batches.length;
    const theirs = direct.splice(0);
    if (theirs.length > 0)
      batches.push(theirs.map(({ stream, events, expected }) => ({ stream, events, expected })));
    if (batches.length > 0) {
      const committed = writer.commitAll(batches);
      const news: CommitNews[] = committed.map((c, i) =>
        i < own ? c : { appended: batches[i]!, committed: c },
      );
      held.push(...news);
      if (own > 0 || newsLingerMs <= 0) sendNews();
      else lingering ??= setTimeout(sendNews, newsLingerMs);
      if (theirs.length > 0) answer(theirs, committed.at(-1)!);
    }
    if (hasten) sendNews();
    if (snapshots.length > 0) store.postMessage(writer.saveSnapshots(snapshots));
  };

  const connect = (port: MessagePort) => {
    const thread = new ThreadChannel(port);
    appends.join(thread);
    const append = (stream: string, events: NewEvent[], expected: ExpectedRevision) =>
      appends.append(thread, stream, events, () => {
        const { promise, resolve, reject } = Promise.withResolvers<AppendResult>();
        direct.push({ stream, events, expected, resolve, reject });
        if (!commitScheduled) {
          commitScheduled = true;
          setImmediate(() => {
            commitScheduled = false;
            commitWaiting();
          });
        }
        return promise;
      });
    thread.serve('writer', { append }, ['append']);
    port.on('close', () => {
      appends.leave(thread);
      thread.close(new Error('the appending thread is gone'));
    });
  };

  store.on('message', (first: FromStore) => commitWaiting(first));
}
