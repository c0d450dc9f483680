// Embedded event store: one SQLite file (node:sqlite) in WAL mode. One writer per file, and
// appends are group-committed: everything that arrives while a commit runs goes into the next
// transaction, so 256 concurrent appenders cost a handful of fsyncs, not 256.
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import {
  type AppendResult,
  catchUpSubscription,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  planBatch,
  type RecordedEvent,
  type StoredId,
  type Subscription,
  serialise,
  type Waiting,
} from './port.ts';

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
  /** How many of the newest events readAll serves from memory. */
  tailEvents?: number;
}

export class SqliteEventStore implements EventStore {
  readonly kind = 'sqlite';
  readonly exclusiveWriter = true;
  private readonly db: DatabaseSync;
  private readonly queue: Waiting[] = [];
  private flushing = false;
  private lastPosition: number;
  /**
   * The newest events, contiguous by position, parsed once at commit: every in-process follower
   * (projections, mailer, …) reads each new event, and being the file's only writer this store
   * knows them without reading them back. Older positions are read from the file. The events are
   * shared by the readers, which treat them as read-only (projections are pure functions).
   */
  private readonly tail: RecordedEvent[] = [];
  private readonly tailEvents: number;
  private readonly appended = new EventEmitter();
  private readonly maxBatch: number;
  /** Last revision of recently written streams: this process is the file's only writer. */
  private readonly revisions = new Map<string, number>();
  private static readonly MAX_CACHED_STREAMS = 100_000;
  private readonly sql: {
    insert: StatementSync;
    revision: StatementSync;
    byId: StatementSync;
    readStream: StatementSync;
    readAll: StatementSync;
  };

  constructor(path: string, options: SqliteOptions = {}) {
    if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
    this.db = new DatabaseSync(path);
    this.db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = ${options.synchronous === 'normal' ? 'NORMAL' : 'FULL'};
                  PRAGMA busy_timeout = 5000;`);
    migrate(this.db);
    this.maxBatch = options.maxBatch ?? 1024;
    this.tailEvents = options.tailEvents ?? 20_000;
    this.appended.setMaxListeners(0);
    this.sql = {
      insert: this.db.prepare(
        'INSERT INTO events (position, stream, revision, id, type, data, metadata, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
      ),
      revision: this.db.prepare('SELECT max(revision) AS r FROM events WHERE stream = ?'),
      byId: this.db.prepare('SELECT stream, revision, position, created FROM events WHERE id = ?'),
      readStream: this.db.prepare(
        'SELECT * FROM events WHERE stream = ? AND revision >= ? ORDER BY revision LIMIT ?',
      ),
      readAll: this.db.prepare('SELECT * FROM events WHERE position > ? ORDER BY position LIMIT ?'),
    };
    const head = this.db.prepare('SELECT coalesce(max(position), 0) AS p FROM events').get() as { p: number };
    this.lastPosition = head.p;
  }

  append(stream: string, events: NewEvent[], expected: ExpectedRevision = 'any'): Promise<AppendResult> {
    if (!this.db.isOpen) return Promise.reject(new Error('the event store is closed'));
    let serialised: NewEvent[];
    try {
      serialised = serialise(events);
    } catch (err) {
      return Promise.reject(err);
    }
    return new Promise((resolve, reject) => {
      this.queue.push({ stream, events: serialised, expected, resolve, reject });
      if (!this.flushing) {
        this.flushing = true;
        setImmediate(() => this.flush());
      }
    });
  }

  /** One transaction for everything queued; new arrivals wait for the next one. */
  private flush(): void {
    const batch = this.queue.splice(0, this.maxBatch);
    try {
      if (batch.length > 0) this.commit(batch);
    } finally {
      if (this.queue.length > 0) setImmediate(() => this.flush());
      else this.flushing = false;
    }
  }

  private commit(batch: Waiting[]): void {
    try {
      this.commitOrThrow(batch);
    } catch (err) {
      // Whatever failed (a lookup, the commit, a rollback), every caller of the batch hears of it.
      for (const w of batch) w.reject(err as Error);
    }
  }

  private commitOrThrow(batch: Waiting[]): void {
    const stored = new Map<string, StoredId>();
    for (const w of batch) {
      for (const e of w.events) {
        const row = this.sql.byId.get(e.id) as StoredId | undefined;
        if (row) stored.set(e.id, row);
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
    let wrote = false;
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
          wrote = true;
        });
      });
      this.db.exec('COMMIT');
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      throw err;
    }
    const written: RecordedEvent[] = [];
    batch.forEach((w, i) => {
      const plan = plans[i]!;
      if (plan.kind !== 'write') return;
      w.events.forEach((e, j) => {
        written.push({
          id: e.id,
          type: e.type,
          stream: w.stream,
          revision: plan.firstRevision + j,
          position: plan.firstPosition + j,
          data: JSON.parse(e.data as string),
          metadata: JSON.parse((e.metadata as { json: string }).json),
          created: now,
        });
      });
      this.lastPosition = plan.result.position;
      this.revisions.delete(w.stream); // re-insert: the map's order is the eviction order
      this.revisions.set(w.stream, plan.result.nextRevision);
    });
    while (this.revisions.size > SqliteEventStore.MAX_CACHED_STREAMS) {
      this.revisions.delete(this.revisions.keys().next().value as string);
    }
    written.sort((a, b) => a.position - b.position);
    this.tail.push(...written);
    if (this.tail.length > this.tailEvents) this.tail.splice(0, this.tail.length - this.tailEvents);
    batch.forEach((w, i) => {
      const plan = plans[i]!;
      if (plan.kind === 'error') w.reject(plan.error);
      else w.resolve(plan.result);
    });
    if (wrote) this.appended.emit('append');
  }

  async readStream(stream: string, fromRevision = 0, max = 1000): Promise<RecordedEvent[]> {
    return (this.sql.readStream.all(stream, fromRevision, max) as Row[]).map(toRecorded);
  }

  async readAll(after = 0, max = 1000): Promise<RecordedEvent[]> {
    const first = this.tail[0]?.position;
    if (first !== undefined && after + 1 >= first) {
      const from = after + 1 - first;
      return this.tail.slice(from, from + max);
    }
    return (this.sql.readAll.all(after, max) as Row[]).map(toRecorded);
  }

  subscribe(after = 0, options: { batchSize?: number } = {}): Subscription {
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

  async head(): Promise<number> {
    return this.lastPosition;
  }

  async close(): Promise<void> {
    while (this.flushing) await new Promise((r) => setImmediate(r));
    this.appended.removeAllListeners();
    if (this.db.isOpen) this.db.close();
  }
}

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
