// The dispatcher's pure parts: the attempt record's times.
import assert from 'node:assert/strict';
import { isoTime } from '../../processors/deliveries.ts';

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
