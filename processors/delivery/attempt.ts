// One delivery attempt, in the phases Svix's worker names a dispatch by: `prepare` (the request,
// signed), `call` (the HTTP exchange), then `handleSuccess` or `handleFailure` (the attempt's
// record, with the next attempt's time). What follows a failure, another attempt after a delay or
// none (dead-lettered), is `retryDelayS`: pure, from the retry policy, the attempt's number and how
// it ended, so that it is tested without a receiver.
import { randomBytes } from 'node:crypto';
import { nextDelayS, type RetryPolicy } from '../../domain/subscriptions.ts';
import type { WebhookEvent } from '../stream/derive.ts';
import { EgressError } from './egress.ts';
import type { Endpoint } from './endpoints.ts';
import type { DispatcherMetrics } from './metrics.ts';
import type { Attempt, Job, Outcome } from './port.ts';
import type { WebhookSigner } from './signing.ts';
import type { Answer, Target, WebhookHttp } from './webhook-http.ts';

/** A Retry-After (429, 503) is honoured between these bounds, seconds. */
export const RETRY_AFTER_BOUNDS = [1, 21_600] as const;

/** What a delivery carries of its event. */
type Delivered = Pick<
  WebhookEvent,
  'id' | 'type' | 'api_version' | 'created' | 'owner' | 'livemode' | 'data'
>;

/** The payload receivers get: the Event resource of the specification. */
export function payloadOf(event: Delivered, requestId: string) {
  return {
    id: event.id,
    type: event.type,
    api_version: event.api_version,
    created: event.created,
    owner: event.owner,
    request_id: requestId,
    livemode: event.livemode,
    data: event.data,
  };
}

/** Whether an answer (or its absence) is worth another attempt: the specification's table. */
export function retryable(outcome: Outcome, status: number | null): boolean {
  if (outcome === 'timeout' || outcome === 'network') return true;
  if (status === null) return false;
  return status === 408 || status === 425 || status === 429 || status >= 500;
}

/** Seconds from a Retry-After header (delta or HTTP date), within the bounds; undefined if absent. */
export function retryAfterS(header: string | undefined, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const s = /^\d+$/.test(header.trim()) ? Number(header) : (Date.parse(header) - now) / 1000;
  if (!Number.isFinite(s)) return undefined;
  return Math.min(Math.max(Math.ceil(s), RETRY_AFTER_BOUNDS[0]), RETRY_AFTER_BOUNDS[1]);
}

/**
 * After attempt `attempt` (1-based) of a job did not succeed: the delay before the next one,
 * seconds, or null when there is none and the job is dead-lettered. An outcome the specification's
 * table does not retry is dead-lettered at once; a retryable one waits the policy's delay, or the
 * receiver's Retry-After on a 429 or a 503 (within RETRY_AFTER_BOUNDS, a date read against
 * `finished`), until the policy's attempts are spent.
 */
export function retryDelayS(
  policy: RetryPolicy | null,
  attempt: number,
  { outcome, response, finished }: Pick<Attempt, 'outcome' | 'response' | 'finished'>,
): number | null {
  const status = response?.status ?? null;
  if (!retryable(outcome, status)) return null;
  const delayS = nextDelayS(policy, attempt);
  if (delayS === null) return null;
  if (status !== 429 && status !== 503) return delayS;
  return retryAfterS(response?.headers['retry-after'], finished) ?? delayS;
}

/** The request of an attempt, as `prepare` makes it: its id, and the body and headers as sent. */
interface Prepared {
  id: string;
  body: string;
  headers: Record<string, string>;
}

/**
 * A delivery's request, signed: the body and headers of every POST of a webhook, the dispatcher's
 * and `hub webhooks listen`'s (bin/listen.ts) alike. `id` is the attempt's (Webhook-Id and the
 * payload's `request_id`); `custom` the subscription's headers, ours over them.
 */
export function deliveryRequest(
  event: Delivered,
  id: string,
  signer: WebhookSigner,
  version: string,
  custom: Record<string, string> = {},
): { body: string; headers: Record<string, string> } {
  const body = JSON.stringify(payloadOf(event, id));
  const timestamp = Math.floor(Date.now() / 1000);
  const headers: Record<string, string> = {
    ...custom,
    'content-type': 'application/json',
    'user-agent': `Hub-Webhooks/${version}`,
    ...signer.headers(id, timestamp, body),
  };
  return { body, headers };
}

/** What `call` came to: how it ended, the receiver's answer (or why there is none), and when. */
interface Called {
  outcome: Outcome;
  response: Answer | null;
  error: string | null;
  started: number;
  finished: number;
}

/** A dispatcher's attempts: their ids, their HTTP side and their metrics. */
export class Attempts {
  /** Attempts in flight now (a gauge). */
  inFlight = 0;
  private readonly http: WebhookHttp;
  private readonly metrics: DispatcherMetrics;
  private readonly version: string;
  /** Attempt ids: a random prefix per process and a counter (unique without a syscall each). */
  private readonly idPrefix = randomBytes(7).toString('hex');
  private made = 0;

  constructor(o: { http: WebhookHttp; metrics: DispatcherMetrics; version: string }) {
    this.http = o.http;
    this.metrics = o.metrics;
    this.version = o.version;
  }

  /** One attempt of `job`, due at `due`: its record, with the next attempt's time if one follows. */
  async make(job: Job, due: number, endpoint: Endpoint): Promise<Attempt> {
    if (job.kind === 'recover' && job.attempt === 0) this.metrics.recoverySent.inc();
    const request = this.prepare(job, endpoint);
    const called = await this.call(endpoint.target, request);
    const attempt = attemptRecord(job, due, endpoint, request, called);
    return called.outcome === '2xx'
      ? this.handleSuccess(job, attempt)
      : this.handleFailure(endpoint, attempt);
  }

  /** The request: the payload, the subscription's headers and ours, signed with the secrets in force. */
  private prepare(job: Job, { sub, signer }: Endpoint): Prepared {
    const id = `del_${this.idPrefix}${(this.made++).toString(16).padStart(10, '0')}`;
    return { id, ...deliveryRequest(job.event, id, signer, this.version, sub.custom_headers) };
  }

  /** The POST and its answer, timed; never rejects (a failure is an outcome). A URL the egress rules
   * refuse is not called. */
  private async call(target: Target | EgressError, { headers, body }: Prepared): Promise<Called> {
    const started = Date.now();
    this.inFlight++;
    const startedAt = performance.now();
    const exchanged =
      target instanceof EgressError
        ? { outcome: 'refused_address' as const, error: target.message }
        : await this.http.post(target, headers, body);
    this.metrics.duration.observe((performance.now() - startedAt) / 1000);
    this.inFlight--;
    let outcome: Outcome;
    let error: string | null = null;
    if (exchanged.answer) {
      const code = exchanged.answer.status;
      outcome = code < 300 ? '2xx' : code < 400 ? '3xx' : code < 500 ? '4xx' : '5xx';
    } else {
      outcome = exchanged.outcome;
      error = exchanged.error;
    }
    const finished = Date.now();
    this.metrics.attempts(outcome).inc();
    return { outcome, response: exchanged.answer ?? null, error, started, finished };
  }

  /** A 2xx: the job is done. */
  private handleSuccess(job: Job, attempt: Attempt): Attempt {
    // From the change to its delivery: a test, a replay or a redelivery (of an event days old,
    // perhaps) is an operator's act, not the pipeline's delay.
    if (job.kind === 'event' && job.event.created_ms)
      this.metrics.latency.observe((attempt.finished - job.event.created_ms) / 1000);
    return attempt;
  }

  /** Anything else: tried again after retryDelayS, or dead-lettered. */
  private handleFailure({ sub }: Endpoint, attempt: Attempt): Attempt {
    const delayS = retryDelayS(sub.retry_policy, attempt.attempt, attempt);
    if (delayS === null) {
      attempt.status = 'dead_lettered';
      this.metrics.deadLettered.inc();
    } else {
      attempt.status = 'failed';
      attempt.next = attempt.finished + delayS * 1000;
      this.metrics.retries.inc();
    }
    return attempt;
  }

  /** Waits for the attempts in flight, then closes the connections. */
  close(): Promise<void> {
    return this.http.close();
  }
}

/** The attempt as the delivery store records it: succeeded and done, unless handleFailure says
 * otherwise. */
function attemptRecord(
  job: Job,
  due: number,
  { sub }: Endpoint,
  { id, headers, body }: Prepared,
  { outcome, response, error, started, finished }: Called,
): Attempt {
  return {
    id,
    job_id: job.job_id,
    subscription_id: job.subscription_id,
    owner: job.owner,
    event_id: job.event.id,
    event_type: job.event.type,
    kind: job.kind,
    attempt: job.attempt + 1,
    status: 'succeeded',
    outcome,
    response_code: response?.status ?? null,
    error,
    duration_ms: finished - started,
    scheduled: due,
    started,
    finished,
    next: null,
    request: { url: sub.url, headers, body },
    response,
  };
}
