// A subscription's rate limit (`rate_limit`, deliveries per second) as the dispatcher keeps it:
// before an attempt, the job takes the next slot of its subscription's rate (infra/rate-limits.ts:
// in Redis, shared by every dispatcher, in the distributed profile; in this process in the
// embedded one). A slot free now lets it go; a later one sends it back to the durable schedule,
// due at its slot and marked as holding it, so that when it is claimed again it goes without
// taking another. A job over the rate never waits in memory, and the jobs waiting for a busy
// subscription are spread one slot apart in the schedule rather than all claimed again at once.
import { Counter, type Registry } from 'prom-client';
import { MemoryRateSlots, type RateSlots } from '../../infra/rate-limits.ts';
import type { Held } from './held.ts';

/** A job holding a slot may start this much after it, at least (claims and in-flight limits
 * delay it a little): later, it takes a new slot instead, so that it cannot start together with the
 * holder of the next one. Half an interval, or this floor when the interval is shorter. */
const ON_TIME_FLOOR_MS = 25;

/** Whether a job due at its reserved slot `due` is still on time for it at `now`. */
export function onTime(due: number, now: number, perSecond: number): boolean {
  return now - due <= Math.max(500 / perSecond, ON_TIME_FLOOR_MS);
}

export class Throttle {
  private readonly slots: RateSlots;
  private readonly throttled: Counter;

  constructor(slots: RateSlots = new MemoryRateSlots(), registry?: Registry) {
    this.slots = slots;
    this.throttled = new Counter({
      name: 'hub_webhook_throttled_total',
      help: "Jobs sent back to the schedule, due at a later slot, by their subscription's rate limit.",
      registers: registry ? [registry] : [],
    });
  }

  /**
   * How long `held` must wait before its attempt, ms: 0 to go now, else it goes back to the
   * schedule for that long (the job is marked as holding its slot). `rateLimit` null: unlimited.
   */
  async wait(held: Held, rateLimit: number | null, now = Date.now()): Promise<number> {
    const { job } = held;
    const holding = job.slotted === true;
    delete job.slotted; // a retry or a pause sends it back for another reason than its slot
    if (rateLimit === null || (holding && onTime(held.due, now, rateLimit))) return 0;
    const wait = await this.slots.reserve(job.subscription_id, rateLimit);
    if (wait <= 0) return 0;
    job.slotted = true;
    this.throttled.inc();
    return wait;
  }
}
