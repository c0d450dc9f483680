// The dispatcher's pure parts: the attempt record's times, and how a failed POST is classified.
import assert from 'node:assert/strict';
import { errors } from 'undici';
import { isoTime } from '../../processors/deliveries.ts';
import { EgressError } from '../../processors/egress.ts';
import { classify } from '../../processors/webhook-http.ts';

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
