// The dispatcher's pure parts: the attempt record's times, and how a failed POST is classified.
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { errors } from 'undici';
import { EgressError } from '../../../processors/delivery/egress.ts';
import { dispatcherMetrics } from '../../../processors/delivery/metrics.ts';
import type { DeliveryStore } from '../../../processors/delivery/port.ts';
import { isoTime } from '../../../processors/delivery/port.ts';
import { classify } from '../../../processors/delivery/webhook-http.ts';

describe('attempt times (unit)', () => {
  it('isoTime is Date#toISOString, across seconds, milliseconds and years', () => {
    const samples = [
      0, 9, 99, 999, 1000, 1_763_790_000_000, 1_763_790_000_001, 1_763_790_000_010, 253_402_300_799_999,
    ];
    for (let i = 0; i < 20_000; i++) samples.push(Math.floor(Math.random() * 4_102_444_800_000));
    // A year beyond 9999 and before 1970: not cached, still right.
    samples.push(253_402_300_800_000, -1, -62_198_755_200_000);
    for (const ms of samples) assert.equal(isoTime(ms), new Date(ms).toISOString(), String(ms));
    // The same second again after another: the prefix kept is the latest second's.
    assert.equal(isoTime(1_763_790_000_500), '2025-11-22T05:40:00.500Z');
  });
});

describe('failed POSTs (unit)', () => {
  it('classifies refused addresses, timeouts and network failures, with the error the record shows', () => {
    const lookupRefusal = Object.assign(new EgressError('h resolves to an address that is not public'), {
      code: 'EHUBEGRESS',
    });
    const timedOut = Object.assign(new Error('no answer in time'), { name: 'TimeoutError' });
    const refused = Object.assign(new Error('fetch failed'), { cause: { code: 'ECONNREFUSED' } });
    const cases: [unknown, string, string][] = [
      [
        new EgressError('10.0.0.1 is not a public address'),
        'refused_address',
        '10.0.0.1 is not a public address',
      ],
      [lookupRefusal, 'refused_address', 'EHUBEGRESS'],
      [new Error('x', { cause: { code: 'EHUBEGRESS' } }), 'refused_address', 'EHUBEGRESS'],
      [timedOut, 'timeout', 'no answer within 1500 ms'],
      [new errors.ConnectTimeoutError(), 'timeout', 'no answer within 1500 ms'],
      [new errors.HeadersTimeoutError(), 'timeout', 'no answer within 1500 ms'],
      [refused, 'network', 'ECONNREFUSED'],
      [Object.assign(new Error('socket hang up'), { code: 'UND_ERR_SOCKET' }), 'network', 'UND_ERR_SOCKET'],
    ];
    for (const [err, outcome, error] of cases)
      assert.deepEqual(classify(err, 1500), { outcome, error }, String((err as Error).message));
  });
});

describe('dispatcher metrics (unit)', () => {
  it('a schedule that does not answer makes a scrape answer within its bound, the backlog NaN, not 0', async () => {
    for (const pending of [
      () => new Promise<never>(() => {}),
      () => Promise.reject(new Error('Connection is closed.')),
    ]) {
      const registry = new Registry();
      dispatcherMetrics(registry, { pending } as unknown as DeliveryStore, {
        held: () => 0,
        inFlight: () => 0,
      });
      const started = Date.now();
      const text = await registry.metrics();
      assert.ok(Date.now() - started < 3000, `the scrape took ${Date.now() - started} ms`);
      assert.match(text, /^hub_webhook_retry_backlog NaN$/im);
      assert.match(text, /^hub_webhook_retry_backlog_oldest_due_age_seconds NaN$/im);
    }
    const registry = new Registry();
    const due = Date.now() - 5000;
    const store = { pending: async () => ({ count: 3, oldestDue: due }) };
    dispatcherMetrics(registry, store as unknown as DeliveryStore, { held: () => 0, inFlight: () => 0 });
    const text = await registry.metrics();
    assert.match(text, /^hub_webhook_retry_backlog 3$/m);
    assert.ok(Number(/^hub_webhook_retry_backlog_oldest_due_age_seconds (\S+)$/m.exec(text)![1]) >= 5);
  });
});
