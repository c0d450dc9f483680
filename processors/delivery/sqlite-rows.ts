// The SQLite delivery store's rows as the dispatching thread makes them and the store's thread
// takes them (threaded.ts): a job's body as JSON, a finish as flat fields with its attempt's
// columns, and the window that gathers the finishes of one group commit.
import type { SQLInputValue } from 'node:sqlite';
import { type Attempt, type AttemptRecord, type Job, recordOf } from './port.ts';

/** A job as the SQLite store writes it: its body is JSON, made by the caller (on the embedded
 * profile, the main thread: a string crosses to the store's thread for the price of a copy). */
export interface JobRow {
  job_id: string;
  subscription_id: string;
  body: string;
}

export const jobRow = (j: Job): JobRow => ({
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
export const FINISH_ATTEMPT = 3;
export const FINISH_JOB_ID = FINISH_ATTEMPT + 1;

/**
 * An attempt as its row of `attempt_log` holds it, column by column in Attempt's order: the
 * request and the response each split into their parts, the headers as JSON; appended to `into`
 * (after a finish's first fields). A row of columns rather than the record as JSON: the keys, the
 * times as text and the fields the indexes hold already made the JSON 1 KB of a 1.3 KB row, and
 * the rows' bytes, written twice (the log and the checkpoint), were most of this store's CPU
 * (measured alone: 15 -> 9 µs a row for 1,280 -> 760 bytes).
 */
export function attemptFields(a: Attempt, into: unknown[]): unknown[] {
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
export const ATTEMPT_FIELDS = 24;
/** Where the four times (scheduled to next) stand among an attempt's fields. */
const ATTEMPT_TIMES = { first: 13, last: 16 };
export const FINISH_FIELDS = FINISH_ATTEMPT + ATTEMPT_FIELDS;
/** attempt_log's columns, in attemptFields' order. */
export const ATTEMPT_COLUMNS =
  'id, job_id, subscription_id, owner, event_id, event_type, kind, attempt, status, outcome, response_code, error, duration_ms, scheduled, started, finished, next, url, request_headers, request_body, response_status, response_headers, response_body, response_truncated';

/** attemptFields from `at` as the row's values. */
export function attemptRow(f: unknown[], at: number): SQLInputValue[] {
  const row = f.slice(at, at + ATTEMPT_FIELDS) as (SQLInputValue | undefined)[];
  // A value left undefined is written as null, as JSON would have it: SQLite refuses undefined,
  // and one finish it refused would fail the whole window's commit with it.
  for (let i = 0; i < ATTEMPT_FIELDS; i++) if (row[i] === undefined) row[i] = null;
  // An old record's time that could not be read (NaN) is null too.
  for (let t = ATTEMPT_TIMES.first; t <= ATTEMPT_TIMES.last; t++) if (!Number.isFinite(row[t])) row[t] = null;
  return row as SQLInputValue[];
}

/** A row of attempt_log: the attempt's fields, the request and response apart. */
export type AttemptLogRow = Omit<Attempt, 'scheduled' | 'finished' | 'request' | 'response'> & {
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
export function attemptOfRow({ url, request_headers, request_body, ...r }: AttemptLogRow): AttemptRecord {
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
export class FinishWindow {
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

export const claimed = ({ body, due }: { body: string; due: number }) => ({
  job: JSON.parse(body) as Job,
  due,
});
