// What follows a delivery attempt that did not succeed, decided without a receiver: retryDelayS
// from the retry policy, the attempt's number and how it ended (the specification's table of what
// is retried, the policy's delays, a receiver's Retry-After).
import assert from 'node:assert/strict';
import { DEFAULT_RETRY_POLICY, type RetryPolicy } from '../../../domain/subscriptions.ts';
import { RETRY_AFTER_BOUNDS, retryDelayS } from '../../../processors/delivery/attempt.ts';
import type { Attempt, Outcome } from '../../../processors/delivery/port.ts';

/** When the attempt ended: a Retry-After given as a date is read against it. */
const FINISHED = Date.parse('2026-11-27T10:00:00.000Z');

type Ended = Pick<Attempt, 'outcome' | 'response' | 'finished'>;

/** An attempt answered with `status` (and these headers). */
function answered(status: number, headers: Record<string, string> = {}): Ended {
  const outcome = `${Math.floor(status / 100)}xx` as Outcome;
  return { outcome, response: { status, headers, body: '', truncated: false }, finished: FINISHED };
}

/** An attempt without an answer. */
const unanswered = (outcome: Outcome): Ended => ({ outcome, response: null, finished: FINISHED });

const describeEnded = (e: Ended) => (e.response ? String(e.response.status) : e.outcome);

describe('retry delay (unit)', () => {
  it('retries timeouts, network failures, 408, 425, 429 and 5xx; dead-letters any other answer and a refused address at once', () => {
    const retried = [
      unanswered('timeout'),
      unanswered('network'),
      answered(408),
      answered(425),
      answered(429),
      answered(500),
      answered(502),
      answered(503),
      answered(599),
    ];
    for (const ended of retried) assert.equal(retryDelayS(null, 1, ended), 60, describeEnded(ended));
    const deadLettered = [
      unanswered('refused_address'),
      answered(301),
      answered(304),
      answered(400),
      answered(401),
      answered(404),
      answered(410),
      answered(422),
    ];
    for (const ended of deadLettered) assert.equal(retryDelayS(null, 1, ended), null, describeEnded(ended));
  });

  it('without a policy of its own, follows the specification’s: 60 s doubling to 3,840 s, none after the 8th attempt', () => {
    const delays = Array.from({ length: 9 }, (_, i) => retryDelayS(null, i + 1, answered(500)));
    assert.deepEqual(delays, [60, 120, 240, 480, 960, 1920, 3840, null, null]);
    assert.deepEqual(
      delays,
      Array.from({ length: 9 }, (_, i) => retryDelayS(DEFAULT_RETRY_POLICY, i + 1, answered(500))),
    );
  });

  it('follows a subscription’s policy, its last delay repeating until its attempts are spent', () => {
    const policy: RetryPolicy = { max_attempts: 5, delays_s: [5, 30] };
    assert.deepEqual(
      Array.from({ length: 6 }, (_, i) => retryDelayS(policy, i + 1, unanswered('timeout'))),
      [5, 30, 30, 30, null, null],
    );
    assert.equal(retryDelayS({ max_attempts: 1, delays_s: [5] }, 1, unanswered('network')), null);
  });

  it('waits a 429’s or a 503’s Retry-After instead, in seconds or as a date, within its bounds', () => {
    const retryAfter = (status: number, value: string) =>
      retryDelayS(null, 1, answered(status, { 'retry-after': value }));
    assert.equal(retryAfter(429, '120'), 120);
    assert.equal(retryAfter(503, '120'), 120);
    assert.equal(
      retryAfter(503, new Date(FINISHED + 90_000).toUTCString()),
      90,
      'a date, from the attempt’s end',
    );
    assert.equal(retryAfter(429, '0'), RETRY_AFTER_BOUNDS[0]);
    assert.equal(
      retryAfter(429, new Date(FINISHED - 90_000).toUTCString()),
      RETRY_AFTER_BOUNDS[0],
      'a date past',
    );
    assert.equal(retryAfter(429, '999999'), RETRY_AFTER_BOUNDS[1]);
    assert.equal(retryAfter(429, 'soon'), 60, 'unreadable: the policy’s delay');
    assert.equal(retryDelayS(null, 1, answered(429)), 60, 'absent: the policy’s delay');
    assert.equal(retryAfter(500, '120'), 60, 'only a 429 or a 503 is heeded');
    assert.equal(retryAfter(502, '120'), 60, 'only a 429 or a 503 is heeded');
  });

  it('a Retry-After does not add an attempt the policy has not left', () => {
    assert.equal(retryDelayS(null, 8, answered(429, { 'retry-after': '5' })), null);
    assert.equal(
      retryDelayS({ max_attempts: 2, delays_s: [60] }, 2, answered(503, { 'retry-after': '5' })),
      null,
    );
  });
});
