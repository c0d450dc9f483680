// The embedded profile's event log on disk, in the derived-state file (infra/sqlite.ts): a row per
// event with its body, and an index per documented query (all of an owner's events, by type, by
// device), each in the log's order. Owners, types and devices are numbered (event_log_names, a row
// per name: sized by the fleet), so the indexes' keys are a few integers instead of their PRNs:
// half the cost of an append, and a third less disk, with a deep history. Past the retention, rows
// go from the oldest inserted on, a chunk at a time once a minute; reads never show an expired
// event meanwhile. The log's position (a tail's) is `pos`: this process is the file's one writer,
// so rows take positions in the order they are appended (never one again: AUTOINCREMENT), and an
// append is read by the tail only once it is done.
import type { StatementSync } from 'node:sqlite';
import { LRUCache } from 'lru-cache';
import type { DerivedDatabase } from '../../infra/sqlite.ts';
import type { WebhookEvent } from './derive.ts';
import type { EventLog, EventQuery, LogPosition, Tail } from './eventlog.ts';

const MIGRATIONS = [
  `CREATE TABLE event_log (
     id              TEXT    NOT NULL UNIQUE,
     owner           TEXT    NOT NULL,
     type            TEXT    NOT NULL,
     resource_prn    TEXT    NOT NULL,
     score           INTEGER NOT NULL,
     source_position INTEGER NOT NULL,
     sequence        INTEGER NOT NULL,
     body            TEXT    NOT NULL
   ) STRICT;
   CREATE INDEX event_log_by_owner ON event_log (owner, score, source_position, sequence);
   CREATE INDEX event_log_by_type ON event_log (owner, type, score, source_position, sequence);
   CREATE INDEX event_log_by_device ON event_log (owner, resource_prn, score, source_position, sequence);`,
  // Names numbered: a log written with them as text is converted once (about 5 s a million events).
  `CREATE TABLE event_log_names (n INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE) STRICT;
   INSERT INTO event_log_names (name)
     SELECT owner FROM event_log UNION SELECT type FROM event_log UNION SELECT resource_prn FROM event_log;
   CREATE TABLE event_log_numbered (
     pos             INTEGER PRIMARY KEY AUTOINCREMENT,
     id              TEXT    NOT NULL UNIQUE,
     owner           INTEGER NOT NULL,
     type            INTEGER NOT NULL,
     resource        INTEGER NOT NULL,
     score           INTEGER NOT NULL,
     source_position INTEGER NOT NULL,
     sequence        INTEGER NOT NULL,
     body            TEXT    NOT NULL
   ) STRICT;
   INSERT INTO event_log_numbered (pos, id, owner, type, resource, score, source_position, sequence, body)
     SELECT e.rowid, e.id, o.n, t.n, r.n, e.score, e.source_position, e.sequence, e.body FROM event_log e
       JOIN event_log_names o ON o.name = e.owner
       JOIN event_log_names t ON t.name = e.type
       JOIN event_log_names r ON r.name = e.resource_prn
     ORDER BY e.rowid;
   DROP TABLE event_log;
   ALTER TABLE event_log_numbered RENAME TO event_log;
   CREATE INDEX event_log_by_owner ON event_log (owner, score, source_position, sequence);
   CREATE INDEX event_log_by_type ON event_log (owner, type, score, source_position, sequence);
   CREATE INDEX event_log_by_device ON event_log (owner, resource, score, source_position, sequence);`,
];

/** The log's order (see eventlog.ts): the event's time in ms, then its change's store position,
 * then its place among that change's events. */
const ORDER = 'ORDER BY score DESC, source_position DESC, sequence DESC';
const TRIM_EVERY_MS = 60_000;
const TRIM_CHUNK = 5000;
/** Rows a tail reads at most, of every account: no index by account and rowid to keep up at every
 * append, so a tail reads the rows appended since its last read and keeps those of its account. */
const TAIL_SCAN = 2000;

export class SqliteEventLog implements EventLog {
  private readonly d: DerivedDatabase;
  private readonly retentionMs: number;
  private readonly sql: Record<string, StatementSync>;
  /** Queries by filter: type and device given or not, four statements for items and four for totals. */
  private readonly queries = new Map<string, { items: StatementSync; total: StatementSync }>();
  private trimmed = 0;
  /** Names' numbers (bounded: HUB_STATE_CACHE_ENTRIES); a name numbered in a transaction that rolls
   * back is forgotten with it. */
  private readonly numbers: LRUCache<string, number>;

  constructor(derived: DerivedDatabase, o: { retentionMs: number; cachedNames?: number }) {
    this.d = derived;
    this.retentionMs = o.retentionMs;
    this.numbers = new LRUCache({ max: o.cachedNames ?? 10_000 });
    derived.migrate('eventlog', MIGRATIONS);
    derived.beforeCommit({ flush: () => {}, discard: () => this.numbers.clear() });
    const db = derived.db;
    this.sql = {
      insert: db.prepare(
        `INSERT INTO event_log (id, owner, type, resource, score, source_position, sequence, body)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`,
      ),
      number: db.prepare('SELECT n FROM event_log_names WHERE name = ?'),
      newNumber: db.prepare('INSERT INTO event_log_names (name) VALUES (?) RETURNING n'),
      get: db.prepare('SELECT body, owner, score FROM event_log WHERE id = ?'),
      head: db.prepare('SELECT coalesce(max(pos), 0) AS n FROM event_log'),
      tail: db.prepare(
        'SELECT pos AS n, owner, score, body FROM event_log WHERE pos > ? ORDER BY pos LIMIT ?',
      ),
      trim: db.prepare(
        'DELETE FROM event_log WHERE pos IN (SELECT pos FROM event_log ORDER BY pos LIMIT ?) AND score < ?',
      ),
    };
  }

  /** The name's number; undefined when it has none (nothing was logged under it), unless `create`. */
  private numberOf(name: string, create: true): number;
  private numberOf(name: string, create?: false): number | undefined;
  private numberOf(name: string, create = false): number | undefined {
    let n = this.numbers.get(name);
    if (n !== undefined) return n;
    n = (this.sql.number!.get(name) as { n: number } | undefined)?.n;
    if (n === undefined && create) n = (this.sql.newNumber!.get(name) as { n: number }).n;
    if (n !== undefined) this.numbers.set(name, n);
    return n;
  }

  async append(events: WebhookEvent[]): Promise<void> {
    const now = Date.now();
    const horizon = now - this.retentionMs;
    if (events.length > 0) {
      try {
        this.d.transaction(() => {
          for (const e of events) {
            const score = e.created * 1000;
            if (score < horizon) continue;
            this.sql.insert!.run(
              e.id,
              this.numberOf(e.owner, true),
              this.numberOf(e.type, true),
              this.numberOf(e.resource_prn, true),
              score,
              e.source_position,
              e.sequence,
              JSON.stringify(e),
            );
          }
        });
      } catch (err) {
        this.numbers.clear(); // numbers given in the batch went with it
        throw err;
      }
    }
    if (now - this.trimmed >= TRIM_EVERY_MS) {
      this.trimmed = now;
      this.trim(horizon);
    }
  }

  /** Deletes expired events from the oldest inserted on, while whole chunks of them are expired
   * (insertion follows derivation, nearly the log's order): a late event waits for its turn. */
  private trim(horizon: number): void {
    for (let i = 0; i < 20; i++) {
      const { changes } = this.sql.trim!.run(TRIM_CHUNK, horizon);
      if (Number(changes) < TRIM_CHUNK) return;
    }
  }

  private query(q: EventQuery): { items: StatementSync; total: StatementSync } {
    const name = `${q.type ? 't' : ''}${q.resource_prn ? 'r' : ''}`;
    let stmts = this.queries.get(name);
    if (!stmts) {
      const where = `owner = ?${q.type ? ' AND type = ?' : ''}${q.resource_prn ? ' AND resource = ?' : ''} AND score >= ? AND score < ?`;
      stmts = {
        items: this.d.db.prepare(`SELECT body FROM event_log WHERE ${where} ${ORDER} LIMIT ? OFFSET ?`),
        total: this.d.db.prepare(`SELECT count(*) AS n FROM event_log WHERE ${where}`),
      };
      this.queries.set(name, stmts);
    }
    return stmts;
  }

  async list(owner: string, q: EventQuery): Promise<{ items: WebhookEvent[]; total: number }> {
    // A name never logged has no number, and no events.
    const names = [owner, ...(q.type ? [q.type] : []), ...(q.resource_prn ? [q.resource_prn] : [])];
    const args: number[] = [];
    for (const name of names) {
      const n = this.numberOf(name);
      if (n === undefined) return { items: [], total: 0 };
      args.push(n);
    }
    args.push(Math.max(q.since ?? 0, Date.now() - this.retentionMs), q.until ?? Number.MAX_SAFE_INTEGER);
    const { items, total } = this.query(q);
    const rows = items.all(...args, q.limit, q.skip) as { body: string }[];
    return {
      items: rows.map((r) => JSON.parse(r.body) as WebhookEvent),
      total: (total.get(...args) as { n: number }).n,
    };
  }

  async get(owner: string, id: string): Promise<WebhookEvent | undefined> {
    const row = this.sql.get!.get(id) as { body: string; owner: number; score: number } | undefined;
    if (!row || row.owner !== this.numberOf(owner) || row.score < Date.now() - this.retentionMs)
      return undefined;
    return JSON.parse(row.body) as WebhookEvent;
  }

  async head(): Promise<LogPosition> {
    return String((this.sql.head!.get() as { n: number | bigint }).n);
  }

  async tail(owner: string, after: LogPosition, limit: number): Promise<Tail> {
    // The row's pos (a PostgreSQL position's transaction number means nothing here).
    const from = BigInt(after.split('.')[0]!);
    const ownerNumber = this.numberOf(owner);
    const rows = this.sql.tail!.all(from, TAIL_SCAN) as {
      n: number;
      owner: number;
      score: number;
      body: string;
    }[];
    const horizon = Date.now() - this.retentionMs;
    const items: Tail['items'] = [];
    let last = from;
    for (const row of rows) {
      if (row.owner === ownerNumber && row.score >= horizon) {
        if (items.length === limit) return { items, position: String(last), more: true };
        items.push({ event: JSON.parse(row.body) as WebhookEvent, position: String(row.n) });
      }
      last = BigInt(row.n);
    }
    return { items, position: String(last), more: rows.length === TAIL_SCAN };
  }
}
