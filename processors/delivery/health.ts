// Endpoint health: what a subscription's attempts came to lately, kept by the delivery store with
// each attempt's record (port.ts), and what the dispatcher makes of it: the circuit, open while
// the endpoint keeps failing so that it gets one probe at a time, spaced out, instead of every job
// it is sent. Pure, like the retry delay (attempt.ts): tested without a store or a receiver.

/** A subscription's endpoint health; times in ms. */
export interface EndpointHealth {
  /** When an attempt last succeeded (null: none recorded). */
  lastSuccess: number | null;
  /** When an attempt last failed (null: none recorded). */
  lastFailure: number | null;
  /** Attempts failed since the last success. */
  consecutiveFailures: number;
  /** When the first of those ended (null: the last attempt succeeded, or there was none). */
  failingSince: number | null;
}

/** A subscription with no attempt recorded (or none within the retention). */
export const NO_ATTEMPTS: EndpointHealth = {
  lastSuccess: null,
  lastFailure: null,
  consecutiveFailures: 0,
  failingSince: null,
};

/**
 * The health after an attempt that ended at `at`. Attempts in flight together may be recorded out
 * of order: a success older than the last failure does not clear the failures, and a failure older
 * than the last success does not count as one. (The Redis store applies the same rule in its
 * finish script; the stores' contract suite holds both to it.)
 */
export function afterAttempt(h: EndpointHealth, succeeded: boolean, at: number): EndpointHealth {
  if (succeeded) {
    const lastSuccess = Math.max(h.lastSuccess ?? at, at);
    if (h.lastFailure !== null && at < h.lastFailure) return { ...h, lastSuccess };
    return { lastSuccess, lastFailure: h.lastFailure, consecutiveFailures: 0, failingSince: null };
  }
  const lastFailure = Math.max(h.lastFailure ?? at, at);
  if (h.lastSuccess !== null && at < h.lastSuccess) return { ...h, lastFailure };
  return {
    lastSuccess: h.lastSuccess,
    lastFailure,
    consecutiveFailures: h.consecutiveFailures + 1,
    failingSince: h.failingSince ?? at,
  };
}

/** Consecutive failed attempts that open a subscription's circuit. */
export const CIRCUIT_OPENS_AFTER = 5;
/** The shortest and the longest wait from a failure to the next probe, s. */
export const MIN_PROBE_DELAY_S = 5;
export const MAX_PROBE_DELAY_S = 300;
/** Between the two, the wait is this share of how long the endpoint has been failing. */
export const PROBE_DELAY_SHARE = 0.25;

/**
 * The wait from the last failure to the next probe, ms, or null while the circuit is closed. It
 * grows with how long the endpoint has been failing (by a quarter at each failed probe), not with
 * how many attempts failed: attempts in flight as the circuit opens fail too, and counted, they
 * would stretch the first probes' waits by the subscription's slots.
 */
export function probeDelayMs(h: EndpointHealth): number | null {
  if (h.consecutiveFailures < CIRCUIT_OPENS_AFTER || h.failingSince === null || h.lastFailure === null)
    return null;
  const share = (h.lastFailure - h.failingSince) * PROBE_DELAY_SHARE;
  return Math.min(Math.max(share, MIN_PROBE_DELAY_S * 1000), MAX_PROBE_DELAY_S * 1000);
}

/**
 * `closed`: attempts as usual. `open`: none until `probeAt`; the jobs wait in the schedule.
 * `half_open`: the probe is due: one attempt at a time (the store's probe lease), whose success
 * closes the circuit and whose failure opens it for a longer wait.
 */
export type CircuitState = 'closed' | 'open' | 'half_open';

/** The circuit at `now`, and when its next probe is due (null while closed). A subscription
 * enabled (again) after its last failure is probed at once: its owner says it is fixed. */
export function circuitOf(
  h: EndpointHealth,
  now: number,
  enabledAt = 0,
): { state: CircuitState; probeAt: number | null } {
  const delayMs = probeDelayMs(h);
  if (delayMs === null || h.lastFailure === null) return { state: 'closed', probeAt: null };
  const probeAt = enabledAt > h.lastFailure ? enabledAt : h.lastFailure + delayMs;
  return { state: now >= probeAt ? 'half_open' : 'open', probeAt };
}
