// The delivery store on SQLite (the embedded profile): a file of its own in HUB_DATA_DIR, written
// by this process alone; the embedded hub runs it on a thread of its own (threaded.ts).
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { BACKSTOP_PAGES, BUSY_TIMEOUT_MS, unwatch, watch } from '../../infra/checkpointer.ts';
import { afterAttempt, type EndpointHealth, NO_ATTEMPTS } from './health.ts';
import {
  type Attempt,
  type AttemptRecord,
  attemptOfRecord,
  CLAIM_SCAN_FACTOR,
  type DeliveryStore,
  type Hold,
  heldOf,
  type Job,
  PASSED_OVER_MS,
  type Rooms,
  type StatusFilter,
} from './port.ts';
import {
  ATTEMPT_COLUMNS,
  ATTEMPT_FIELDS,
  type AttemptLogRow,
  attemptFields,
  attemptOfRow,
  attemptRow,
  claimed,
  FINISH_ATTEMPT,
  FINISH_FIELDS,
  FINISH_JOB_ID,
  FinishWindow,
  type JobRow,
  jobRow,
} from './sqlite-rows.ts';

/** The rows a claim takes, oldest first, within each subscription's room; and the rows it passed
 * over, to push back, when they filled the whole scan and left nothing to take. */
function pick<R>(
  rows: Iterable<R>,
  limit: number,
  scan: number,
  rooms: Rooms | undefined,
  subOf: (r: R) => string,
) {
  const room = new Map(Object.entries(rooms?.of ?? {}));
  const taken: R[] = [];
  const skipped: R[] = [];
  // Read lazily: a claim usually takes its fill long before the end of its look.
  for (const r of rows) {
    if (taken.length >= limit) break;
    if (!rooms) {
      taken.push(r);
      continue;
    }
    const sub = subOf(r);
    const left = room.get(sub) ?? rooms.otherwise;
    if (left > 0) {
      room.set(sub, left - 1);
      taken.push(r);
    } else skipped.push(r);
  }
  return { taken, passed: taken.length === 0 && skipped.length >= scan ? skipped : [] };
}

export class SqliteDeliveryStore implements DeliveryStore {
  private readonly db: DatabaseSync;
  private readonly path: string;
  private readonly retentionMs: number;
  private readonly emitter = new EventEmitter();
  private sweptAt = 0;
  /** Set once close() has written the finishes waiting: later ones are refused. */
  private closed = false;
  private closing: Promise<void> | undefined;
  /** Jobs claimed and not yet finished, by id: their rowids. A leased job's later writes find its
   * row by rowid, not through the index of its (random) id: a claim reads only the due index. */
  private readonly leased = new Map<string, number>();
  /** Finished attempts waiting for the next group commit. */
  private readonly window = new FinishWindow((fields) => this.finishRows(fields));
  private readonly sql: Record<
    | 'insertJob'
    | 'insertBody'
    | 'insertAttempt'
    | 'rowOf'
    | 'reschedule'
    | 'complete'
    | 'completeById'
    | 'due'
    | 'lease'
    | 'passOver'
    | 'renew'
    | 'health'
    | 'writeHealth'
    | 'probe',
    StatementSync
  >;

  constructor(path: string, o: { retentionMs: number }) {
    mkdirSync(dirname(path), { recursive: true });
    this.db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS });
    this.retentionMs = o.retentionMs;
    // WAL with synchronous=NORMAL: every commit survives a crash of the process (retries survive
    // restarts); a power loss may lose the last moments of attempt records. Checkpoints run on a
    // thread of their own (infra/checkpointer.ts): copying pages back was a quarter of this store's
    // time, in stalls, while each attempt and job dirtied a page of the event and job indexes at
    // random (ids now lead with the change's stored time: eventId and jobId, processors/stream/derive.ts).
    //
    // A job's schedule (due, lease) and its body are tables of their own: a claim, a renewal and a
    // finish each change the due time, and with the body in the same row each rewrote the body's
    // page too (a page holds four bodies, a hundred schedule rows). Measured alone, per job: a
    // claim 24 → 10 µs, a finish 21 → 4 µs, most of it the commit's pages.
    this.db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES};
      CREATE TABLE IF NOT EXISTS schedule (row INTEGER PRIMARY KEY, job_id TEXT NOT NULL UNIQUE, due INTEGER,
        created INTEGER NOT NULL, sub TEXT) STRICT;
      CREATE INDEX IF NOT EXISTS schedule_due_sub ON schedule (due, sub) WHERE due IS NOT NULL;
      CREATE TABLE IF NOT EXISTS job_bodies (row INTEGER PRIMARY KEY, body TEXT NOT NULL) STRICT;
      CREATE TABLE IF NOT EXISTS attempt_log (id TEXT PRIMARY KEY, job_id TEXT,
        subscription_id TEXT NOT NULL, owner TEXT NOT NULL, event_id TEXT NOT NULL, event_type TEXT,
        kind TEXT, attempt INTEGER, status TEXT NOT NULL, outcome TEXT, response_code INTEGER, error TEXT,
        duration_ms INTEGER, scheduled INTEGER, started INTEGER NOT NULL, finished INTEGER, next INTEGER,
        url TEXT, request_headers TEXT, request_body TEXT, response_status INTEGER, response_headers TEXT,
        response_body TEXT, response_truncated INTEGER) STRICT;
      CREATE INDEX IF NOT EXISTS attempt_log_sub ON attempt_log (subscription_id, started);
      CREATE INDEX IF NOT EXISTS attempt_log_failed ON attempt_log (subscription_id, status, started) WHERE status != 'succeeded';
      CREATE INDEX IF NOT EXISTS attempt_log_event ON attempt_log (owner, event_id);
      CREATE TABLE IF NOT EXISTS endpoint_health (sub TEXT PRIMARY KEY, last_success INTEGER,
        last_failure INTEGER, failures INTEGER NOT NULL, failing_since INTEGER,
        probe_until INTEGER NOT NULL DEFAULT 0) STRICT;`);
    this.moveOldJobs();
    this.emitter.setMaxListeners(0);
    this.path = path;
    watch(path);
    this.sql = {
      insertJob: this.db.prepare(
        'INSERT OR IGNORE INTO schedule (job_id, due, created, sub) VALUES (?, ?, ?, ?)',
      ),
      insertBody: this.db.prepare('INSERT OR REPLACE INTO job_bodies (row, body) VALUES (?, ?)'),
      insertAttempt: this.db.prepare(
        `INSERT OR REPLACE INTO attempt_log (${ATTEMPT_COLUMNS}) VALUES (${new Array(ATTEMPT_FIELDS).fill('?').join(', ')})`,
      ),
      rowOf: this.db.prepare('SELECT row FROM schedule WHERE job_id = ?'),
      // The id is checked too: a guard on a row number kept since the claim.
      reschedule: this.db.prepare('UPDATE schedule SET due = ? WHERE row = ? AND job_id = ?'),
      complete: this.db.prepare('UPDATE schedule SET due = NULL WHERE row = ? AND job_id = ?'),
      completeById: this.db.prepare('UPDATE schedule SET due = NULL WHERE job_id = ? AND due IS NOT NULL'),
      due: this.db.prepare(
        'SELECT row, due, sub FROM schedule WHERE due IS NOT NULL AND due <= ? ORDER BY due LIMIT ?',
      ),
      lease: this.db.prepare(
        'UPDATE schedule SET due = ? WHERE row = ? RETURNING job_id, (SELECT body FROM job_bodies b WHERE b.row = schedule.row) AS body',
      ),
      passOver: this.db.prepare('UPDATE schedule SET due = ? WHERE row = ?'),
      renew: this.db.prepare('UPDATE schedule SET due = ? WHERE row = ? AND job_id = ? AND due IS NOT NULL'),
      health: this.db.prepare(
        'SELECT last_success, last_failure, failures, failing_since FROM endpoint_health WHERE sub = ?',
      ),
      // An attempt recorded ends the subscription's probe lease.
      writeHealth: this.db.prepare(
        'INSERT OR REPLACE INTO endpoint_health (sub, last_success, last_failure, failures, failing_since, probe_until) VALUES (?, ?, ?, ?, ?, 0)',
      ),
      probe: this.db.prepare('UPDATE endpoint_health SET probe_until = ? WHERE sub = ? AND probe_until <= ?'),
    };
    this.moveOldAttempts();
  }

  async enqueue(jobs: Job[], hold?: Hold): Promise<Job[]> {
    return heldOf(jobs, this.enqueueRows(jobs.map(jobRow), hold));
  }

  /** `enqueue` of jobs already in rows; returns the ids of the jobs held. */
  enqueueRows(jobs: JobRow[], hold?: Hold): string[] {
    if (jobs.length === 0) return [];
    const now = Date.now();
    const held: [id: string, row: number][] = [];
    const holds = new Set(hold?.ids);
    this.transaction(() => {
      for (const j of jobs) {
        const holding = holds.has(j.job_id);
        const { changes, lastInsertRowid } = this.sql.insertJob.run(
          j.job_id,
          holding ? hold!.until : now,
          now,
          j.subscription_id,
        );
        if (changes !== 1) continue; // known already (sent twice)
        this.sql.insertBody.run(lastInsertRowid, j.body);
        if (holding) held.push([j.job_id, Number(lastInsertRowid)]);
      }
    });
    for (const [id, row] of held) this.leased.set(id, row);
    if (held.length < jobs.length) this.emitter.emit('enqueue');
    return held.map(([id]) => id);
  }

  async claim(
    now: number,
    limit: number,
    leaseMs: number,
    rooms?: Rooms,
  ): Promise<{ job: Job; due: number }[]> {
    return this.claimRows(now, limit, leaseMs, rooms).map(claimed);
  }

  /** `claim`, the jobs' bodies left as JSON. */
  claimRows(now: number, limit: number, leaseMs: number, rooms?: Rooms): { body: string; due: number }[] {
    const scan = rooms ? limit * CLAIM_SCAN_FACTOR : limit;
    const rows = this.sql.due.iterate(now, scan) as Iterable<{
      row: number;
      due: number;
      sub: string | null;
    }>;
    const { taken, passed } = pick(rows, limit, scan, rooms, (r) => r.sub ?? '');
    if (taken.length === 0 && passed.length === 0) return [];
    const out = this.transaction(() => {
      for (const r of passed) this.sql.passOver.run(now + PASSED_OVER_MS, r.row);
      return taken.map((r) => {
        const { job_id, body } = this.sql.lease.get(now + leaseMs, r.row) as { job_id: string; body: string };
        return { job_id, row: r.row, body, due: r.due };
      });
    });
    for (const r of out) this.leased.set(r.job_id, r.row);
    return out;
  }

  // The file is this process's alone, so the set of leased jobs is known here: a renewal skips
  // jobs finished meanwhile (one waiting for its group commit is renewed, and the commit, written
  // after, finishes it).
  async renew(jobIds: string[], until: number): Promise<void> {
    const held = jobIds.filter((id) => this.leased.has(id));
    if (held.length === 0) return;
    this.transaction(() => {
      for (const id of held) this.sql.renew.run(until, this.leased.get(id)!, id);
    });
  }

  /** `fn` in one transaction, rolled back if it throws (a failed step must not leave it open). */
  private transaction<T>(fn: () => T): T {
    this.db.exec('BEGIN');
    try {
      const result = fn();
      this.db.exec('COMMIT');
      return result;
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      throw err;
    }
  }

  /** Group-committed: the attempts finished within FINISH_WINDOW_MS share a transaction. */
  finish(job: Job, attempt: Attempt | null, next: number | null, fresh = false): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the delivery store is closed'));
    return this.window.add(job, attempt, next, fresh);
  }

  /** Commits finishes in finishFields' values, one after another, in one transaction (a window
   * gathered here or on the dispatching thread). */
  finishRows(fields: unknown[]): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the delivery store is closed'));
    if (fields.length === 0) return Promise.resolve();
    const now = Date.now();
    let due = false;
    // Each subscription's health, read once and written once per commit.
    const health = new Map<string, EndpointHealth>();
    try {
      this.db.exec('BEGIN');
      for (let at = 0; at < fields.length; at += FINISH_FIELDS) {
        const fresh = fields[at] as boolean;
        const next = fields[at + 1] as number | null;
        const body = fields[at + 2] as string | null;
        const a = at + FINISH_ATTEMPT; // the attempt's fields: its id null without one
        const jobId = fields[at + FINISH_JOB_ID] as string;
        const sub = fields[at + FINISH_JOB_ID + 1] as string;
        due ||= next !== null;
        const row = this.leased.get(jobId);
        this.leased.delete(jobId);
        if (fields[a] !== null) {
          this.sql.insertAttempt.run(...attemptRow(fields, a));
          // The attempt's status and end, among its fields (attemptFields' order).
          const before = health.get(sub) ?? this.healthOf(sub);
          health.set(sub, afterAttempt(before, fields[a + 8] === 'succeeded', fields[a + 15] as number));
        }
        if (fresh) {
          // Not stored by this process: stored now if it is due again. Done, it is done in a row an
          // earlier process stored (its batch handed off again after a crash) too, which would
          // otherwise come due when that process's lease ended and be delivered again. The look-up
          // is by the job-id index, whose newest pages are the ones in use (ids lead with time).
          if (next === null || body === null) {
            this.sql.completeById.run(jobId);
            continue;
          }
          const { changes, lastInsertRowid } = this.sql.insertJob.run(jobId, next, now, sub);
          if (changes === 1) this.sql.insertBody.run(lastInsertRowid, body);
          else this.writeJob((this.sql.rowOf.get(jobId) as { row: number }).row, jobId, body, next);
        } else if (row === undefined || this.writeJob(row, jobId, body, next) === 0) {
          // A job not leased here (its lease taken over) is found by its id.
          const found = this.sql.rowOf.get(jobId) as { row: number } | undefined;
          if (found) this.writeJob(found.row, jobId, body, next);
        }
      }
      for (const [sub, h] of health)
        this.sql.writeHealth.run(sub, h.lastSuccess, h.lastFailure, h.consecutiveFailures, h.failingSince);
      this.db.exec('COMMIT');
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      return Promise.reject(err);
    }
    if (due) this.emitter.emit('enqueue');
    this.sweep();
    return Promise.resolve();
  }

  private healthOf(sub: string): EndpointHealth {
    const row = this.sql.health.get(sub) as
      | {
          last_success: number | null;
          last_failure: number | null;
          failures: number;
          failing_since: number | null;
        }
      | undefined;
    if (!row) return NO_ATTEMPTS;
    return {
      lastSuccess: row.last_success,
      lastFailure: row.last_failure,
      consecutiveFailures: row.failures,
      failingSince: row.failing_since,
    };
  }

  async health(subscriptions: string[]): Promise<EndpointHealth[]> {
    this.window.send(); // read what was finished
    return subscriptions.map((sub) => this.healthOf(sub));
  }

  async probe(subscription: string, now: number, until: number): Promise<boolean> {
    this.window.send(); // an attempt finished meanwhile ends the lease
    return this.sql.probe.run(until, subscription, now).changes === 1;
  }

  /** A finished job's row: done, or due again at `next` with its new body. Returns rows changed. */
  private writeJob(row: number, jobId: string, body: string | null, next: number | null): number | bigint {
    if (next === null || body === null) return this.sql.complete.run(row, jobId).changes;
    const { changes } = this.sql.reschedule.run(next, row, jobId);
    if (changes) this.sql.insertBody.run(row, body);
    return changes;
  }

  /**
   * Files written before attempts had rows of columns kept each attempt's record as JSON in a
   * table `attempts` (the oldest without a `request_body` column: the body inside the record): its
   * rows move over, as the records they hold, in one transaction; then it is dropped. A row that
   * cannot be read as a record stays there, and the store opens all the same: one bad row must not
   * keep the store (and every delivery) down; it is tried again at the next open.
   */
  private moveOldAttempts(): void {
    const columns = this.db.prepare('PRAGMA table_info(attempts)').all() as { name: string }[];
    if (columns.length === 0) return;
    const requestBody = columns.some((c) => c.name === 'request_body')
      ? 'request_body'
      : 'NULL AS request_body';
    this.transaction(() => {
      const rows = this.db.prepare(`SELECT rowid, body, ${requestBody} FROM attempts`).iterate() as Iterable<{
        rowid: number;
        body: string;
        request_body: string | null;
      }>;
      const unread: number[] = [];
      for (const { rowid, body, request_body } of rows) {
        try {
          const record = JSON.parse(body) as AttemptRecord;
          if (request_body !== null) record.request.body = request_body;
          this.sql.insertAttempt.run(...attemptRow(attemptFields(attemptOfRecord(record), []), 0));
        } catch {
          unread.push(rowid);
        }
      }
      if (unread.length === 0) this.db.exec('DROP TABLE attempts');
      else
        this.db
          .prepare('DELETE FROM attempts WHERE rowid NOT IN (SELECT value FROM json_each(?))')
          .run(JSON.stringify(unread));
    });
  }

  /**
   * Files written before the schedule and the bodies were apart kept jobs in one table, `jobs`
   * (the oldest without a `sub` column): its rows move over by job id, in one transaction (a job
   * the schedule knows already keeps its row and body); then it is dropped.
   */
  private moveOldJobs(): void {
    const columns = this.db.prepare('PRAGMA table_info(jobs)').all() as { name: string }[];
    if (columns.length === 0) return;
    const sub = columns.some((c) => c.name === 'sub') ? 'sub' : 'NULL';
    this.transaction(() => {
      this.db.exec(`INSERT OR IGNORE INTO schedule (job_id, due, created, sub)
          SELECT job_id, due, created, ${sub} FROM jobs ORDER BY rowid;
        INSERT OR IGNORE INTO job_bodies (row, body)
          SELECT s.row, j.body FROM jobs j JOIN schedule s USING (job_id);
        DROP TABLE jobs;`);
    });
  }

  /** Forgets finished jobs and attempt records past the retention, at most once a minute. */
  private sweep(): void {
    const now = Date.now();
    if (now - this.sweptAt < 60_000) return;
    this.sweptAt = now;
    this.transaction(() => {
      const before = now - this.retentionMs;
      this.db
        .prepare(
          'DELETE FROM job_bodies WHERE row IN (SELECT row FROM schedule WHERE due IS NULL AND created < ?)',
        )
        .run(before);
      this.db.prepare('DELETE FROM schedule WHERE due IS NULL AND created < ?').run(before);
    });
    this.db.prepare('DELETE FROM attempt_log WHERE started < ?').run(now - this.retentionMs);
    this.db
      .prepare(
        'DELETE FROM endpoint_health WHERE max(coalesce(last_success, 0), coalesce(last_failure, 0)) < ?',
      )
      .run(now - this.retentionMs);
  }

  async nextDue(): Promise<number | undefined> {
    const row = this.db.prepare('SELECT min(due) AS due FROM schedule WHERE due IS NOT NULL').get() as {
      due: number | null;
    };
    return row.due ?? undefined;
  }

  async pending(): Promise<{ count: number; oldestDue: number | undefined }> {
    this.window.send(); // read what was finished
    const row = this.db
      .prepare('SELECT count(*) AS n, min(due) AS due FROM schedule WHERE due IS NOT NULL')
      .get() as {
      n: number;
      due: number | null;
    };
    return { count: row.n, oldestDue: row.due ?? undefined };
  }

  async attempts(subscription: string, q: { status?: StatusFilter; limit: number; skip: number }) {
    this.window.send(); // read what was finished
    // Failure filters repeat the partial index's condition, so they use it; successes are counted
    // as all attempts less failures, both from an index.
    const failed = "subscription_id = ? AND status != 'succeeded'";
    const where =
      q.status === 'failed'
        ? failed
        : q.status === 'dead_lettered'
          ? `${failed} AND status = 'dead_lettered'`
          : q.status === 'succeeded'
            ? "subscription_id = ? AND status = 'succeeded'"
            : 'subscription_id = ?';
    const args: (string | number)[] = [subscription];
    const count = (w: string) =>
      (this.db.prepare(`SELECT count(*) AS n FROM attempt_log WHERE ${w}`).get(subscription) as { n: number })
        .n;
    const total = q.status === 'succeeded' ? count('subscription_id = ?') - count(failed) : count(where);
    const rows = this.db
      .prepare(`SELECT * FROM attempt_log WHERE ${where} ORDER BY started DESC, id DESC LIMIT ? OFFSET ?`)
      .all(...args, q.limit, q.skip) as unknown as AttemptLogRow[];
    return { items: rows.map(attemptOfRow), total };
  }

  async attempt(id: string): Promise<AttemptRecord | undefined> {
    this.window.send(); // read what was finished
    const row = this.db.prepare('SELECT * FROM attempt_log WHERE id = ?').get(id) as
      | AttemptLogRow
      | undefined;
    return row ? attemptOfRow(row) : undefined;
  }

  async attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    this.window.send(); // read what was finished
    const rows = this.db
      .prepare('SELECT * FROM attempt_log WHERE owner = ? AND event_id = ? ORDER BY started, id')
      .all(owner, eventId) as unknown as AttemptLogRow[];
    return rows.map(attemptOfRow);
  }

  onEnqueue(listener: () => void): () => void {
    this.emitter.on('enqueue', listener);
    return () => this.emitter.off('enqueue', listener);
  }

  /** Once, however often it is called: the finishes waiting are written, later ones refused. */
  close(): Promise<void> {
    this.closing ??= this.shut();
    return this.closing;
  }

  private async shut(): Promise<void> {
    this.window.send();
    this.closed = true;
    this.emitter.removeAllListeners();
    if (this.db.isOpen) {
      await unwatch(this.path);
      this.db.close();
    }
  }
}
