// The dispatcher's durable state: pending jobs with their due time (new ones, and retries), and
// the record of every attempt. Adapters: SQLite (embedded; a file of its own in HUB_DATA_DIR) and
// Redis (distributed; shared by every dispatcher process; the hub keeps its attempt records in
// PostgreSQL, processors/postgres-logs.ts). Jobs are claimed with a lease that the
// dispatcher renews while it holds them: one that dies mid-attempt leaves the job to be claimed
// again when the lease ends.
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import type { Redis } from 'ioredis';
import { type InMessage, type OutMessage, SCHEMA_HEADER } from '../infra/bus/port.ts';
import { BACKSTOP_PAGES, BUSY_TIMEOUT_MS, unwatch, watch } from '../infra/checkpointer.ts';
import { OnDemandThread, ThreadChannel } from '../infra/threads.ts';
import type { SchemaRegistry } from '../schemas/registry.ts';
import type { WebhookEvent } from './derive.ts';

export type DeliveryKind = 'event' | 'test' | 'replay' | 'redeliver';

export interface Job {
  job_id: string;
  subscription_id: string;
  owner: string;
  kind: DeliveryKind;
  event: WebhookEvent;
  /** Attempts made so far. */
  attempt: number;
  /** When the job was first handed to the dispatcher, ms. */
  enqueued: number;
}

export type AttemptStatus = 'succeeded' | 'failed' | 'dead_lettered';
export type Outcome = '2xx' | '3xx' | '4xx' | '5xx' | 'timeout' | 'network' | 'refused_address';

export interface AttemptRecord {
  id: string;
  job_id: string;
  subscription_id: string;
  owner: string;
  event_id: string;
  event_type: string;
  kind: DeliveryKind;
  attempt: number;
  /** `failed`: this attempt failed and another is scheduled; `dead_lettered`: failed, no more. */
  status: AttemptStatus;
  outcome: Outcome;
  response_code: number | null;
  error: string | null;
  duration_ms: number;
  scheduled_at: string;
  started_at: string;
  finished_at: string;
  next_attempt_at: string | null;
  request: { url: string; headers: Record<string, string>; body: string };
  response: { status: number; headers: Record<string, string>; body: string; truncated: boolean } | null;
}

/**
 * An attempt as the dispatcher makes it and the stores take it: the record's fields with its four
 * times in ms. They become ISO strings only when a record is read or kept as JSON (`recordOf`):
 * made at every attempt and parsed back by the SQLite store, they took 2.1 µs an attempt
 * (measured alone; 0.06 as numbers).
 */
export type Attempt = Omit<
  AttemptRecord,
  'scheduled_at' | 'started_at' | 'finished_at' | 'next_attempt_at'
> & {
  scheduled: number;
  started: number;
  finished: number;
  next: number | null;
};

/** An attempt as the API shows it (and the Redis store keeps it). */
export function recordOf(a: Attempt): AttemptRecord {
  return {
    id: a.id,
    job_id: a.job_id,
    subscription_id: a.subscription_id,
    owner: a.owner,
    event_id: a.event_id,
    event_type: a.event_type,
    kind: a.kind,
    attempt: a.attempt,
    status: a.status,
    outcome: a.outcome,
    response_code: a.response_code,
    error: a.error,
    duration_ms: a.duration_ms,
    // Null only in rows moved from an older version's records whose times could not be read.
    scheduled_at: isoOrNull(a.scheduled) as string,
    started_at: isoOrNull(a.started) as string,
    finished_at: isoOrNull(a.finished) as string,
    next_attempt_at: isoOrNull(a.next),
    request: a.request,
    response: a.response,
  };
}

/** recordOf's inverse: a record kept as JSON by an older version, as an attempt. */
export function attemptOfRecord({
  scheduled_at,
  started_at,
  finished_at,
  next_attempt_at,
  ...r
}: AttemptRecord): Attempt {
  return {
    ...r,
    scheduled: Date.parse(scheduled_at),
    started: Date.parse(started_at),
    finished: Date.parse(finished_at),
    next: next_attempt_at === null ? null : Date.parse(next_attempt_at),
  };
}

const isoOrNull = (ms: number | null) => (ms === null ? null : isoTime(ms));

let isoSecond = Number.NaN;
let isoPrefix = '';
/** `new Date(ms).toISOString()`, the date and time of the second kept from the last call: the
 * Redis store makes four at every finish, and the records of a page read were mostly made in the
 * same few seconds. */
export function isoTime(ms: number): string {
  const second = Math.floor(ms / 1000);
  if (second !== isoSecond) {
    const whole = new Date(ms).toISOString();
    if (whole.length !== 24) return whole; // a year beyond 9999: not cached
    isoSecond = second;
    isoPrefix = whole.slice(0, 20);
  }
  const milli = ms - second * 1000;
  return `${isoPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}

const JOB_SCHEMA = 'DeliveryJob';

/** A job as the `deliveries` topic carries it (Avro, the schema named in a header). */
export function encodeJob(registry: SchemaRegistry, j: Job): OutMessage {
  return {
    key: j.subscription_id,
    value: registry.encode(JOB_SCHEMA, {
      job_id: j.job_id,
      subscription_id: j.subscription_id,
      owner: j.owner,
      kind: j.kind,
      attempt: 1,
      not_before: 0,
      event: { ...j.event, data: JSON.stringify(j.event.data) },
    }),
    headers: { [SCHEMA_HEADER]: `${JOB_SCHEMA}.v${registry.currentVersion(JOB_SCHEMA)}` },
  };
}

export function decodeJob(registry: SchemaRegistry, m: InMessage): Job {
  const version = Number(/\.v(\d+)$/.exec(m.headers[SCHEMA_HEADER] ?? '')?.[1] ?? 1);
  const j = registry.decode(JOB_SCHEMA, version, m.value) as Omit<Job, 'event'> & {
    event: Omit<WebhookEvent, 'data'> & { data: string };
  };
  return {
    job_id: j.job_id,
    subscription_id: j.subscription_id,
    owner: j.owner,
    kind: j.kind,
    event: {
      ...j.event,
      created: Number(j.event.created),
      source_position: Number(j.event.source_position),
      created_ms: Number(j.event.created_ms),
      data: JSON.parse(j.event.data),
    },
    attempt: 0,
    enqueued: Date.now(),
  };
}

/** `failed` lists every attempt that did not succeed, dead-lettered ones included. */
export type StatusFilter = 'succeeded' | 'failed' | 'dead_lettered';

export interface DeliveryStore extends AttemptReads {
  /** Adds jobs due now; a job id seen within the retention is left alone (a job sent twice).
   * With `hold`, the listed jobs that are new are claimed in the same write, leased until
   * `until`, and returned: the dispatcher starts them at once instead of reading them back. */
  enqueue(jobs: Job[], hold?: Hold): Promise<Job[]>;
  /** Due jobs, oldest first, each leased for `leaseMs` (claimed again after it unless finished or
   * renewed); with `rooms`, no more of a subscription's jobs than its room. Jobs passed over stay
   * due, unless a long run of them hid every other job: then they are pushed back a second, so a
   * slow subscription's backlog cannot hide the jobs of others. */
  claim(now: number, limit: number, leaseMs: number, rooms?: Rooms): Promise<{ job: Job; due: number }[]>;
  /** Extends the leases of claimed jobs to `until`; a job finished meanwhile is left alone. */
  renew(jobIds: string[], until: number): Promise<void>;
  /** Records an attempt; the job is due again at `next`, or done when null. `fresh`: the job was
   * delivered before it was ever stored (handed off to this process): it is stored only if it is
   * due again, and need not be kept once done (its attempt is its record). */
  finish(job: Job, attempt: Attempt | null, next: number | null, fresh?: boolean): Promise<void>;
  /** The earliest due time, if any job is pending. */
  nextDue(): Promise<number | undefined>;
  pending(): Promise<{ count: number; oldestDue: number | undefined }>;
  /** Called when jobs become due sooner than the caller may think (in this process). */
  onEnqueue(listener: () => void): () => void;
  close(): Promise<void>;
}

/**
 * Where a store keeps its attempt records when they do not live beside its schedule: the
 * distributed profile's Redis schedule records them in PostgreSQL (processors/postgres-logs.ts),
 * so that Redis holds the work in flight and not the retention's history.
 */
export interface AttemptLog<Row = unknown> extends AttemptReads {
  /** The attempt as the log writes it; throws when it cannot be made (its finish then fails
   * alone, not its batch). */
  rowOf(a: Attempt): Row;
  /** Durable when it resolves; idempotent by attempt id. */
  append(rows: Row[]): Promise<void>;
}

/** The delivery log's reads: of a delivery store, or of the attempt log it records in. */
export interface AttemptReads {
  attempts(
    subscription: string,
    q: { status?: StatusFilter; limit: number; skip: number },
  ): Promise<{ items: AttemptRecord[]; total: number }>;
  attempt(id: string): Promise<AttemptRecord | undefined>;
  attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]>;
}

/** How many jobs of each subscription a claim may take: `of` for those listed, else `otherwise`. */
export interface Rooms {
  of: Record<string, number>;
  otherwise: number;
}

/** A claim looks at most this many due jobs per job it may take before giving up on the rest. */
const CLAIM_SCAN_FACTOR = 8;
/** How far a claim pushes back the jobs it passed over when they hid every other job, ms. */
export const PASSED_OVER_MS = 1000;
/** How often a Redis store measures its clock against Redis's. */
const CLOCK_SYNC_MS = 60_000;

export interface Hold {
  ids: string[];
  until: number;
}

/** A job as the SQLite store writes it: its body is JSON, made by the caller (on the embedded
 * profile, the main thread: a string crosses to the store's thread for the price of a copy). */
export interface JobRow {
  job_id: string;
  subscription_id: string;
  body: string;
}

const jobRow = (j: Job): JobRow => ({
  job_id: j.job_id,
  subscription_id: j.subscription_id,
  body: JSON.stringify(j),
});

/**
 * A finish as the SQLite store takes it, in FINISH_FIELDS values: whether the job was never stored
 * (`fresh`), its next due time and its body when it is due again (else null), then the attempt's
 * (attemptFields), or without one, null but for the job's id and subscription in their places.
 * Flat strings and numbers, so that a window's finishes cross to the store's thread as one array:
 * an object per finish cost more to copy than to write.
 */
function finishFields(into: unknown[], job: Job, a: Attempt | null, next: number | null, fresh: boolean) {
  into.push(fresh, next, next === null ? null : JSON.stringify(job));
  if (a) attemptFields(a, into);
  else {
    into.push(null, job.job_id, job.subscription_id);
    for (let i = 3; i < ATTEMPT_FIELDS; i++) into.push(null);
  }
}
/** Where a finish's attempt fields start, and its job's id and subscription among them. */
const FINISH_ATTEMPT = 3;
const FINISH_JOB_ID = FINISH_ATTEMPT + 1;

/**
 * An attempt as its row of `attempt_log` holds it, column by column in Attempt's order: the
 * request and the response each split into their parts, the headers as JSON; appended to `into`
 * (after a finish's first fields). A row of columns rather than the record as JSON: the keys, the
 * times as text and the fields the indexes hold already made the JSON 1 KB of a 1.3 KB row, and
 * the rows' bytes, written twice (the log and the checkpoint), were most of this store's CPU
 * (measured alone: 15 -> 9 µs a row for 1,280 -> 760 bytes).
 */
function attemptFields(a: Attempt, into: unknown[]): unknown[] {
  const r = a.response;
  into.push(
    a.id,
    a.job_id,
    a.subscription_id,
    a.owner,
    a.event_id,
    a.event_type,
    a.kind,
    a.attempt,
    a.status,
    a.outcome,
    a.response_code,
    a.error,
    a.duration_ms,
    a.scheduled,
    a.started,
    a.finished,
    a.next,
    a.request.url,
    JSON.stringify(a.request.headers),
    a.request.body ?? null,
    r ? r.status : null,
    r ? JSON.stringify(r.headers) : null,
    r ? r.body : null,
    r ? Number(r.truncated) : null,
  );
  return into;
}
const ATTEMPT_FIELDS = 24;
/** Where the four times (scheduled to next) stand among an attempt's fields. */
const ATTEMPT_TIMES = { first: 13, last: 16 };
const FINISH_FIELDS = FINISH_ATTEMPT + ATTEMPT_FIELDS;
/** attempt_log's columns, in attemptFields' order. */
const ATTEMPT_COLUMNS =
  'id, job_id, subscription_id, owner, event_id, event_type, kind, attempt, status, outcome, response_code, error, duration_ms, scheduled, started, finished, next, url, request_headers, request_body, response_status, response_headers, response_body, response_truncated';

/** attemptFields from `at` as the row's values. */
function attemptRow(f: unknown[], at: number): SQLInputValue[] {
  const row = f.slice(at, at + ATTEMPT_FIELDS) as (SQLInputValue | undefined)[];
  // A value left undefined is written as null, as JSON would have it: SQLite refuses undefined,
  // and one finish it refused would fail the whole window's commit with it.
  for (let i = 0; i < ATTEMPT_FIELDS; i++) if (row[i] === undefined) row[i] = null;
  // An old record's time that could not be read (NaN) is null too.
  for (let t = ATTEMPT_TIMES.first; t <= ATTEMPT_TIMES.last; t++) if (!Number.isFinite(row[t])) row[t] = null;
  return row as SQLInputValue[];
}

/** A row of attempt_log: the attempt's fields, the request and response apart. */
type AttemptLogRow = Omit<Attempt, 'scheduled' | 'finished' | 'request' | 'response'> & {
  // Null only in rows moved from an older version's records whose times could not be read.
  scheduled: number | null;
  finished: number | null;
  url: string;
  request_headers: string | null;
  request_body: string;
  response_status: number | null;
  response_headers: string | null;
  response_body: string | null;
  response_truncated: number | null;
};

/** A row of attempt_log as the record it was written from. */
function attemptOfRow({ url, request_headers, request_body, ...r }: AttemptLogRow): AttemptRecord {
  const { response_status, response_headers, response_body, response_truncated, ...a } = r;
  return recordOf({
    ...(a as Omit<Attempt, 'request' | 'response'>), // recordOf shows a null time as null
    request: { url, headers: JSON.parse(request_headers ?? 'null'), body: request_body },
    response:
      response_status === null
        ? null
        : {
            status: response_status,
            headers: JSON.parse(response_headers!),
            body: response_body!,
            truncated: response_truncated === 1,
          },
  });
}

/**
 * Finishes are committed together, up to FINISH_WINDOW_MS after the first of them (sooner at
 * FINISH_BATCH, or when attempts are read): see FinishWindow. A commit rewrites every index page it touched, one per
 * subscription of the batch in the attempts' index by subscription: measured alone, 30 attempts a
 * commit cost 17-24 µs each, 300 cost 10. The window delays only the record (the POST has been
 * answered) and the job's release, never a delivery.
 */
const FINISH_WINDOW_MS = 10;
const FINISH_BATCH = 500;

/**
 * The finishes of one group commit, in finishFields' values: handed to `commit` as one array
 * FINISH_WINDOW_MS after the first of them (sooner at FINISH_BATCH of them, or at `send`, before a
 * read), every finisher answered by that one commit. Both SQLite stores gather with it: in the
 * store itself, or on the dispatching thread, whose window then crosses to the store's thread as
 * one message (sent every turn, finishes woke that thread thousands of times a second).
 */
class FinishWindow {
  private readonly commit: (fields: unknown[]) => Promise<void>;
  /** finishFields' values of every finish gathered, one after another: no array of their own. */
  private fields: unknown[] = [];
  private count = 0;
  private answer: Promise<void> | undefined;
  private settle: (committed: Promise<void>) => void = () => {};
  private timer: NodeJS.Timeout | undefined;

  constructor(commit: (fields: unknown[]) => Promise<void>) {
    this.commit = commit;
  }

  add(job: Job, attempt: Attempt | null, next: number | null, fresh: boolean): Promise<void> {
    const start = this.fields.length;
    try {
      finishFields(this.fields, job, attempt, next, fresh);
    } catch (err) {
      this.fields.length = start; // part of its values would shift every later finish of the window
      return Promise.reject(err);
    }
    if (!this.answer) {
      this.answer = new Promise((resolve) => {
        this.settle = resolve;
      });
      this.timer = setTimeout(() => this.send(), FINISH_WINDOW_MS);
    }
    const answer = this.answer;
    if (++this.count >= FINISH_BATCH) this.send();
    return answer;
  }

  /** Commits what is gathered now. */
  send(): void {
    if (!this.answer) return;
    const { fields, settle } = this;
    clearTimeout(this.timer);
    this.fields = [];
    this.count = 0;
    this.answer = undefined;
    let committed: Promise<void>;
    try {
      committed = this.commit(fields);
    } catch (err) {
      committed = Promise.reject(err); // no thread could be started: each finisher hears of it
    }
    settle(committed);
  }
}

interface FinishedJob {
  job: Job;
  attempt: Attempt | null;
  next: number | null;
  done: (err?: Error) => void;
}

const filterKey = (a: Attempt): StatusFilter[] =>
  a.status === 'succeeded' ? ['succeeded'] : a.status === 'failed' ? ['failed'] : ['failed', 'dead_lettered'];

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

/** The jobs whose ids a store reports held, each once (a job may come twice in one batch). */
const heldOf = (jobs: Job[], ids: Iterable<string>): Job[] => {
  const held = new Set(ids);
  return jobs.filter((j) => held.delete(j.job_id));
};

const claimed = ({ body, due }: { body: string; due: number }) => ({ job: JSON.parse(body) as Job, due });

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
    | 'renew',
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
    // random (ids now lead with the change's stored time: eventId and jobId, processors/derive.ts).
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
      CREATE INDEX IF NOT EXISTS attempt_log_event ON attempt_log (owner, event_id);`);
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
        if (fields[a] !== null) this.sql.insertAttempt.run(...attemptRow(fields, a));
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
      this.db.exec('COMMIT');
    } catch (err) {
      if (this.db.isTransaction) this.db.exec('ROLLBACK');
      return Promise.reject(err);
    }
    if (due) this.emitter.emit('enqueue');
    this.sweep();
    return Promise.resolve();
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

/** What the thread serves of its SqliteDeliveryStore. */
const THREAD_METHODS = [
  'enqueueRows',
  'claimRows',
  'renew',
  'finishRows',
  'nextDue',
  'pending',
  'attempts',
  'attempt',
  'attemptsOfEvent',
  'close',
] as const satisfies readonly (keyof SqliteDeliveryStore)[];

/**
 * The SQLite store on a thread of its own (what the embedded profile runs): SQLite's work, a
 * third of a delivery's cost on one thread, runs beside the HTTP work instead of before it. Calls
 * go through a ThreadChannel (those of one turn as one message, and their answers too). If the
 * thread dies, the calls waiting on it fail (their jobs are claimed again when their leases end)
 * and the next call starts a new one on the same file.
 */
export class ThreadedDeliveryStore implements DeliveryStore {
  private readonly path: string;
  private readonly retentionMs: number;
  private readonly emitter = new EventEmitter();
  private readonly thread: OnDemandThread;
  /** Finishes gathering for the next group commit, sent to the thread as one call. */
  private readonly window = new FinishWindow((fields) => this.call('finishRows', fields));

  constructor(path: string, o: { retentionMs: number }) {
    this.path = path;
    this.retentionMs = o.retentionMs;
    this.emitter.setMaxListeners(0);
    this.thread = new OnDemandThread({
      url: new URL(import.meta.url),
      workerData: { deliveryStore: { path: this.path, retentionMs: this.retentionMs } },
      name: "the delivery store's thread",
      setup: (channel) =>
        channel.serve('events', { enqueued: () => this.emitter.emit('enqueue') }, ['enqueued']),
    });
  }

  private call<T>(method: (typeof THREAD_METHODS)[number], ...args: unknown[]): Promise<T> {
    return this.thread.channel().call('store', method, args) as Promise<T>;
  }

  // Jobs and attempts cross to the thread as JSON (made here) and come back as JSON (parsed here):
  // copying a string is cheaper than cloning the object on one side and serializing it on the other.
  async enqueue(jobs: Job[], hold?: Hold): Promise<Job[]> {
    if (jobs.length === 0) return [];
    return heldOf(jobs, await this.call<string[]>('enqueueRows', jobs.map(jobRow), hold));
  }
  async claim(
    now: number,
    limit: number,
    leaseMs: number,
    rooms?: Rooms,
  ): Promise<{ job: Job; due: number }[]> {
    return (await this.call<{ body: string; due: number }[]>('claimRows', now, limit, leaseMs, rooms)).map(
      claimed,
    );
  }
  renew(jobIds: string[], until: number): Promise<void> {
    return this.call('renew', jobIds, until);
  }
  /** Group-committed on this thread: the window crosses as one message, committed at once. */
  finish(job: Job, attempt: Attempt | null, next: number | null, fresh = false): Promise<void> {
    return this.window.add(job, attempt, next, fresh);
  }
  nextDue(): Promise<number | undefined> {
    this.window.send();
    return this.call('nextDue');
  }
  pending(): Promise<{ count: number; oldestDue: number | undefined }> {
    this.window.send();
    return this.call('pending');
  }
  attempts(subscription: string, q: { status?: StatusFilter; limit: number; skip: number }) {
    this.window.send();
    return this.call<{ items: AttemptRecord[]; total: number }>('attempts', subscription, q);
  }
  attempt(id: string): Promise<AttemptRecord | undefined> {
    this.window.send();
    return this.call('attempt', id);
  }
  attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    this.window.send();
    return this.call('attemptsOfEvent', owner, eventId);
  }
  onEnqueue(listener: () => void): () => void {
    this.emitter.on('enqueue', listener);
    return () => this.emitter.off('enqueue', listener);
  }
  async close(): Promise<void> {
    this.window.send();
    await this.thread.stop((channel) => channel.call('store', 'close', []));
    this.emitter.removeAllListeners();
  }
}

// The thread of a ThreadedDeliveryStore: the SQLite store, answering the calls posted to it.
if (!isMainThread && workerData?.deliveryStore) {
  const { path, retentionMs } = workerData.deliveryStore as { path: string; retentionMs: number };
  const store = new SqliteDeliveryStore(path, { retentionMs });
  const channel = new ThreadChannel(parentPort!);
  channel.serve('store', store, THREAD_METHODS);
  store.onEnqueue(() => channel.send('events', 'enqueued', []));
}

// ARGV: now, retention, the lease's end, the holder; then per job its id, its body and whether to
// hold it ('1' or ''). Returns the ids of the jobs held (leased at once instead of scheduled).
const ENQUEUE = `
local due, ttl, lease, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local held = {}
for i = 5, #ARGV, 3 do
  if redis.call('SET', 'hub:job:' .. ARGV[i], ARGV[i + 1], 'NX', 'PX', ttl) then
    if ARGV[i + 2] == '1' then
      redis.call('ZADD', 'hub:jobs:leased', lease, ARGV[i])
      redis.call('HSET', 'hub:jobs:holder', ARGV[i], holder)
      table.insert(held, ARGV[i])
    else
      redis.call('ZADD', 'hub:jobs:due', due, ARGV[i])
    end
  end
end
return held
`;
// Leases whose holder stopped renewing them come first, then due jobs; each moves to the leased
// set, scored by the lease's end, and is recorded as the claimer's in hub:jobs:holder. ARGV: now,
// limit, lease ms, how many jobs to look at, the room of a subscription not listed (-1: no rooms),
// how far to push back jobs passed over, the claimer; then pairs of subscription and room. A job
// passed over stays where it is, unless the jobs passed over filled the whole look and none was
// taken: then they are pushed back.
const CLAIM = `
local now, limit, lease, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local otherwise, later, holder = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local room = {}
for i = 8, #ARGV, 2 do room[ARGV[i]] = tonumber(ARGV[i + 1]) end
local out = {}
local taken = 0
for _, set in ipairs({'hub:jobs:leased', 'hub:jobs:due'}) do
  if taken >= limit then break end
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'WITHSCORES', 'LIMIT', 0, scan)
  local passed = {}
  local before = taken
  for i = 1, #ids, 2 do
    if taken >= limit then break end
    local body = redis.call('GET', 'hub:job:' .. ids[i])
    if not body then
      redis.call('ZREM', set, ids[i])
      redis.call('HDEL', 'hub:jobs:holder', ids[i])
    else
      local sub = otherwise < 0 and '' or string.match(body, '^{"subscription_id":"([^"]*)"') or ''
      local left = otherwise < 0 and 1 or room[sub] or otherwise
      if left > 0 then
        room[sub] = left - 1
        taken = taken + 1
        redis.call('ZREM', set, ids[i])
        redis.call('ZADD', 'hub:jobs:leased', now + lease, ids[i])
        redis.call('HSET', 'hub:jobs:holder', ids[i], holder)
        table.insert(out, body)
        table.insert(out, ids[i + 1])
      else
        table.insert(passed, ids[i])
      end
    end
  end
  if taken == before and #ids >= scan * 2 then
    for _, id in ipairs(passed) do
      redis.call('ZREM', set, id)
      redis.call('ZADD', 'hub:jobs:due', now + later, id)
    end
  end
end
return out
`;

// One call for a batch of finished jobs: ARGV now, retention, the finisher, how long a done job's
// id is kept (its body goes at once: a done job is sized by traffic, kept only to know one sent
// twice, which happens within minutes of it: a consumer or a processor that restarts), then per job seven
// fields: job id, job body, next due ('' when done), attempt id ('' when none), attempt body,
// started ms, the attempt's index keys (space-separated). The attempt is recorded in any case; the
// job's state changes only if the finisher holds its lease: a dispatcher that lost its lease (it
// stalled past it, or Redis was out of its reach) and finishes late neither brings back a job its
// new holder completed nor cancels the retry it scheduled.
const FINISH = `
local now, ttl, finisher, doneTtl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local indexes, seen = {}, {}
for i = 5, #ARGV, 7 do
  local job, next, att = ARGV[i], ARGV[i + 2], ARGV[i + 3]
  if att ~= '' then
    redis.call('SET', 'hub:att:' .. att, ARGV[i + 4], 'PX', ttl)
    for key in string.gmatch(ARGV[i + 6], '%S+') do
      redis.call('ZADD', key, ARGV[i + 5], att)
      if not seen[key] then
        seen[key] = true
        indexes[#indexes + 1] = key
      end
    end
  end
  local holder = redis.call('HGET', 'hub:jobs:holder', job)
  local mine = holder == finisher
  if not holder then
    -- Unnamed: an older version's lease, a job due and never claimed, or one not known here (a
    -- job delivered before it was stored) may change; a done one (known, in neither set) not.
    mine = redis.call('EXISTS', 'hub:job:' .. job) == 0 or redis.call('ZSCORE', 'hub:jobs:leased', job)
      or redis.call('ZSCORE', 'hub:jobs:due', job)
  end
  if mine then
    -- Due again it is nobody's (''), until its next claim: a late finish of its last holder finds
    -- it named for someone else. Done, its name goes.
    if next == '' then redis.call('HDEL', 'hub:jobs:holder', job)
    else redis.call('HSET', 'hub:jobs:holder', job, '') end
    if next == '' then redis.call('SET', 'hub:job:' .. job, '', 'PX', doneTtl)
    else redis.call('SET', 'hub:job:' .. job, ARGV[i + 1], 'PX', ttl) end
    redis.call('ZREM', 'hub:jobs:leased', job)
    if next == '' then
      redis.call('ZREM', 'hub:jobs:due', job)
    else
      redis.call('ZADD', 'hub:jobs:due', next, job)
    end
  end
end
-- Each index trimmed past the retention and its expiry moved once a call, after its last addition
-- (a subscription's keys recur at most of a batch's finishes).
for _, key in ipairs(indexes) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (now - ttl))
  redis.call('PEXPIRE', key, ttl)
end
return 0
`;

// ARGV: the leases' new end, the renewer, then job ids. XX: only jobs still leased (a finish
// removed its job from the set in the same script that scheduled or completed it, so a renewal
// racing it changes nothing), and only the renewer's: a dispatcher that lost a lease to another
// does not extend that one's.
const RENEW = `
local ends, renewer = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  local holder = redis.call('HGET', 'hub:jobs:holder', ARGV[i])
  if not holder or holder == renewer then redis.call('ZADD', 'hub:jobs:leased', 'XX', ends, ARGV[i]) end
end
return 0
`;

/** A finish as FINISH takes it: the job's id, body and next due time, then the attempt's id,
 * record, start and index keys (empty without an attempt, or when it is recorded elsewhere). */
function redisFinish(
  { job, attempt, next }: FinishedJob,
  offset: number,
  record: boolean,
): (string | number)[] {
  // A finished job's record only marks its id as seen (a job sent twice is known): no body.
  const values: (string | number)[] = [
    job.job_id,
    next === null ? '' : redisBody(job),
    next === null ? '' : next + offset, // on Redis's clock
  ];
  if (!attempt || !record) values.push('', '', 0, '');
  else {
    const sub = attempt.subscription_id;
    const keys = [
      `hub:atts:${sub}`,
      ...filterKey(attempt).map((status) => `hub:atts:${sub}:${status}`),
      `hub:atts-evt:${attempt.owner}:${attempt.event_id}`,
    ];
    values.push(attempt.id, JSON.stringify(recordOf(attempt)), attempt.started, keys.join(' '));
  }
  return values;
}

/** A job as Redis keeps it: its subscription first, where the claim script reads it. */
function redisBody({ subscription_id, ...rest }: Job): string {
  return JSON.stringify({ subscription_id, ...rest });
}

type Scripted = Redis & {
  hubJobsEnqueue(...args: (string | number)[]): Promise<string[]>;
  hubJobsClaim(...args: (string | number)[]): Promise<string[]>;
  hubJobsFinish(...args: (string | number)[]): Promise<number>;
  hubJobsRenew(...args: (string | number)[]): Promise<number>;
};

/**
 * Redis layout: each job `hub:job:<id>` (its body while it is pending, then its id alone for
 * `doneJobsMs`, so a job sent twice is known),
 * the schedule `hub:jobs:due` (score: due ms), the claimed jobs `hub:jobs:leased` (score: the
 * lease's end; a job is in one of the two sets while pending); each attempt `hub:att:<id>`, indexed per
 * subscription (all, succeeded, failed, dead_lettered) and per event, all expiring with the retention.
 * With `records` (what the distributed profile runs), the attempts are written there instead, each
 * batch before the schedule's script: a batch whose records fail changes no job (its leases run
 * out, and the jobs are tried again), and one whose script fails has its attempts recorded.
 */
export class RedisDeliveryStore implements DeliveryStore {
  private readonly redis: Scripted;
  private readonly retentionMs: number;
  private readonly records: AttemptLog | undefined;
  private readonly doneJobsMs: number;
  private readonly emitter = new EventEmitter();
  /** Names this store's leases in hub:jobs:holder: its finishes and renewals act on those only. */
  private readonly holder = randomBytes(8).toString('hex');
  /**
   * Redis's clock less this process's, ms: the schedule's times (due, lease ends) are written and
   * read on Redis's clock, so that dispatchers on hosts whose clocks differ agree on them. Before,
   * a host 30 s behind wrote leases that had already ended for the others (who claimed its jobs
   * again at once), and its retries fired by its own clock. Measured with TIME at the start and
   * every CLOCK_SYNC_MS; the schedule's calls wait for the first measure.
   */
  private offset = 0;
  private readonly synced: Promise<void>;
  /** Set once the first measure is in: from then on no call awaits `synced`, which would give up
   * its turn and send its command apart from the turn's others (ioredis pipelines a turn's
   * commands into one write). */
  private measured = false;
  private readonly syncer: NodeJS.Timeout;
  private readonly clock: () => number;

  private finishing: FinishedJob[] = [];
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    redis: Redis,
    o: {
      retentionMs: number;
      /** This process's clock (tests). */
      clock?: () => number;
      /** Where the attempts are recorded; without it, in Redis. */
      records?: AttemptLog;
      /** How long a done job's id is kept, to know it if it is sent again (HUB_DONE_JOBS_KEPT_S). */
      doneJobsMs?: number;
    },
  ) {
    this.redis = redis as Scripted;
    this.doneJobsMs = Math.min(o.doneJobsMs ?? 900_000, o.retentionMs);
    this.records = o.records;
    this.clock = o.clock ?? Date.now;
    this.synced = this.sync();
    this.syncer = setInterval(() => void this.sync(), CLOCK_SYNC_MS);
    this.syncer.unref();
    if (!(redis as unknown as Partial<Scripted>).hubJobsFinish) {
      redis.defineCommand('hubJobsEnqueue', { numberOfKeys: 0, lua: ENQUEUE });
      redis.defineCommand('hubJobsClaim', { numberOfKeys: 0, lua: CLAIM });
      redis.defineCommand('hubJobsFinish', { numberOfKeys: 0, lua: FINISH });
      redis.defineCommand('hubJobsRenew', { numberOfKeys: 0, lua: RENEW });
    }
    this.retentionMs = o.retentionMs;
    this.emitter.setMaxListeners(0);
  }

  private async sync(): Promise<void> {
    try {
      const before = this.clock();
      const [seconds, micros] = await this.redis.time();
      const after = this.clock();
      // A slow answer says little about the clocks: the last measure stands.
      if (after - before <= 100)
        this.offset = Math.round(Number(seconds) * 1000 + Number(micros) / 1000 - (before + after) / 2);
    } catch {
      // Redis out of reach: the schedule's calls fail on their own; the last measure stands.
    }
    this.measured = true;
  }

  async enqueue(jobs: Job[], hold?: Hold): Promise<Job[]> {
    if (jobs.length === 0) return [];
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    const args: (string | number)[] = [
      this.clock() + this.offset,
      this.retentionMs,
      hold ? hold.until + this.offset : 0,
      this.holder,
    ];
    const holds = new Set(hold?.ids);
    for (const j of jobs) args.push(j.job_id, redisBody(j), holds.has(j.job_id) ? '1' : '');
    const ids = await this.redis.hubJobsEnqueue(...args);
    if (ids.length < jobs.length) this.emitter.emit('enqueue');
    return heldOf(jobs, ids);
  }

  async claim(
    now: number,
    limit: number,
    leaseMs: number,
    rooms?: Rooms,
  ): Promise<{ job: Job; due: number }[]> {
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    const at = now + this.offset;
    const args: (string | number)[] = rooms
      ? [at, limit, leaseMs, limit * CLAIM_SCAN_FACTOR, rooms.otherwise, PASSED_OVER_MS, this.holder]
      : [at, limit, leaseMs, limit, -1, 0, this.holder];
    for (const [sub, room] of Object.entries(rooms?.of ?? {})) args.push(sub, room);
    const flat = await this.redis.hubJobsClaim(...args);
    const out: { job: Job; due: number }[] = [];
    for (let i = 0; i < flat.length; i += 2)
      out.push({ job: JSON.parse(flat[i]!) as Job, due: Number(flat[i + 1]) - this.offset });
    return out;
  }

  /** Only jobs still leased, and to this store's holder: see RENEW. */
  async renew(jobIds: string[], until: number): Promise<void> {
    if (jobIds.length === 0) return;
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    await this.redis.hubJobsRenew(until + this.offset, this.holder, ...jobIds);
  }

  /** Group-committed: the jobs finished within one turn of the event loop share one script call. */
  finish(job: Job, attempt: Attempt | null, next: number | null): Promise<void> {
    return new Promise((resolve, reject) => {
      this.finishing.push({ job, attempt, next, done: (err) => (err ? reject(err) : resolve()) });
      if (this.finishing.length === 1)
        setImmediate(() => {
          this.flushing = this.flushFinished();
        });
    });
  }

  private async flushFinished(): Promise<void> {
    const batch = this.finishing;
    this.finishing = [];
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    // `now` trims the attempt indexes, scored by the attempts' own (this process's) start times.
    const args: (string | number)[] = [this.clock(), this.retentionMs, this.holder, this.doneJobsMs];
    const sent: FinishedJob[] = [];
    const rows: unknown[] = [];
    const { records } = this;
    for (const f of batch) {
      try {
        const values = redisFinish(f, this.offset, !records);
        if (records && f.attempt) rows.push(records.rowOf(f.attempt));
        args.push(...values);
        sent.push(f);
      } catch (err) {
        f.done(err as Error); // a finish that cannot be written fails alone, not its batch
      }
    }
    if (sent.length === 0) return;
    let failure: Error | undefined;
    try {
      if (rows.length > 0) await records!.append(rows);
      await this.redis.hubJobsFinish(...args);
    } catch (err) {
      failure = err as Error;
    }
    for (const f of sent) f.done(failure);
    if (!failure && sent.some((f) => f.next !== null)) this.emitter.emit('enqueue');
  }

  async nextDue(): Promise<number | undefined> {
    const [due, leased] = await Promise.all(
      ['hub:jobs:due', 'hub:jobs:leased'].map((k) => this.redis.zrange(k, '0', '0', 'WITHSCORES')),
    );
    const firsts = [due!, leased!].filter((f) => f.length > 0).map((f) => Number(f[1]));
    return firsts.length ? Math.min(...firsts) - this.offset : undefined;
  }

  async pending(): Promise<{ count: number; oldestDue: number | undefined }> {
    const [due, leased, oldestDue] = await Promise.all([
      this.redis.zcard('hub:jobs:due'),
      this.redis.zcard('hub:jobs:leased'),
      this.nextDue(),
    ]);
    return { count: due + leased, oldestDue };
  }

  private async bodies(ids: string[]): Promise<AttemptRecord[]> {
    if (ids.length === 0) return [];
    const bodies = await this.redis.mget(ids.map((id) => `hub:att:${id}`));
    return bodies.filter((b): b is string => b !== null).map((b) => JSON.parse(b) as AttemptRecord);
  }

  /** The oldest start an index entry may have and still be listed: an older one's record has
   * expired (it was written at the attempt's end, to expire a retention later), but the entry
   * stays until a finish of its subscription trims the index. */
  private get listedFrom(): number {
    return Date.now() - this.retentionMs;
  }

  async attempts(subscription: string, q: { status?: StatusFilter; limit: number; skip: number }) {
    if (this.records) return this.records.attempts(subscription, q);
    const key = q.status ? `hub:atts:${subscription}:${q.status}` : `hub:atts:${subscription}`;
    const from = this.listedFrom;
    const [ids, total] = await Promise.all([
      this.redis.zrevrangebyscore(key, '+inf', from, 'LIMIT', q.skip, q.limit),
      this.redis.zcount(key, from, '+inf'),
    ]);
    return { items: await this.bodies(ids), total };
  }

  async attempt(id: string): Promise<AttemptRecord | undefined> {
    if (this.records) return this.records.attempt(id);
    const body = await this.redis.get(`hub:att:${id}`);
    return body ? (JSON.parse(body) as AttemptRecord) : undefined;
  }

  async attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    if (this.records) return this.records.attemptsOfEvent(owner, eventId);
    return this.bodies(
      await this.redis.zrangebyscore(`hub:atts-evt:${owner}:${eventId}`, this.listedFrom, '+inf'),
    );
  }

  onEnqueue(listener: () => void): () => void {
    this.emitter.on('enqueue', listener);
    return () => this.emitter.off('enqueue', listener);
  }

  async close(): Promise<void> {
    clearInterval(this.syncer);
    while (this.finishing.length > 0) await new Promise((r) => setImmediate(r));
    await this.flushing;
    this.emitter.removeAllListeners();
  }
}
