// Which deliveries a bulk recovery sends again, without I/O: one per event that failed in the
// window and has not succeeded since its start.
import assert from 'node:assert/strict';
import type { AttemptRecord } from '../../../processors/delivery/port.ts';
import { recoverable, recoveryJobId } from '../../../processors/delivery/recovery.ts';

const attempt = (event: string, at: number, status: AttemptRecord['status'], id = `${event}@${at}`) =>
  ({ id, event_id: event, status, started_at: new Date(at).toISOString() }) as AttemptRecord;
const window = { since: 1_000_000, until: 2_000_000 };

describe('bulk recovery: the window (unit)', () => {
  it('the events that failed in [since, until), each once, oldest first', () => {
    const failed = [
      attempt('b', 1_500_000, 'dead_lettered'),
      attempt('a', 1_000_000, 'failed'), // since is inclusive
      attempt('a', 1_100_000, 'dead_lettered'), // a's later failure is the one kept
      attempt('c', 999_999, 'dead_lettered'), // before the window
      attempt('d', 2_000_000, 'dead_lettered'), // until is exclusive
    ];
    assert.deepEqual(
      recoverable(failed, [], window).map((a) => a.id),
      ['a@1100000', 'b@1500000'],
    );
  });

  it('not an event that succeeded since the window began, by a retry or a replay, even after it', () => {
    const failed = [attempt('a', 1_200_000, 'failed'), attempt('b', 1_300_000, 'dead_lettered')];
    const succeeded = [attempt('a', 2_500_000, 'succeeded'), attempt('b', 900_000, 'succeeded')];
    assert.deepEqual(
      recoverable(failed, succeeded, window).map((a) => a.event_id),
      ['b'], // b's success came before the window: it failed again since
    );
  });

  it("a recovery's job of an event has one id, whichever selection makes it", () => {
    assert.equal(recoveryJobId('rcv_1', 'evt_a'), recoveryJobId('rcv_1', 'evt_a'));
    assert.notEqual(recoveryJobId('rcv_1', 'evt_a'), recoveryJobId('rcv_2', 'evt_a'));
  });
});
