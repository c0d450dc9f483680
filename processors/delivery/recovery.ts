// Bulk recovery (POST /webhooks/{id}/recover): a follower of the event store that, for each
// recovery asked for (domain/recoveries.ts), selects the subscription's deliveries that failed in
// its window and have not succeeded since, and queues each again as a delivery job of kind
// `recover`, through the schedule like any other job (so the subscription's in-flight limit and
// rate limit hold). Durable: the request is an event, the follower resumes from its checkpoint, and
// a selection run again after a crash queues the same job ids, which the schedule takes once. The
// progress is read from the delivery log: the attempts of the recovery's jobs.
import { Counter, type Registry } from 'prom-client';
import { decideQueued, type Recovery, recoveries, recoveryStream } from '../../domain/recoveries.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import type { EventStore, SubscribeOptions } from '../../infra/eventstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';
import { EventFollower } from '../followers/follower.ts';
import type { WebhookEvent } from '../stream/derive.ts';
import type { EventLog } from '../stream/eventlog.ts';
import type { AttemptReads, AttemptRecord, DeliveryStore, Job } from './port.ts';

/** Attempts read from the delivery log a page at a time. */
const PAGE = 500;

/** A recovery's job of an event: the same at every selection, so the schedule takes it once. */
export const recoveryJobId = (recoveryId: string, eventId: string) => `job_${recoveryId}_${eventId}`;

/**
 * The deliveries of a window to send again, one attempt per event: those of the events that have an
 * attempt failed (or dead-lettered) started in [since, until), and no attempt succeeded started
 * since `since` (a retry, a replay or an earlier recovery got it through). `failed` and `succeeded`
 * are the subscription's attempts of each status started since `since`, in any order.
 */
export function recoverable(
  failed: AttemptRecord[],
  succeeded: AttemptRecord[],
  window: { since: number; until: number },
): AttemptRecord[] {
  const got = new Set(succeeded.filter((a) => startedMs(a) >= window.since).map((a) => a.event_id));
  const latest = new Map<string, AttemptRecord>();
  for (const a of failed) {
    const at = startedMs(a);
    if (at < window.since || at >= window.until || got.has(a.event_id)) continue;
    const seen = latest.get(a.event_id);
    if (!seen || startedMs(seen) < at) latest.set(a.event_id, a);
  }
  return [...latest.values()].sort((x, y) => startedMs(x) - startedMs(y));
}

const startedMs = (a: AttemptRecord) => Date.parse(a.started_at);

/** The subscription's attempts of `status` started at or after `since`, newest first, every page. */
async function attemptsSince(
  reads: AttemptReads,
  subscription: string,
  since: number,
  status?: 'succeeded' | 'failed',
): Promise<AttemptRecord[]> {
  const all: AttemptRecord[] = [];
  for (let skip = 0; ; skip += PAGE) {
    const { items } = await reads.attempts(subscription, { status, limit: PAGE, skip });
    const within = items.filter((a) => startedMs(a) >= since);
    all.push(...within);
    if (items.length < PAGE || within.length < items.length) return all;
  }
}

/** The event an attempt delivered: from the account's event log, else as its request carried it
 * (a test event, or one past the log's retention). Replay and recovery send it again. */
export async function eventOfAttempt(log: EventLog, owner: string, a: AttemptRecord): Promise<WebhookEvent> {
  const sent = JSON.parse(a.request.body) as WebhookEvent & { request_id?: string };
  delete sent.request_id;
  return (
    (await log.get(owner, sent.id)) ?? {
      ...sent,
      resource_prn: '',
      source_position: 0,
      sequence: 0,
      created_ms: 0,
    }
  );
}

/** Selects a recovery's deliveries and queues them; answers how many. */
export async function queueRecovery(
  o: { deliveries: DeliveryStore; eventLog: EventLog },
  r: Recovery,
): Promise<number> {
  const window = { since: r.since, until: r.until };
  const [failed, succeeded] = await Promise.all([
    attemptsSince(o.deliveries, r.webhookId, r.since, 'failed'),
    attemptsSince(o.deliveries, r.webhookId, r.since, 'succeeded'),
  ]);
  const chosen = recoverable(failed, succeeded, window);
  for (let at = 0; at < chosen.length; at += PAGE) {
    const jobs: Job[] = await Promise.all(
      chosen.slice(at, at + PAGE).map(async (a) => ({
        job_id: recoveryJobId(r.id, a.event_id),
        subscription_id: r.webhookId,
        owner: r.ownerPrn,
        kind: 'recover' as const,
        event: await eventOfAttempt(o.eventLog, r.ownerPrn, a),
        attempt: 0,
        enqueued: Date.now(),
      })),
    );
    await o.deliveries.enqueue(jobs);
  }
  return chosen.length;
}

/** A recovery as GET /webhooks/{id}/recoveries/{rid} shows it. */
export interface RecoveryProgress {
  status: 'selecting' | 'sending' | 'done';
  /** Deliveries queued (null while selecting). */
  total: number | null;
  /** Of those, attempted at least once; succeeded; failed for good (dead-lettered). */
  sent: number;
  succeeded: number;
  dead_lettered: number;
}

/** The progress of a recovery, from the attempts of its jobs in the delivery log. */
export async function recoveryProgress(reads: AttemptReads, r: Recovery): Promise<RecoveryProgress> {
  if (r.total === null) return { status: 'selecting', total: null, sent: 0, succeeded: 0, dead_lettered: 0 };
  const prefix = `job_${r.id}_`;
  const mine = (await attemptsSince(reads, r.webhookId, r.requested)).filter((a) =>
    a.job_id.startsWith(prefix),
  );
  // Newest first: a job's first attempt seen is its latest.
  const latest = new Map<string, AttemptRecord>();
  for (const a of mine) if (!latest.has(a.job_id)) latest.set(a.job_id, a);
  const ends = [...latest.values()];
  const succeeded = ends.filter((a) => a.status === 'succeeded').length;
  const deadLettered = ends.filter((a) => a.status === 'dead_lettered').length;
  return {
    status: succeeded + deadLettered >= r.total ? 'done' : 'sending',
    total: r.total,
    sent: latest.size,
    succeeded,
    dead_lettered: deadLettered,
  };
}

/** The follower that queues each recovery asked for (the projector role runs it). */
export function recoveryProcessor(o: {
  store: EventStore;
  checkpoints: CheckpointStore;
  deliveries: DeliveryStore;
  eventLog: EventLog;
  logger: Logger;
  metrics: Registry;
  follow?: SubscribeOptions;
}): EventFollower {
  const queued = new Counter({
    name: 'hub_webhook_recovery_jobs_queued_total',
    help: 'Delivery jobs queued by bulk recoveries (hub_webhook_recovery_jobs_sent_total: of them, attempted).',
    registers: [o.metrics],
  });
  return new EventFollower({
    name: 'recoveries',
    ...o.follow,
    store: o.store,
    checkpoints: o.checkpoints,
    logger: o.logger,
    handle: async (batch) => {
      for (const e of batch) {
        if (e.type !== 'WebhookRecoveryRequested') continue;
        const stream = recoveryStream((e.data as { recovery_id: string }).recovery_id);
        const { state } = await load(o.store, stream, recoveries);
        if (state.total !== null) continue; // queued before (the batch is handled again)
        const total = await queueRecovery(o, state);
        const { appended } = await handle(o.store, stream, recoveries, (s) => ({
          events: decideQueued({ total }, s),
          result: undefined,
        }));
        if (appended) queued.inc(total);
        o.logger.info({ recovery: state.id, subscription: state.webhookId, total }, 'recovery queued');
      }
    },
  });
}
