// The dispatcher's side of endpoint health: what a job's subscription lets it do before its attempt
// (paused or disabled: wait; its circuit open: wait in the schedule for the probe), what an
// attempt's outcome tells the circuits, and the hub disabling a subscription that has failed for
// the failure period. The rules are health.ts's and domain/subscriptions.ts's; the delivery store
// keeps the health and leases the probe, so that all dispatchers share one circuit.
import { LRUCache } from 'lru-cache';
import type { Registry } from 'prom-client';
import {
  decideAutoDisable,
  type Subscription,
  subscriptions,
  webhookStream,
} from '../../domain/subscriptions.ts';
import { handle } from '../../infra/eventstore/aggregate.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';
import { type CircuitState, circuitOf, type EndpointHealth, MIN_PROBE_DELAY_S } from './health.ts';
import { circuitMetrics } from './metrics.ts';
import type { Attempt, DeliveryStore } from './port.ts';

/** How long a paused or disabled subscription's due jobs wait before they are looked at again, ms. */
const PAUSED_RECHECK_MS = 5000;
/** A probe's lease outlasts its attempt's timeout by this much, ms. */
const PROBE_MARGIN_MS = 1000;

export interface CircuitOptions {
  deliveries: DeliveryStore;
  store: EventStore;
  logger: Logger;
  metrics: Registry;
  /** One attempt's timeout, ms: a probe's lease lasts as long, and PROBE_MARGIN_MS more. */
  timeoutMs: number;
  /** The failure period (HUB_WEBHOOK_DISABLE_AFTER_S), ms; 0: never disabled. */
  disableAfterMs: number;
  cacheEntries?: number;
}

export class Circuits {
  private readonly o: CircuitOptions;
  /** Subscriptions whose last attempt here failed, with their circuit as last seen: their jobs ask
   * the store's health first, but while it was seen open they wait for its probe without asking.
   * Any other's job goes to its attempt at once, at no cost (a process joins a circuit other
   * dispatchers opened after its first failed attempt of it). */
  private readonly failing: LRUCache<
    string,
    { state: CircuitState; probeAt: number | null; enabledAt: number }
  >;
  private readonly metrics: ReturnType<typeof circuitMetrics>;

  constructor(options: CircuitOptions) {
    this.o = options;
    this.failing = new LRUCache({ max: options.cacheEntries ?? 10_000 });
    this.metrics = circuitMetrics(options.metrics, () => {
      let open = 0;
      for (const seen of this.failing.values()) if (seen.state !== 'closed') open++;
      return open;
    });
  }

  /** Before a job's attempt: undefined to make it now, or when the job is due again (it waits in
   * the schedule, not here). A promise only for a subscription that failed here last. */
  gate(sub: Subscription, now = Date.now()): number | undefined | Promise<number | undefined> {
    if (!sub.enabled) return now + PAUSED_RECHECK_MS;
    const seen = this.failing.get(sub.id);
    if (!seen) return undefined;
    // Seen open: its jobs wait for the probe without asking again, unless it was enabled since.
    if (seen.state === 'open' && seen.probeAt! > now && seen.enabledAt === sub.enabledAt)
      return seen.probeAt!;
    return this.failingGate(sub, now);
  }

  private async failingGate(sub: Subscription, now: number): Promise<number | undefined> {
    const [health] = await this.o.deliveries.health([sub.id]);
    if (health!.failingSince !== null && (await this.disabled(sub, health!, now)))
      return now + PAUSED_RECHECK_MS;
    const { state, probeAt } = circuitOf(health!, now, sub.enabledAt);
    this.failing.set(sub.id, { state, probeAt, enabledAt: sub.enabledAt });
    if (state === 'closed') return undefined;
    if (state === 'open') return probeAt!;
    // Half-open: this job is the probe if no other dispatcher's is under way; else it looks again.
    const lease = now + this.o.timeoutMs + PROBE_MARGIN_MS;
    if (await this.o.deliveries.probe(sub.id, now, lease)) return undefined;
    return now + MIN_PROBE_DELAY_S * 1000;
  }

  /** An attempt's outcome, as soon as it is in (before its record is written). */
  after(attempt: Attempt): void {
    if (attempt.status === 'succeeded') this.failing.delete(attempt.subscription_id);
    else if (!this.failing.has(attempt.subscription_id))
      this.failing.set(attempt.subscription_id, { state: 'closed', probeAt: null, enabledAt: 0 });
  }

  /** Whether the subscription is disabled now for having failed the whole period: decided on the
   * state this dispatcher holds first, and appended only if that decision disables it. */
  private async disabled(sub: Subscription, h: EndpointHealth, now: number): Promise<boolean> {
    const command = {
      failingSince: h.failingSince!,
      lastSuccess: h.lastSuccess,
      now,
      periodMs: this.o.disableAfterMs,
    };
    if (decideAutoDisable(command, sub).length === 0) return false;
    try {
      const { appended } = await handle(this.o.store, webhookStream(sub.id), subscriptions, (s) => ({
        events: decideAutoDisable(command, s),
        result: undefined,
      }));
      if (appended) {
        this.metrics.autoDisabled.inc();
        this.o.logger.warn(
          { subscription: sub.id, failingSince: new Date(command.failingSince).toISOString() },
          'dispatcher: subscription disabled, every attempt failed for the failure period',
        );
      }
      return true;
    } catch (err) {
      // Deleted meanwhile, or the store out of reach: the next job of it decides again.
      this.o.logger.warn({ err: (err as Error).message, subscription: sub.id }, 'dispatcher: not disabled');
      return false;
    }
  }
}
