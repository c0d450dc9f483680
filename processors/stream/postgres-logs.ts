// The distributed profile's logs in PostgreSQL: the account event log (GET /webhooks/events) and
// the delivery attempt records (GET /webhooks/{id}/deliveries, an event's deliveries), each kept
// for HUB_EVENT_LOG_RETENTION_DAYS. They grow with traffic × retention, so they live on disk,
// in the database HUB_POSTGRES_URL names (whatever the event store is), and not in Redis, which
// keeps what the fleet and the work in flight size: read models, actor states, the schedule.
//
// Each table is range-partitioned by its rows' time (an event's `created`, an attempt's start), a
// partition a day: the retention drops whole partitions (no row-by-row deletes, no dead rows to
// vacuum), and every read carries the retention's bound, which skips a partition past it that is
// not dropped yet. The processes that write make the partitions ahead and drop the old ones, at
// their first write and then hourly, under an advisory lock (any number of them may share it); a
// row whose partition is missing (a clock ahead, a partition dropped by a process whose clock is)
// has it made before its insert.
//
// Appends are idempotent by id: the primary key is (id, time), as a partitioned table's unique keys
// must hold its partition key, and an id always comes with one time (an event's id is derived from
// its change, whose time is fixed; an attempt's id is made once). A batch is one
// INSERT … SELECT FROM unnest(…), its counts upserted by the same statement; one that meets an id
// there already is sent again without the ids found there. At most two are in flight per table and
// process, and the appends made meanwhile go together in the next.
//
// Commits do not wait for the WAL to be flushed (synchronous_commit off, for these connections
// only): a crash of PostgreSQL's host may lose the last moments of log records (never a
// corruption), as Redis's appendfsync everysec did for them before. A crash of the hub loses none.
//
// This file: the pool, the tables and their partitions, and the grouped inserts both logs write
// with. The logs: eventlog-postgres.ts and delivery/postgres.ts; the upgrade from Redis:
// postgres-logs-move.ts.
import pg from 'pg';
import type { Logger } from '../../infra/telemetry.ts';

const DAY_MS = 86_400_000;
/** Serialises the logs' DDL across processes (the event store's locks are 0x68756265 and the next). */
const LOGS_LOCK = 0x6875626c; // "hubl"
/** Partitions made ahead of the current one. */
const AHEAD = 2;
/** How often a writing process makes partitions ahead and drops old ones. */
const UPKEEP_MS = 3_600_000;
/** How long DDL waits for its table's lock: a partition made or dropped locks its parent, and
 * waiting behind a long read it would hold up every read and write queued behind it. */
const DDL_LOCK_TIMEOUT = '5s';
/** `until` when none is given (a bigint bound). */
export const END_OF_TIME = Number.MAX_SAFE_INTEGER;
/** How often an append is sent again after ids found there are left out (see PostgresLogs.append). */
const APPEND_TRIES = 5;
/** INSERTs in flight per table and process. */
const PARALLEL_INSERTS = 2;
/** Rows that go at once, however long their linger (see GroupedInserts). */
const LINGER_FULL_ROWS = 256;

type Table = 'hub_event_log' | 'hub_attempt_log' | 'hub_log_counts';
const TABLES: Table[] = ['hub_event_log', 'hub_attempt_log', 'hub_log_counts'];
/** The width of a count's bucket (or the partition's, if narrower): a total counts the rows of at
 * most two buckets, at its ends, one by one. */
const BUCKET_MS = 3_600_000;

/**
 * Versioned, each applied once, in order, under LOGS_LOCK, recorded in hub_log_migrations (apart
 * from the event store's own, which may be another database's). Identifiers compare as bytes
 * (COLLATE "C"): faster than a language's rules, and the order of ids the Redis log had.
 *
 * The indexes are those of the documented queries, each ordered as its query reads: the event log
 * by account, then by type, by device, by device and type (as Redis's four sorted sets), each by
 * time then store order; the attempts by subscription (all, by status, and the failures apart, as
 * `failed` is two statuses) by start, and by event.
 *
 * Totals come from hub_log_counts: rows added per key (an account, an account and a type; a
 * subscription, a subscription and a status filter) and hour, written by the statement that adds
 * the rows (counting only those it added), so that a total reads the hours wholly inside its range
 * there and counts rows only in the two hours at its ends: counting an account's rows one by one
 * took 0.55 s for 900,000 of them. A device's events are counted one by one (a device's share).
 */
const MIGRATIONS = [
  `CREATE TABLE hub_event_log (
     id              text COLLATE "C" NOT NULL,
     at              bigint NOT NULL,
     owner           text COLLATE "C" NOT NULL,
     type            text COLLATE "C" NOT NULL,
     resource_prn    text COLLATE "C" NOT NULL,
     source_position bigint NOT NULL,
     sequence        int NOT NULL,
     body            text NOT NULL,
     PRIMARY KEY (id, at)
   ) PARTITION BY RANGE (at);
   CREATE INDEX hub_event_log_owner ON hub_event_log (owner, at, source_position, sequence);
   CREATE INDEX hub_event_log_type ON hub_event_log (owner, type, at, source_position, sequence);
   CREATE INDEX hub_event_log_resource ON hub_event_log (owner, resource_prn, at, source_position, sequence);
   CREATE INDEX hub_event_log_resource_type ON hub_event_log (owner, resource_prn, type, at, source_position, sequence);
   CREATE TABLE hub_attempt_log (
     id              text COLLATE "C" NOT NULL,
     started         bigint NOT NULL,
     subscription_id text COLLATE "C" NOT NULL,
     event_id        text COLLATE "C" NOT NULL,
     owner           text COLLATE "C" NOT NULL,
     status          text COLLATE "C" NOT NULL,
     body            text NOT NULL,
     PRIMARY KEY (id, started)
   ) PARTITION BY RANGE (started);
   CREATE INDEX hub_attempt_log_subscription ON hub_attempt_log (subscription_id, started, id);
   CREATE INDEX hub_attempt_log_status ON hub_attempt_log (subscription_id, status, started, id);
   CREATE INDEX hub_attempt_log_failed ON hub_attempt_log (subscription_id, started, id) WHERE status <> 'succeeded';
   CREATE INDEX hub_attempt_log_event ON hub_attempt_log (event_id);
   CREATE TABLE hub_log_counts (
     key    text COLLATE "C" NOT NULL,
     bucket bigint NOT NULL,
     n      bigint NOT NULL,
     PRIMARY KEY (key, bucket)
   ) PARTITION BY RANGE (bucket)`,
  // The event log's own order, for its tail (GET /webhooks/events/stream): the transaction that
  // appended each event. Rows logged before have none, and no tail reads them.
  `ALTER TABLE hub_event_log ADD COLUMN logged xid8;
   ALTER TABLE hub_event_log ALTER COLUMN logged SET DEFAULT pg_current_xact_id();
   CREATE INDEX hub_event_log_logged ON hub_event_log (owner, logged, id)`,
  // Within one transaction, the order the events were derived in (their change's position, then
  // their place among its events), not their ids' order.
  `DROP INDEX hub_event_log_logged;
   CREATE INDEX hub_event_log_tail ON hub_event_log (owner, logged, source_position, sequence, id)`,
  // An attempt's request body beside its record rather than escaped inside it (every quote of the
  // payload escaped: the record's JSON was about a tenth of the dispatcher's main thread). Rows
  // recorded before have none: their body is in the record.
  `ALTER TABLE hub_attempt_log ADD COLUMN request_body text`,
];

interface Partition {
  name: string;
  from: number;
  to: number;
}

/** A partition's bounds as the catalog prints them: FOR VALUES FROM ('…') TO ('…'). */
const BOUND = /FROM \('?(-?\d+)'?\) TO \('?(-?\d+)'?\)/;

/** `hub_event_log_20261127` for a day, `…_20261127t101500` for a partition starting within one. */
function partitionName(table: Table, from: number): string {
  const stamp = new Date(from).toISOString().replace(/[-:]/g, '').toLowerCase();
  return `${table}_${from % DAY_MS === 0 ? stamp.slice(0, 8) : stamp.slice(0, 15)}`;
}

export interface PostgresLogsOptions {
  /** HUB_POSTGRES_URL; `?schema=<name>` keeps the tables in a schema other than public. */
  url: string;
  retentionMs: number;
  /** Connections of the pool (HUB_POSTGRES_LOG_CONNECTIONS). */
  connections?: number;
  /** Width of a partition, ms, at least a second: a day (tests use seconds). */
  partitionMs?: number;
  /** How long an append may wait for more to go in its statement, ms (HUB_POSTGRES_LOG_LINGER_MS;
   * default 0: at once). */
  lingerMs?: number;
  logger?: Logger;
}

/** The pool and the partitioned tables both logs share in a process. */
export class PostgresLogs {
  readonly retentionMs: number;
  /** See PostgresLogsOptions.lingerMs: each log's appends wait this long (see `appends`). */
  private readonly lingerMs: number;
  /** The width of a count's bucket: an hour, or the partition's if narrower (tests). */
  readonly bucketMs: number;
  private readonly partitionMs: number;
  private readonly schema: string;
  private readonly pool: pg.Pool;
  private readonly logger: Logger | undefined;
  private migrated: Promise<void> | undefined;
  /** Each table's partitions, as last read from the catalog or made here. */
  private readonly partitions = new Map<Table, Partition[]>();
  private upkept: Promise<void> | undefined;
  private upkeep: NodeJS.Timeout | undefined;
  /** Each log's grouped appends (see close). */
  private readonly groups: { flush(): Promise<void> }[] = [];

  constructor(o: PostgresLogsOptions) {
    const url = new URL(o.url);
    this.schema = url.searchParams.get('schema') ?? 'public';
    url.searchParams.delete('schema');
    if (!/^[a-z_][a-z0-9_]*$/.test(this.schema)) throw new Error(`invalid schema name ${this.schema}`);
    this.retentionMs = o.retentionMs;
    this.lingerMs = o.lingerMs ?? 0;
    this.partitionMs = o.partitionMs ?? DAY_MS;
    if (this.partitionMs < 1000 || this.partitionMs % 1000 !== 0)
      throw new Error('a partition spans whole seconds');
    this.bucketMs = this.partitionMs % BUCKET_MS === 0 ? BUCKET_MS : this.partitionMs;
    this.logger = o.logger;
    this.pool = new pg.Pool({
      connectionString: url.href,
      max: o.connections ?? 4,
      options: `-c search_path=${this.schema} -c synchronous_commit=off`,
    });
    this.pool.on('error', () => {}); // an idle client's error is seen again by the next query
  }

  /** The rows of a read, the tables made first if no process has made them yet. */
  async read<R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]): Promise<R[]> {
    await this.ready();
    return (await this.pool.query<R>({ name, text, values })).rows;
  }

  /**
   * How many rows of `table` match `where` (over `values`, from $1) with `time` from `lo` to `hi`
   * (exclusive). With a `key`, the counts of the whole buckets between them and the rows of the
   * bucket parts at the ends; without, the rows.
   */
  async count(
    name: string,
    table: Table,
    time: string,
    where: string,
    values: unknown[],
    range: { lo: number; hi: number; key?: string },
  ): Promise<number> {
    const { lo, hi, key } = range;
    const rows = (from: string, to: string) =>
      `(SELECT count(*) FROM ${table} WHERE ${where} AND ${time} >= $${from} AND ${time} < $${to})`;
    const n = values.length;
    if (key === undefined) {
      const [row] = await this.read<{ n: string }>(
        `${name}-rows`,
        `SELECT ${rows(`${n + 1}`, `${n + 2}`)} AS n`,
        [...values, lo, hi],
      );
      return Number(row!.n);
    }
    // The whole buckets [first, last); the rows of [lo, first) and [last, hi). Within one bucket (or
    // two parts of adjacent ones), the rows of [lo, hi) alone.
    const b = this.bucketMs;
    let first = Math.ceil(lo / b) * b;
    let last = hi >= END_OF_TIME ? hi : Math.floor(hi / b) * b;
    if (first >= last) first = last = hi;
    const [row] = await this.read<{ n: string }>(
      `${name}-buckets`,
      `SELECT (SELECT coalesce(sum(n), 0) FROM hub_log_counts WHERE key = $${n + 1} AND bucket >= $${n + 3} AND bucket < $${n + 4})
         + ${rows(`${n + 2}`, `${n + 3}`)} + ${rows(`${n + 4}`, `${n + 5}`)} AS n`,
      [...values, key, lo, first, last, hi],
    );
    return Number(row!.n);
  }

  /** A log's appends, grouped (GroupedInserts, with this pool's linger): each group one statement
   * (see `append`). */
  appends<Row extends unknown[]>(log: LogRows<Row>): GroupedInserts<Row> {
    const inserts = new GroupedInserts<Row>((rows) => this.append(log, rows), this.lingerMs);
    this.groups.push(inserts);
    return inserts;
  }

  /**
   * Rows added to a log and counted, in one statement: a plain INSERT, and their counts upserted.
   * A row whose id is there already (a batch derived again after a crash or a rebalance) fails the
   * statement whole; the ids found there are then left out and the rest sent again, so that each
   * row is added and counted once. (Measured: ON CONFLICT DO NOTHING, the counts made from its
   * RETURNING by the statement, cost PostgreSQL about a fifth more per row; docs/benchmarks.md.)
   */
  private async append<Row extends unknown[]>(log: LogRows<Row>, rows: Row[]): Promise<void> {
    for (let tries = 1; ; tries++) {
      try {
        const times = rows.map((r) => r[1] as number);
        return await this.insert(log.table, times, appendStatement(log, rows, this.bucketMs));
      } catch (err) {
        if ((err as { code?: string }).code !== '23505' || tries >= APPEND_TRIES) throw err; // not "duplicate key"
      }
      const [id, time] = log.columns;
      const there = await this.read<{ id: string }>(
        `${log.name}-there`,
        `SELECT ${id![0]} AS id FROM ${log.table}
          WHERE (${id![0]}, ${time![0]}) IN (SELECT * FROM unnest($1::text[], $2::bigint[]))`,
        [rows.map((r) => r[0]), rows.map((r) => r[1])],
      );
      const ids = new Set(there.map((r) => r.id));
      rows = rows.filter((r) => !ids.has(r[0] as string));
      if (rows.length === 0) return;
    }
  }

  /** An insert into `table` (and the counts) of rows at `times`, their partitions made first. A
   * partition dropped since this process looked (by one whose clock is ahead) is made again, and the
   * insert sent again. */
  private async insert(table: Table, times: number[], query: pg.QueryConfig): Promise<void> {
    const tables: Table[] = [table, 'hub_log_counts'];
    await this.ready();
    if (!this.upkept) {
      const upkeep = () =>
        this.upkeepNow().catch((err: Error) =>
          this.logger?.warn(
            { err: err.message },
            'event and delivery logs: partitions not made ahead or dropped; tried again in an hour',
          ),
        );
      this.upkept = upkeep();
      this.upkeep = setInterval(upkeep, UPKEEP_MS);
      this.upkeep.unref();
    }
    // The first upkeep is waited for once (failed, the insert still makes what it needs).
    await this.upkept;
    for (const t of tables) await this.ensure(t, times);
    try {
      await this.pool.query(query);
    } catch (err) {
      if ((err as { code?: string }).code !== '23514') throw err; // not "no partition … found for row"
      for (const [i, t] of tables.entries()) await this.ensure(t, times, i === 0);
      await this.pool.query(query);
    }
  }

  /** Whether PostgreSQL answers (readiness). */
  async ping(): Promise<void> {
    await this.pool.query('SELECT 1');
  }

  /** The tables made, by this process or another; the database's error otherwise. */
  ready(): Promise<void> {
    this.migrated ??= this.migrate().catch((err: unknown) => {
      this.migrated = undefined; // tried again at the next call (PostgreSQL was down)
      throw err;
    });
    return this.migrated;
  }

  private async migrate(): Promise<void> {
    const client = await this.pool.connect();
    try {
      const version = async () => {
        const made = await client.query<{ t: string | null }>(
          "SELECT to_regclass('hub_log_migrations')::text AS t",
        );
        if (!made.rows[0]!.t) return 0;
        const { rows } = await client.query<{ v: number | null }>(
          'SELECT max(version) AS v FROM hub_log_migrations',
        );
        return rows[0]!.v ?? 0;
      };
      // Most starts find the tables made: no lock for them.
      if ((await version()) >= MIGRATIONS.length) {
        client.release();
        return;
      }
      try {
        await client.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      } catch (err) {
        // Made meanwhile by another process (the event store's migration, under its own lock).
        if ((err as { code?: string }).code !== '23505') throw err;
      }
      await client.query('BEGIN');
      await client.query('SELECT pg_advisory_xact_lock($1)', [LOGS_LOCK]);
      await client.query(
        'CREATE TABLE IF NOT EXISTS hub_log_migrations (version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())',
      );
      for (let v = await version(); v < MIGRATIONS.length; v++) {
        await client.query(MIGRATIONS[v]!);
        await client.query('INSERT INTO hub_log_migrations (version) VALUES ($1)', [v + 1]);
      }
      await client.query('COMMIT');
      client.release();
    } catch (err) {
      client.release(err as Error); // discarded: it may hold an aborted transaction
      throw err;
    }
  }

  private async readPartitions(client: pg.PoolClient | pg.Pool = this.pool): Promise<void> {
    const { rows } = await client.query<{ parent: Table; name: string; bound: string }>(
      `SELECT p.relname AS parent, c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
       WHERE p.relnamespace = $1::regnamespace AND p.relname = ANY($2)`,
      [this.schema, TABLES],
    );
    for (const table of TABLES) this.partitions.set(table, []);
    for (const { parent, name, bound } of rows) {
      const m = BOUND.exec(bound);
      if (m) this.partitions.get(parent)!.push({ name, from: Number(m[1]), to: Number(m[2]) });
    }
  }

  /** Makes the partitions rows at `times` need, unless known; `fresh`: the catalog read again. */
  private async ensure(table: Table, times: number[], fresh = false): Promise<void> {
    if (fresh || !this.partitions.has(table)) await this.readPartitions();
    const known = this.partitions.get(table)!;
    const missing = new Set<number>();
    let last: Partition | undefined;
    for (const t of times) {
      if (last && t >= last.from && t < last.to) continue;
      last = known.find((p) => t >= p.from && t < p.to);
      if (!last) missing.add(t - (((t % this.partitionMs) + this.partitionMs) % this.partitionMs));
    }
    if (missing.size > 0) await this.ddl((client) => this.make(client, table, [...missing]));
  }

  /** DDL in one transaction under LOGS_LOCK, the partitions read again inside it. */
  private async ddl(work: (client: pg.PoolClient) => Promise<void>): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL lock_timeout = '${DDL_LOCK_TIMEOUT}'`);
      await client.query('SELECT pg_advisory_xact_lock($1)', [LOGS_LOCK]);
      await this.readPartitions(client);
      await work(client);
      await client.query('COMMIT');
      client.release();
    } catch (err) {
      client.release(err as Error);
      this.partitions.clear(); // what was made here is rolled back: read it again
      throw err;
    }
  }

  /** Makes a partition from each of `froms` (a partition's start) that no partition covers,
   * clipped to its neighbours' bounds (made with another width, or by a version with another). */
  private async make(client: pg.PoolClient, table: Table, froms: number[]): Promise<void> {
    const known = this.partitions.get(table)!;
    for (const start of froms) {
      let from = start;
      let to = start + this.partitionMs;
      for (const p of [...known].sort((a, b) => a.from - b.from)) {
        if (p.to <= from) continue;
        if (p.from <= from)
          from = p.to; // covers the start: the rest begins after it
        else {
          to = Math.min(to, p.from); // the first one after the start ends the new one
          break;
        }
      }
      if (from >= to) continue;
      const name = partitionName(table, from);
      await client.query(`CREATE TABLE ${name} PARTITION OF ${table} FOR VALUES FROM (${from}) TO (${to})`);
      known.push({ name, from, to });
    }
  }

  /** Makes the current partition and AHEAD more of each table, and drops those past the retention. */
  async upkeepNow(now = Date.now()): Promise<void> {
    await this.ready();
    const current = now - (now % this.partitionMs);
    const froms = Array.from({ length: AHEAD + 1 }, (_, i) => current + i * this.partitionMs);
    await this.ddl(async (client) => {
      for (const table of TABLES) {
        await this.make(client, table, froms);
        const known = this.partitions.get(table)!;
        for (const p of known.filter((p) => p.to <= now - this.retentionMs)) {
          await client.query(`DROP TABLE ${p.name}`);
          known.splice(known.indexOf(p), 1);
        }
      }
    });
  }

  /** The appends lingering are sent first, and every insert in flight answered. */
  async close(): Promise<void> {
    clearInterval(this.upkeep);
    await Promise.all(this.groups.map((g) => g.flush()));
    await this.pool.end();
  }
}

/**
 * Appends to one table in as few statements as the load allows: at most PARALLEL_INSERTS in
 * flight, and the rows appended meanwhile go together in the next. With a linger, rows wait up to
 * that long for more before their statement goes (unless LINGER_FULL_ROWS are there): at a steady
 * rate each statement costs PostgreSQL about a third of a millisecond whatever it carries, and
 * appends came one or two at a time. Each append is answered when the statement that carried its
 * rows has committed (or failed).
 */
export class GroupedInserts<Row> {
  private readonly write: (rows: Row[]) => Promise<void>;
  private readonly lingerMs: number;
  private rows: Row[] = [];
  private waiting: { resolve: () => void; reject: (err: Error) => void }[] = [];
  /** Set while the rows waiting may wait for more. */
  private lingering: NodeJS.Timeout | undefined;
  /** The statements in flight, each until its appends are answered. */
  private readonly writing = new Set<Promise<void>>();

  constructor(write: (rows: Row[]) => Promise<void>, lingerMs = 0) {
    this.write = write;
    this.lingerMs = lingerMs;
  }

  add(rows: Row[]): Promise<void> {
    if (rows.length === 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      for (const r of rows) this.rows.push(r);
      this.waiting.push({ resolve, reject });
      if (this.lingerMs > 0 && this.rows.length < LINGER_FULL_ROWS)
        this.lingering ??= setTimeout(() => {
          this.lingering = undefined;
          this.send();
        }, this.lingerMs);
      else this.send();
    });
  }

  /** Sends what waits, its linger cut short, and resolves once nothing waits or is in flight (the
   * last appends before a close). */
  async flush(): Promise<void> {
    while (this.waiting.length > 0 || this.writing.size > 0) {
      clearTimeout(this.lingering);
      this.lingering = undefined;
      this.send();
      await Promise.allSettled([...this.writing]);
    }
  }

  private send(): void {
    if (this.writing.size >= PARALLEL_INSERTS || this.waiting.length === 0) return;
    if (this.lingering && this.rows.length < LINGER_FULL_ROWS) return; // its timer sends them
    clearTimeout(this.lingering);
    this.lingering = undefined;
    const { rows, waiting } = this;
    this.rows = [];
    this.waiting = [];
    let written: Promise<void>;
    try {
      written = this.write(rows);
    } catch (err) {
      written = Promise.reject(err);
    }
    const answered = written
      .then(
        () => {
          for (const w of waiting) w.resolve();
        },
        (err: Error) => {
          for (const w of waiting) w.reject(err);
        },
      )
      .finally(() => {
        this.writing.delete(answered);
        this.send();
      });
    this.writing.add(answered);
  }
}

/** How a log's rows are added (see PostgresLogs.append). */
export interface LogRows<Row extends unknown[]> {
  /** The statements' name. */
  name: string;
  table: 'hub_event_log' | 'hub_attempt_log';
  /** [name, type] of each column, in the row's order: the id first, the time (the partition key)
   * second. */
  columns: [string, string][];
  /** The keys of hub_log_counts a row counts under (as the reads ask for them). */
  keys: (row: Row) => string[];
}

/** Each statement's text, by name (its variant: columns as lines or as arrays). */
const appendTexts = new Map<string, string>();

/**
 * The statement of `append`: the rows (in id order) and their counts by key and bucket (in key
 * order), each column crossing as one text, a newline before each value, split by the statement:
 * arrays of values cost the driver an escape of every element (an array's text quotes each one,
 * and every quote and backslash of a JSON body), which cost the dispatcher more than the rest of a
 * record's write. Ids, names, numbers and JSON.stringify's output hold no newline; a value with one
 * sends its columns as arrays, under a statement of their own.
 */
export function appendStatement<Row extends unknown[]>(
  log: LogRows<Row>,
  rows: Row[],
  bucketMs: number,
): { name: string; text: string; values: unknown[] } {
  // In id order: statements that add the same ids (a batch derived again by another processor
  // after a rebalance) wait on each other's rows in one order, never in a cycle; their counts'
  // keys are taken in one order too.
  rows.sort((a, b) =>
    (a[0] as string) < (b[0] as string) ? -1 : (a[0] as string) > (b[0] as string) ? 1 : 0,
  );
  const buckets = new Map<number, Map<string, number>>();
  for (const row of rows) {
    const time = row[1] as number;
    const bucket = time - (time % bucketMs);
    let counted = buckets.get(bucket);
    if (!counted) {
      counted = new Map();
      buckets.set(bucket, counted);
    }
    for (const key of log.keys(row)) counted.set(key, (counted.get(key) ?? 0) + 1);
  }
  const counts: [string, number, number][] = [];
  for (const [bucket, counted] of buckets) for (const [key, n] of counted) counts.push([key, bucket, n]);
  counts.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : x[1] - y[1]));
  const added = columns(rows, log.columns.length);
  const countedAs = columns(counts, 3);
  const name = `${log.name}${added.joined ? '' : '-arrays'}${countedAs.joined ? '' : '-count-arrays'}`;
  let text = appendTexts.get(name);
  if (!text) {
    const unnest = (types: string[], from: number, joined: boolean) =>
      `unnest(${types
        .map((t, i) =>
          joined ? `(string_to_array($${from + i}, E'\\n'))[2:]::${t}[]` : `$${from + i}::${t}[]`,
        )
        .join(', ')})`;
    const width = log.columns.length;
    const types = log.columns.map(([, t]) => t);
    // The rows are the main statement and the counts a sub-statement that nothing reads, which
    // PostgreSQL runs after it: the counts' rows, which other appends update too, are locked only
    // from then to the commit (the other way round, two statements of a table ran one after the
    // other: 16,000 against 24,000 rows a second, measured).
    text = `WITH counted AS (
  INSERT INTO hub_log_counts (key, bucket, n)
  SELECT * FROM ${unnest(['text', 'bigint', 'bigint'], width + 1, countedAs.joined)}
  ON CONFLICT (key, bucket) DO UPDATE SET n = hub_log_counts.n + excluded.n)
INSERT INTO ${log.table} (${log.columns.map(([c]) => c).join(', ')})
  SELECT * FROM ${unnest(types, 1, added.joined)}`;
    appendTexts.set(name, text);
  }
  return { name, text, values: [...added.values, ...countedAs.values] };
}

/** The rows' values by column (see appendStatement): each column one text, a newline before each
 * value (`joined`), or arrays when a value holds a newline or is null (a text has no NULL). */
function columns(rows: unknown[][], width: number): { values: unknown[]; joined: boolean } {
  const texts = new Array<string>(width).fill('');
  for (const row of rows) {
    for (let c = 0; c < width; c++) {
      const value = String(row[c]);
      if (row[c] == null || value.includes('\n')) {
        return { values: texts.map((_, col) => rows.map((r) => r[col])), joined: false };
      }
      texts[c] += `\n${value}`;
    }
  }
  return { values: texts, joined: true };
}
