// PostgreSQL event store. Appends are group-committed per process, and every appending
// transaction holds one advisory lock from choosing its global positions until it commits.
// PostgreSQL makes a transaction visible before it releases its locks, so positions become
// visible strictly in order: a subscriber reading "position > checkpoint" never skips an event
// whose transaction commits late (the gap problem that a bare sequence has).
import { createHash } from 'node:crypto';
import pg from 'pg';
import {
  type AppendResult,
  CommittedTail,
  catchUpSubscription,
  committedEvents,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type Planned,
  planBatch,
  type RecordedEvent,
  type Snapshot,
  type StoredId,
  type SubscribeOptions,
  SubscriberWake,
  type Subscription,
  serialise,
  type Waiting,
} from './port.ts';

export const APPEND_LOCK = 0x68756265; // "hube": serialises position assignment across processes
/** How long a notification that comes while a commit of this process is on its way waits for that
 * commit's answer before it wakes the followers itself, ms: about a commit's round trip. */
const HEARD_WAIT_MS = 5;

/** Versioned migrations; each runs once, in order, under a lock, recorded in hub_migrations. */
const MIGRATIONS = [
  `CREATE TABLE hub_events (
     position bigint      PRIMARY KEY,
     stream   text        NOT NULL,
     revision bigint      NOT NULL,
     id       text        NOT NULL UNIQUE,
     type     text        NOT NULL,
     data     json        NOT NULL,
     metadata json        NOT NULL,
     created  timestamptz NOT NULL DEFAULT now(),
     UNIQUE (stream, revision)
   )`,
  // The common group commit in one round trip (see PostgresEventStore.commitAtOnce). A VOLATILE
  // function's statements each take a fresh snapshot, so the head and revisions are read after the
  // lock, as the general path reads them.
  `CREATE FUNCTION hub_append(
     streams text[], priors int[], expected text[],
     e_streams text[], e_ks bigint[], ids text[], types text[], datas json[], metas json[],
     created_ms float8, channel text) RETURNS json LANGUAGE plpgsql VOLATILE AS $$
   DECLARE
     head bigint;
     revs jsonb;
   BEGIN
     PERFORM pg_advisory_xact_lock(${APPEND_LOCK});
     IF EXISTS (SELECT 1 FROM unnest(ids) AS i(id) WHERE EXISTS (SELECT 1 FROM hub_events e WHERE e.id = i.id)) THEN
       RETURN NULL;
     END IF;
     SELECT coalesce(jsonb_object_agg(s.stream, r.revision) FILTER (WHERE r.revision IS NOT NULL), '{}')
       INTO revs
       FROM (SELECT DISTINCT stream FROM unnest(streams) AS u(stream)) s
       CROSS JOIN LATERAL (SELECT e.revision FROM hub_events e WHERE e.stream = s.stream
                           ORDER BY e.revision DESC LIMIT 1) r;
     IF EXISTS (SELECT 1 FROM (
         SELECT x, coalesce((revs ->> stream)::bigint, -1) + prior AS current
         FROM unnest(streams, priors, expected) AS a(stream, prior, x)) c
       WHERE NOT (x = 'any' OR (x = 'no_stream' AND current = -1)
                  OR (x = 'stream_exists' AND current >= 0) OR x = current::text)) THEN
       RETURN NULL;
     END IF;
     head := coalesce((SELECT position FROM hub_events ORDER BY position DESC LIMIT 1), 0);
     INSERT INTO hub_events (position, stream, revision, id, type, data, metadata, created)
       SELECT head + n, s, coalesce((revs ->> s)::bigint, -1) + k, id, t, d, m, to_timestamp(created_ms / 1000)
       FROM unnest(e_streams, e_ks, ids, types, datas, metas) WITH ORDINALITY AS v(s, k, id, t, d, m, n);
     PERFORM pg_notify(channel, (head + cardinality(ids))::text);
     RETURN json_build_object('head', head, 'revisions', revs);
   END $$`,
  // One snapshot per stream and aggregate kind (see aggregate.ts): the newest revision stays.
  `CREATE TABLE hub_snapshots (
     stream   text   NOT NULL,
     kind     text   NOT NULL,
     shape    text   NOT NULL,
     revision bigint NOT NULL,
     state    json   NOT NULL,
     PRIMARY KEY (stream, kind)
   )`,
];

const COLUMNS = 'position, stream, revision, id, type, data, metadata, created';

/**
 * The named statements. PostgreSQL parses and plans each once per connection (generic plans from
 * the first call, see sessionOptions): planning at every call was a fifth of its CPU at 1,000
 * changes/s. A kept plan is made for whatever the table held then, so every statement is one
 * a plan made from an empty or tiny table still serves at any size: index look-ups only, each
 * maximum the first entry of a backward index scan, and sequential scans off for the pool (a
 * tiny table that had been analyzed got a scan per event id in the plan kept for millions). As
 * `id = ANY($1)` and `stream = ANY($2) GROUP BY stream`, the append's look-up read every revision
 * of its streams, a scan of the table once they were large (100-300 ms a group commit).
 */
export const STATEMENTS = {
  /** What an append must know under the lock: which of its event ids ($1) are stored, the last
   * revision of each of its streams ($2, no entry for a stream with no events), and the head.
   * OFFSET 0 keeps each look-up in its subquery, made once per id and per stream. */
  'hub-append-known': `SELECT
   (SELECT coalesce(json_agg(found) FILTER (WHERE found IS NOT NULL), '[]')
      FROM (SELECT (SELECT json_build_object('id', e.id, 'stream', e.stream, 'revision', e.revision,
                      'position', e.position, 'created', (extract(epoch FROM e.created) * 1000)::bigint)
                    FROM hub_events e WHERE e.id = i.id) AS found
            FROM unnest($1::text[]) AS i(id) OFFSET 0) f) AS stored,
   (SELECT coalesce(json_object_agg(stream, revision) FILTER (WHERE revision IS NOT NULL), '{}')
      FROM (SELECT s.stream, (SELECT e.revision FROM hub_events e WHERE e.stream = s.stream
                              ORDER BY e.revision DESC LIMIT 1) AS revision
            FROM unnest($2::text[]) AS s(stream) OFFSET 0) r) AS revisions,
   coalesce((SELECT position FROM hub_events ORDER BY position DESC LIMIT 1), 0)::bigint AS head`,
  /** The reads of streams asked for in one turn ($1 streams, $2 first revisions, $3 limits), each
   * row with the 1-based place of its read (n); rows of one read come in revision order. */
  'hub-read-streams': `SELECT q.n::int AS n, e.position, e.stream, e.revision, e.id, e.type, e.data, e.metadata, e.created
   FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS q(stream, from_revision, max, n)
   CROSS JOIN LATERAL (SELECT ${COLUMNS} FROM hub_events e WHERE e.stream = q.stream AND e.revision >= q.from_revision
                       ORDER BY e.revision LIMIT q.max) e`,
  'hub-read-all': `SELECT ${COLUMNS} FROM hub_events WHERE position > $1 ORDER BY position LIMIT $2`,
  /** The reads of snapshots asked for in one turn ($1 streams, $2 kinds), each row with the
   * 1-based place of its read (n). LIMIT 1 (the key is unique) keeps the look-up in the lateral: flattened
   * into a join, the plan kept from a tiny analyzed table hashed the whole table at every call. */
  'hub-read-snapshots': `SELECT q.n::int AS n, s.kind, s.shape, s.revision, s.state
   FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS q(stream, kind, n)
   CROSS JOIN LATERAL (SELECT kind, shape, revision, state FROM hub_snapshots s
                       WHERE s.stream = q.stream AND s.kind = q.kind LIMIT 1) s`,
  /** Replaces the stored snapshot unless it is of a later revision (one of the same revision may be
   * of another shape, written before an upgrade). */
  'hub-save-snapshot': `INSERT INTO hub_snapshots (stream, kind, shape, revision, state) VALUES ($1, $2, $3, $4, $5)
   ON CONFLICT (stream, kind) DO UPDATE
     SET shape = excluded.shape, revision = excluded.revision, state = excluded.state
     WHERE excluded.revision >= hub_snapshots.revision`,
} as const;

/** The settings of every connection of a store (see STATEMENTS). READ COMMITTED whatever the
 * server's default: hub_append runs in its statement's own transaction, where a level cannot be set,
 * and must read the head after taking the lock. Generic plans from the first call: every statement
 * reads arrays it is given through unnest(), which a custom plan sizes from the values and a
 * generic one cannot, so a custom plan always looked cheaper and PostgreSQL planned hub_append's
 * statements again at every call (about a fifth of an append's CPU, measured alone; docs/benchmarks.md). */
export const sessionOptions = (schema: string) =>
  `-c search_path=${schema} -c enable_seqscan=off -c default_transaction_isolation=read\\ committed -c plan_cache_mode=force_generic_plan`;

/**
 * The channel of a schema's commits: hubs that share a database, each in a schema of its own, hear
 * only their own (a notification wakes every follower of the process to read its log).
 * PostgreSQL cuts channel names at 63 bytes: a longer schema name is hashed.
 */
const channelOf = (schema: string): string => {
  const channel = `hub_events_${schema}`;
  return channel.length <= 63
    ? channel
    : `hub_events_${createHash('sha256').update(schema).digest('hex').slice(0, 32)}`;
};

// bigint columns as numbers: positions stay far below 2^53.
const types = {
  getTypeParser: (oid: number, format?: string) =>
    oid === 20 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format as 'text'),
};

export interface PostgresOptions {
  url: string;
  /** Schema holding the tables (tests use one each). */
  schema?: string;
  poolSize?: number;
  maxBatch?: number;
  /** Events between snapshots of an aggregate's state (see EventStore.snapshotEvery); 0: none. */
  snapshotEvery?: number;
  /** How many of this process's newest committed events readAll serves from memory (see readAll). */
  tailEvents?: number;
}

/**
 * Calls asked for in one turn of the event loop, sent together after it (so the statement begins
 * after every caller asked: none receives a read that began before it did); calls with the same
 * key share one answer. `send` answers each call in order, each answer settling its callers alone
 * (a caller's own follow-up query neither holds up nor fails the others).
 */
class TurnBatch<A, R> {
  private readonly unsent = new Map<string, PromiseWithResolvers<R>>();
  private asked: { args: A; answer: PromiseWithResolvers<R> }[] = [];
  private readonly sending = new Set<Promise<void>>();
  private scheduled: Promise<void> | undefined;
  private readonly send: (asked: A[]) => Promise<(R | Promise<R>)[]>;

  constructor(send: (asked: A[]) => Promise<(R | Promise<R>)[]>) {
    this.send = send;
  }

  ask(key: string, args: A): Promise<R> {
    let answer = this.unsent.get(key);
    if (!answer) {
      this.scheduled ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flush());
      answer = Promise.withResolvers<R>();
      this.unsent.set(key, answer);
      this.asked.push({ args, answer });
    }
    return answer.promise;
  }

  /** Resolves once every call asked so far is answered (a store closes its pool after). */
  async idle(): Promise<void> {
    await this.scheduled;
    await Promise.allSettled([...this.sending]);
  }

  private flush(): void {
    const asked = this.asked;
    this.asked = [];
    this.unsent.clear();
    this.scheduled = undefined;
    const sent = this.send(asked.map((a) => a.args)).then(
      (answers) =>
        Promise.allSettled(
          asked.map((a, i) => Promise.resolve(answers[i]!).then(a.answer.resolve, a.answer.reject)),
        ).then(() => {}),
      (err) => {
        for (const a of asked) a.answer.reject(err);
      },
    );
    this.sending.add(sent);
    void sent.finally(() => this.sending.delete(sent));
  }
}

export class PostgresEventStore implements EventStore {
  readonly kind = 'postgres';
  readonly snapshotEvery: number;
  private readonly pool: pg.Pool;
  private readonly schema: string;
  private readonly channel: string;
  private readonly maxBatch: number;
  private readonly queue: Waiting[] = [];
  private flushing = false;
  private ready: Promise<void>;
  private listener: pg.Client | undefined;
  private readonly wakers = new Set<() => void>();
  private readonly wakeSubscribers = new SubscriberWake(() => {
    for (const wake of this.wakers) wake();
  });
  /** This process's newest commits, read by its followers without a query: see readAll. */
  private readonly tail: CommittedTail;
  /** The newest head a notification announced (any process's commit). */
  private heardHead = 0;
  /** A notification came while a commit of this process was on its way (see listen): the wake
   * that waits for that commit's answer, at most HEARD_WAIT_MS. */
  private heardWhileCommitting: NodeJS.Timeout | undefined;
  /** Reads of the log: see readAll. */
  private readonly logReads = new TurnBatch((asked: { after: number; max: number }[]) =>
    this.sendLogReads(asked),
  );
  /**
   * Reads of streams, and of snapshots, asked for in one turn of the event loop go as one
   * statement each: on a store other processes write too, every command that changes nothing
   * checks its cached state against its stream's tail (aggregate.ts), and a state not cached reads
   * its snapshot first. Under device-meta ingestion in one process these reads had been nine in
   * ten of the statements sent, each a round trip of its own.
   */
  private readonly streamReads = new TurnBatch(
    (asked: { stream: string; fromRevision: number; max: number }[]) => this.sendStreamReads(asked),
  );
  private readonly snapshotReads = new TurnBatch((asked: { stream: string; kind: string }[]) =>
    this.sendSnapshotReads(asked),
  );
  private closed = false;

  constructor(options: PostgresOptions) {
    this.schema = options.schema ?? 'public';
    // At most 63 bytes, PostgreSQL's limit: a longer name would be cut to another schema's.
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(this.schema)) throw new Error(`invalid schema name ${this.schema}`);
    this.channel = channelOf(this.schema);
    this.maxBatch = options.maxBatch ?? 1000;
    this.snapshotEvery = options.snapshotEvery ?? 0;
    this.tail = new CommittedTail(options.tailEvents ?? 10_000, false);
    this.pool = new pg.Pool({
      connectionString: options.url,
      max: options.poolSize ?? 8,
      types,
      options: sessionOptions(this.schema),
    });
    this.pool.on('error', () => {}); // an idle client's error is seen again by the next query
    this.ready = this.migrate();
    this.ready.catch(() => {});
  }

  /** Migrations done; a failed attempt (the database was down at start) is tried again. */
  private async whenReady(): Promise<void> {
    try {
      await this.ready;
    } catch {
      this.ready = this.migrate();
      await this.ready;
    }
  }

  private async migrate(): Promise<void> {
    const client = await this.pool.connect();
    try {
      await client.query('SELECT pg_advisory_lock($1)', [APPEND_LOCK + 1]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${this.schema}`);
      await client.query(
        'CREATE TABLE IF NOT EXISTS hub_migrations (version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())',
      );
      const { rows } = await client.query<{ v: number | null }>(
        'SELECT max(version) AS v FROM hub_migrations',
      );
      for (let v = rows[0]?.v ?? 0; v < MIGRATIONS.length; v++) {
        await client.query('BEGIN');
        await client.query(MIGRATIONS[v]!);
        await client.query('INSERT INTO hub_migrations (version) VALUES ($1)', [v + 1]);
        await client.query('COMMIT');
      }
      await client.query('SELECT pg_advisory_unlock($1)', [APPEND_LOCK + 1]);
      client.release();
    } catch (err) {
      // Discard the connection: it may hold the session lock or an aborted transaction.
      client.release(err as Error);
      throw err;
    }
  }

  append(stream: string, events: NewEvent[], expected: ExpectedRevision = 'any'): Promise<AppendResult> {
    if (this.closed) return Promise.reject(new Error('the event store is closed'));
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
        void this.flush();
      }
    });
  }

  private async flush(): Promise<void> {
    try {
      await this.whenReady();
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        try {
          await this.commit(batch);
        } catch (err) {
          for (const w of batch) w.reject(err as Error);
        }
        this.wakeIfHeard();
      }
    } catch (err) {
      for (const w of this.queue.splice(0)) w.reject(err as Error);
    } finally {
      this.flushing = false;
      this.wakeIfHeard();
      if (this.queue.length > 0) {
        this.flushing = true;
        void this.flush();
      }
    }
  }

  private async commit(batch: Waiting[]): Promise<void> {
    const now = Date.now(); // stamped here, so an append can answer when its events were stored
    const plans = (await this.commitAtOnce(batch, now)) ?? (await this.commitChecked(batch, now));
    const written: RecordedEvent[] = [];
    const followed = this.wakers.size > 0; // a process without followers (an API's) parses nothing
    batch.forEach((w, i) => {
      const plan = plans[i]!;
      if (plan.kind === 'error') w.reject(plan.error);
      else w.resolve(plan.result);
      if (plan.kind === 'write' && followed) written.push(...committedEvents(w, plan, now));
    });
    if (!followed) return this.tail.clear();
    this.tail.add(written);
    if (written.length > 0) this.wakeFollowers();
  }

  /** Wakes the followers for the notifications that came while a commit was on its way. */
  private wakeIfHeard(): void {
    if (this.heardWhileCommitting) this.wakeFollowers();
  }

  /** Wakes the followers soon, the wake a notification deferred included. */
  private wakeFollowers(): void {
    clearTimeout(this.heardWhileCommitting);
    this.heardWhileCommitting = undefined;
    this.wakeSubscribers.soon();
  }

  /**
   * The common group commit in one round trip: hub_append writes the batch only if none of its
   * event ids is stored and every expected revision holds, which is when planBatch plans every
   * append as a write; then its plans are made from the head and revisions it read under the
   * lock. Undefined when it wrote nothing (a retried append, a conflict), or when the batch repeats
   * an event id: commitChecked then decides each append. At 1,000 changes/s the four round trips
   * of that path were about a fifth of the API's CPU.
   */
  private async commitAtOnce(batch: Waiting[], now: number): Promise<Planned[] | undefined> {
    const streams: string[] = [];
    const priors: number[] = [];
    const expected: string[] = [];
    const written = new Map<string, number>(); // stream → its events in the batch so far
    // Revisions relative to each stream's stored head, which hub_append reads under its lock.
    const cols = eventColumns(batch, (w) => {
      const prior = written.get(w.stream) ?? 0;
      streams.push(w.stream);
      priors.push(prior);
      expected.push(String(w.expected));
      written.set(w.stream, prior + w.events.length);
      return { firstRevision: prior + 1, firstPosition: 0 };
    });
    const ids = cols[3];
    if (ids.length === 0 || new Set(ids).size < ids.length) return undefined;
    const { rows } = await this.pool.query<{
      written: { head: number; revisions: Record<string, number> } | null;
    }>({
      name: 'hub-append',
      text: 'SELECT hub_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS written',
      values: [streams, priors, expected, ...cols.slice(1), now, this.channel],
    });
    const done = rows[0]!.written;
    if (done === null) return undefined;
    const revisionOf = new Map(Object.entries(done.revisions));
    return planBatch(batch, (s) => revisionOf.get(s) ?? -1, new Map(), done.head, now);
  }

  /** A group commit deciding each append from what is stored: four round trips. */
  private async commitChecked(batch: Waiting[], now: number): Promise<Planned[]> {
    const client = await this.pool.connect();
    let plans: Planned[];
    try {
      // Begin and lock (one simple query), what is stored (one statement), the insert with its
      // notification, commit. READ COMMITTED whatever the server's default: max(position) must be
      // read after the lock.
      await client.query(
        `BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock(${APPEND_LOCK})`,
      );
      const ids = batch.flatMap((w) => w.events.map((e) => e.id));
      const streams = [...new Set(batch.map((w) => w.stream))];
      const known = await client.query<{
        stored: StoredRow[];
        revisions: Record<string, number>;
        head: number;
      }>({
        name: 'hub-append-known',
        text: STATEMENTS['hub-append-known'],
        values: [ids, streams],
      });
      const { stored, revisions, head } = known.rows[0]!;
      const revisionOf = new Map(Object.entries(revisions)); // stream names are data, not object keys
      plans = planBatch(
        batch,
        (s) => revisionOf.get(s) ?? -1,
        new Map(stored.map(({ id, ...row }) => [id, row])),
        head,
        now,
      );
      const cols = eventColumns(batch, (_, i) => {
        const plan = plans[i]!;
        return plan.kind === 'write' ? plan : undefined;
      });
      if (cols[0].length > 0) {
        // The notification is delivered at commit, with the new head.
        await client.query({
          name: 'hub-append-insert',
          text: `WITH inserted AS (
             INSERT INTO hub_events (position, stream, revision, id, type, data, metadata, created)
             SELECT *, to_timestamp($8::float8 / 1000)
             FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::json[], $7::json[])
             RETURNING 1)
           SELECT pg_notify($9, $10), (SELECT count(*) FROM inserted)`,
          values: [...cols, now, this.channel, String(cols[0][cols[0].length - 1])],
        });
      }
      await client.query('COMMIT');
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
      throw err;
    }
    client.release();
    return plans;
  }

  /** One statement with the other reads of its turn: see streamReads. */
  readStream(stream: string, fromRevision = 0, max = 1000): Promise<RecordedEvent[]> {
    return this.streamReads.ask(`${fromRevision}:${max}:${stream}`, { stream, fromRevision, max });
  }

  private async sendStreamReads(
    asked: { stream: string; fromRevision: number; max: number }[],
  ): Promise<RecordedEvent[][]> {
    await this.whenReady();
    const { rows } = await this.pool.query<Parameters<typeof toRecorded>[0] & { n: number }>({
      name: 'hub-read-streams',
      text: STATEMENTS['hub-read-streams'],
      values: [asked.map((a) => a.stream), asked.map((a) => a.fromRevision), asked.map((a) => a.max)],
    });
    const pages: RecordedEvent[][] = asked.map(() => []);
    for (const r of rows) pages[r.n - 1]!.push(toRecorded(r));
    // In revision order whatever the plan (its rows already are, read by the stream's index).
    return pages.map((page) => page.sort((x, y) => x.revision - y.revision));
  }

  /** One statement with the other reads of its turn: see streamReads. */
  readSnapshot(stream: string, kind: string): Promise<Snapshot | undefined> {
    return this.snapshotReads.ask(`${kind.length}:${kind}:${stream}`, { stream, kind });
  }

  private async sendSnapshotReads(
    asked: { stream: string; kind: string }[],
  ): Promise<(Snapshot | undefined)[]> {
    await this.whenReady();
    const { rows } = await this.pool.query<Snapshot & { n: number }>({
      name: 'hub-read-snapshots',
      text: STATEMENTS['hub-read-snapshots'],
      values: [asked.map((a) => a.stream), asked.map((a) => a.kind)],
    });
    const found: (Snapshot | undefined)[] = asked.map(() => undefined);
    for (const { n, ...snapshot } of rows) found[n - 1] = snapshot;
    return found;
  }

  async saveSnapshot(stream: string, snapshot: Snapshot): Promise<void> {
    if (this.closed) throw new Error('the event store is closed');
    await this.whenReady();
    await this.pool.query({
      name: 'hub-save-snapshot',
      text: STATEMENTS['hub-save-snapshot'],
      values: [stream, snapshot.kind, snapshot.shape, snapshot.revision, JSON.stringify(snapshot.state)],
    });
  }

  /**
   * Reads asked for in one turn of the event loop share one query: the followers of a process
   * (the projector's runners, the relay, the mailer…), woken together by a notification, each ask
   * for the page after their own checkpoint, most of them at or near the head (at 500 commits/s,
   * about one query per commit for each of them before they shared: a fifth of the main thread's
   * writes to sockets). One query from the lowest checkpoint answers each caller its own page;
   * a caller whose page that query cut short (it reached its limit first) gets a query of its own.
   * The query is sent only after the turn, so it begins after every caller asked: a caller never
   * receives a read that began before it did (a subscription relies on that after a wake).
   * Callers share the events; nothing reading them changes them.
   */
  readAll(after = 0, max = 1000): Promise<RecordedEvent[]> {
    // This process's own commits are read from memory, unless a notification announced a later
    // head the page would stop short of (another process's commit, read from the table).
    const page = this.tail.page(after, max);
    if (page && (page.length === max || this.tail.last >= this.heardHead)) return Promise.resolve(page);
    return this.logReads.ask(`${after}:${max}`, { after, max });
  }

  private async sendLogReads(
    asked: { after: number; max: number }[],
  ): Promise<(RecordedEvent[] | Promise<RecordedEvent[]>)[]> {
    await this.whenReady();
    const from = Math.min(...asked.map((a) => a.after));
    const limit = Math.max(...asked.map((a) => a.max));
    const rows = await this.queryAll(from, limit);
    const complete = rows.length < limit; // everything stored after `from` when it ran
    return asked.map((a) => {
      let first = 0;
      while (first < rows.length && rows[first]!.position <= a.after) first++;
      const page = rows.slice(first, first + a.max);
      return complete || page.length === a.max ? page : this.queryAll(a.after, a.max);
    });
  }

  private async queryAll(after: number, max: number): Promise<RecordedEvent[]> {
    const { rows } = await this.pool.query({
      name: 'hub-read-all',
      text: STATEMENTS['hub-read-all'],
      values: [after, max],
    });
    return rows.map(toRecorded);
  }

  subscribe(after = 0, options: SubscribeOptions = {}): Subscription {
    void this.listen();
    return catchUpSubscription(
      (from, max) => this.readAll(from, max),
      (wake) => {
        this.wakers.add(wake);
        return () => this.wakers.delete(wake);
      },
      after,
      { pollMs: 500, ...options },
    );
  }

  /** One LISTEN connection per store wakes every subscriber; polling covers its outages. */
  private async listen(): Promise<void> {
    if (this.listener || this.closed) return;
    const client = new pg.Client({
      connectionString: (this.pool.options as { connectionString: string }).connectionString,
    });
    this.listener = client;
    client.on('notification', ({ payload }) => {
      const head = Number(payload);
      if (head > this.heardHead) this.heardHead = head;
      // A commit of this process: its followers were woken at its answer, and read it from memory.
      if (head <= this.tail.last) return;
      // Another process's: a commit of this one on its way wakes them once it is answered (after
      // it, a read sees both), rather than twice, the first time to read the table; but not later
      // than HEARD_WAIT_MS, should that commit be slow (waiting for the append lock, say).
      if (this.flushing) this.heardWhileCommitting ??= setTimeout(() => this.wakeIfHeard(), HEARD_WAIT_MS);
      else for (const wake of this.wakers) wake();
    });
    client.on('error', () => {
      // Subscribers poll meanwhile; listen again shortly (e.g. after a database restart).
      this.listener = undefined;
      void client.end().catch(() => {});
      setTimeout(() => {
        if (this.wakers.size > 0) void this.listen();
      }, 1000).unref();
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${this.channel}`);
    } catch {
      this.listener = undefined;
      await client.end().catch(() => {});
    }
  }

  async head(): Promise<number> {
    await this.whenReady();
    const { rows } = await this.pool.query<{ p: number }>(
      'SELECT coalesce(max(position), 0)::bigint AS p FROM hub_events',
    );
    return rows[0]!.p;
  }

  async close(): Promise<void> {
    this.closed = true;
    // Reads asked for before the close are answered, not failed by the pool's end.
    await Promise.all([this.logReads, this.streamReads, this.snapshotReads].map((b) => b.idle()));
    while (this.flushing) await new Promise((r) => setTimeout(r, 5));
    await this.listener?.end().catch(() => {});
    await this.pool.end();
  }
}

type StoredRow = StoredId & { id: string };

const toRecorded = (r: {
  position: number;
  stream: string;
  revision: number;
  id: string;
  type: string;
  data: unknown;
  metadata: Record<string, unknown>;
  created: Date;
}): RecordedEvent => ({
  id: r.id,
  type: r.type,
  stream: r.stream,
  revision: r.revision,
  position: r.position,
  data: r.data,
  metadata: r.metadata,
  created: r.created.getTime(),
});

type EventColumns = [number[], string[], number[], string[], string[], string[], string[]];

/** The events of a batch as the columns unnest takes (position, stream, revision, id, type, data,
 * metadata): both commits insert them so. `place` gives an append's first revision and position,
 * or undefined for an append not to be written. */
function eventColumns(
  batch: Waiting[],
  place: (w: Waiting, i: number) => { firstRevision: number; firstPosition: number } | undefined,
): EventColumns {
  const cols: EventColumns = [[], [], [], [], [], [], []];
  batch.forEach((w, i) => {
    const at = place(w, i);
    if (!at) return;
    w.events.forEach((e, j) => {
      cols[0].push(at.firstPosition + j);
      cols[1].push(w.stream);
      cols[2].push(at.firstRevision + j);
      cols[3].push(e.id);
      cols[4].push(e.type);
      cols[5].push(e.data as string);
      cols[6].push((e.metadata as { json: string }).json);
    });
  });
  return cols;
}
