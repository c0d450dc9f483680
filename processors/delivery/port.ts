// The delivery store port: the dispatcher's durable state, pending jobs with their due time (new
// ones, and retries), and the record of every attempt. Adapters beside this file: SQLite (embedded;
// a file of its own in HUB_DATA_DIR: sqlite.ts, on a thread of its own: threaded.ts) and Redis
// (distributed; shared by every dispatcher process: redis.ts; the hub keeps its attempt records in
// PostgreSQL, postgres.ts); test/processors/delivery/contract.ts holds them to the same rules. Jobs
// are claimed with a lease that the dispatcher renews while it holds them: one that dies
// mid-attempt leaves the job to be claimed again when the lease ends.
import type { WebhookEvent } from '../stream/derive.ts';
import type { EndpointHealth } from './health.ts';

/** `recover`: sent again by a bulk recovery (recovery.ts). */
export type DeliveryKind = 'event' | 'test' | 'replay' | 'redeliver' | 'recover';

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
  /** Its due time is a slot of its subscription's rate limit, reserved for it (throttle.ts). */
  slotted?: boolean;
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

/** `failed` lists every attempt that did not succeed, dead-lettered ones included. */
export type StatusFilter = 'succeeded' | 'failed' | 'dead_lettered';

export interface DeliveryStore extends AttemptReads {
  /** Adds jobs due now; a job id seen within the retention is left alone (a job sent twice).
   * With `hold`, the listed jobs that are new are claimed in the same write, leased until
   * `until`, and returned: the dispatcher starts them at once instead of reading them back. */
  enqueue(jobs: Job[], hold?: Hold): Promise<Job[]>;
  /** Of these job ids, those the store knows: pending, or done within the time it remembers done
   * jobs (a job sent twice, as the processor sends a change's jobs again after a crash). Stores
   * without it (the embedded ones: their hand-offs never come twice) leave every job new. */
  known?(jobIds: string[]): Promise<Set<string>>;
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
  /** Each listed subscription's endpoint health, in order (health.ts; NO_ATTEMPTS for one with no
   * attempt recorded): every attempt a finish records updates it in the same write, by
   * afterAttempt's rule, and ends the subscription's probe lease. Kept as long as the attempts. */
  health(subscriptions: string[]): Promise<EndpointHealth[]>;
  /** Takes the probe of a subscription's half-open circuit until `until` (ms), for all dispatchers
   * together: false while another holds it (its lease not ended, no attempt finished since). */
  probe(subscription: string, now: number, until: number): Promise<boolean>;
  /** The earliest due time, if any job is pending. */
  nextDue(): Promise<number | undefined>;
  pending(): Promise<{ count: number; oldestDue: number | undefined }>;
  /** Called when jobs become due sooner than the caller may think (in this process). */
  onEnqueue(listener: () => void): () => void;
  close(): Promise<void>;
}

/**
 * Where a store keeps its attempt records when they do not live beside its schedule: the
 * distributed profile's Redis schedule records them in PostgreSQL (postgres.ts),
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
export const CLAIM_SCAN_FACTOR = 8;
/** How far a claim pushes back the jobs it passed over when they hid every other job, ms. */
export const PASSED_OVER_MS = 1000;

export interface Hold {
  ids: string[];
  until: number;
}

/** The jobs whose ids a store reports held, each once (a job may come twice in one batch). */
export const heldOf = (jobs: Job[], ids: Iterable<string>): Job[] => {
  const held = new Set(ids);
  return jobs.filter((j) => held.delete(j.job_id));
};
