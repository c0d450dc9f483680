// The dispatcher's metrics: its jobs and attempts in flight, the attempts by outcome with their
// duration, the delivery latency, retries and dead letters, and the schedule's backlog.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { withTimeout } from '../../infra/deadline.ts';
import type { DeliveryStore, Outcome } from './port.ts';

/** How long a /metrics scrape waits for the schedule (Redis) before reporting its gauges as NaN, ms. */
const SCRAPE_WAIT_MS = 2000;

export function dispatcherMetrics(
  registry: Registry,
  deliveries: DeliveryStore,
  now: { held: () => number; inFlight: () => number },
) {
  new Gauge({
    name: 'hub_webhook_jobs_held',
    help: 'Jobs this dispatcher holds: attempts in flight and jobs waiting for their subscription.',
    registers: [registry],
    collect() {
      this.set(now.held());
    },
  });
  new Gauge({
    name: 'hub_webhook_attempts_in_flight',
    help: 'Delivery attempts in flight in this process.',
    registers: [registry],
    collect() {
      this.set(now.inFlight());
    },
  });
  const attempts = new Counter({
    name: 'hub_webhook_attempts_total',
    help: 'Delivery attempts by outcome: 2xx, 3xx, 4xx, 5xx, timeout, network, refused_address.',
    labelNames: ['outcome'],
    registers: [registry],
  });
  // Each outcome's series, looked up once rather than by its labels at every attempt.
  const byOutcome = new Map<Outcome, ReturnType<typeof attempts.labels>>();
  // The schedule as a scrape sees it, bounded: with Redis down a scrape must still answer within
  // Prometheus's timeout, and say unknown (NaN), not empty (0), so that no alert reads it as fine.
  const schedule = () => withTimeout(deliveries.pending(), SCRAPE_WAIT_MS).catch(() => undefined);
  new Gauge({
    name: 'hub_webhook_retry_backlog',
    help: 'Jobs pending in the schedule (new and retries), all dispatchers together; NaN when the schedule does not answer.',
    registers: [registry],
    async collect() {
      this.set((await schedule())?.count ?? Number.NaN);
    },
  });
  new Gauge({
    name: 'hub_webhook_retry_backlog_oldest_due_age_seconds',
    help: 'How long the most overdue pending job has been due (0 when none is overdue); NaN when the schedule does not answer.',
    registers: [registry],
    async collect() {
      const seen = await schedule();
      if (!seen) this.set(Number.NaN);
      else this.set(seen.oldestDue === undefined ? 0 : Math.max(0, (Date.now() - seen.oldestDue) / 1000));
    },
  });
  return {
    attempts(outcome: Outcome) {
      let series = byOutcome.get(outcome);
      if (!series) {
        series = attempts.labels(outcome);
        byOutcome.set(outcome, series);
      }
      return series;
    },
    duration: new Histogram({
      name: 'hub_webhook_attempt_duration_seconds',
      help: 'Duration of one delivery attempt.',
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    }),
    latency: new Histogram({
      name: 'hub_webhook_delivery_latency_seconds',
      help: 'From the source event stored to its delivery answered 2xx (changes only: not tests, replays or redeliveries).',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 600, 3600],
      registers: [registry],
    }),
    retries: new Counter({
      name: 'hub_webhook_retries_scheduled_total',
      help: 'Retries scheduled after a retryable failure.',
      registers: [registry],
    }),
    recoverySent: new Counter({
      name: 'hub_webhook_recovery_jobs_sent_total',
      help: 'First attempts of the jobs bulk recoveries queued (hub_webhook_recovery_jobs_queued_total).',
      registers: [registry],
    }),
    deadLettered: new Counter({
      name: 'hub_webhook_dead_lettered_total',
      help: 'Deliveries dead-lettered: a non-retryable answer, or attempts spent.',
      registers: [registry],
    }),
  };
}

export type DispatcherMetrics = ReturnType<typeof dispatcherMetrics>;

/** The endpoint circuits' metrics (circuit.ts): subscriptions disabled by the hub, and circuits
 * open as this dispatcher last saw them. */
export function circuitMetrics(registry: Registry, open: () => number) {
  new Gauge({
    name: 'hub_webhook_circuits_open',
    help: 'Subscriptions whose circuit this dispatcher last saw open or half-open: failing endpoints getting one probe at a time.',
    registers: [registry],
    collect() {
      this.set(open());
    },
  });
  return {
    autoDisabled: new Counter({
      name: 'hub_webhook_subscriptions_auto_disabled_total',
      help: 'Subscriptions the hub disabled because every attempt had failed for HUB_WEBHOOK_DISABLE_AFTER_S.',
      registers: [registry],
    }),
  };
}
