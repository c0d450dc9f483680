// Endpoint health and the circuit, without a store or a receiver: how an attempt's outcome moves a
// subscription's health, when the circuit opens, and how far apart its probes are.
import assert from 'node:assert/strict';
import {
  afterAttempt,
  CIRCUIT_OPENS_AFTER,
  circuitOf,
  type EndpointHealth,
  MAX_PROBE_DELAY_S,
  MIN_PROBE_DELAY_S,
  NO_ATTEMPTS,
  PROBE_DELAY_SHARE,
  probeDelayMs,
} from '../../../processors/delivery/health.ts';

/** The health after attempts ending one after another at 1000, 2000, … ms (true: succeeded). */
const healthAfter = (...outcomes: boolean[]): EndpointHealth =>
  outcomes.reduce((h, ok, i) => afterAttempt(h, ok, (i + 1) * 1000), NO_ATTEMPTS);

describe('endpoint health and circuit (unit)', () => {
  it('counts failures since the last success, from the first of them; a success clears them', () => {
    assert.deepEqual(healthAfter(true, false, false), {
      lastSuccess: 1000,
      lastFailure: 3000,
      consecutiveFailures: 2,
      failingSince: 2000,
    });
    assert.deepEqual(healthAfter(false, false, true), {
      lastSuccess: 3000,
      lastFailure: 2000,
      consecutiveFailures: 0,
      failingSince: null,
    });
  });

  it('an outcome recorded late (attempts in flight together) does not undo a newer one', () => {
    const failing = healthAfter(false, false); // failing since 1000, last at 2000
    assert.deepEqual(afterAttempt(failing, true, 1500), { ...failing, lastSuccess: 1500 });
    const healthy = healthAfter(true); // succeeded at 1000
    assert.deepEqual(afterAttempt(healthy, false, 500), { ...healthy, lastFailure: 500 });
  });

  it('opens the circuit after CIRCUIT_OPENS_AFTER failures; probes wait a quarter of the time it has failed, within bounds', () => {
    const failing = (n: number, since: number, last: number): EndpointHealth => ({
      lastSuccess: null,
      lastFailure: last,
      consecutiveFailures: n,
      failingSince: since,
    });
    assert.equal(probeDelayMs(failing(CIRCUIT_OPENS_AFTER - 1, 0, 3_600_000)), null);
    assert.equal(probeDelayMs(failing(CIRCUIT_OPENS_AFTER, 0, 2_000)), MIN_PROBE_DELAY_S * 1000);
    assert.equal(probeDelayMs(failing(CIRCUIT_OPENS_AFTER + 40, 0, 2_000)), MIN_PROBE_DELAY_S * 1000);
    assert.equal(probeDelayMs(failing(CIRCUIT_OPENS_AFTER, 0, 100_000)), 100_000 * PROBE_DELAY_SHARE);
    assert.equal(probeDelayMs(failing(CIRCUIT_OPENS_AFTER, 0, 86_400_000)), MAX_PROBE_DELAY_S * 1000);
  });

  it('closed, then open until the probe is due, then half-open; a subscription enabled again is probed at once', () => {
    const fails = (n: number) => healthAfter(...Array.from({ length: n }, () => false));
    assert.deepEqual(circuitOf(fails(CIRCUIT_OPENS_AFTER - 1), 10_000), { state: 'closed', probeAt: null });
    const open = fails(CIRCUIT_OPENS_AFTER); // failing from 1000 to 5000
    const probeAt = 5000 + MIN_PROBE_DELAY_S * 1000;
    assert.deepEqual(circuitOf(open, probeAt - 1), { state: 'open', probeAt });
    assert.deepEqual(circuitOf(open, probeAt), { state: 'half_open', probeAt });
    assert.deepEqual(circuitOf(open, 6000, 5500), { state: 'half_open', probeAt: 5500 });
    assert.deepEqual(circuitOf(open, 6000, 4000), { state: 'open', probeAt }, 'enabled before the failures');
    assert.deepEqual(circuitOf(healthAfter(...Array(9).fill(false), true), 20_000), {
      state: 'closed',
      probeAt: null,
    });
  });
});
