// planBatch: the pure decision of a group commit, without a database.
import assert from 'node:assert/strict';
import {
  DuplicateEventIdError,
  planBatch,
  type StoredId,
  WrongExpectedRevisionError,
} from '../../infra/eventstore/port.ts';

const ev = (id: string) => ({ id, type: 'T', data: {} });
const none = new Map<string, StoredId>();

describe('planBatch (unit)', () => {
  it('assigns contiguous positions and per-stream revisions across the batch', () => {
    const plans = planBatch(
      [
        { stream: 'a', events: [ev('1'), ev('2')], expected: 'no_stream' },
        { stream: 'b', events: [ev('3')], expected: 'any' },
        { stream: 'a', events: [ev('4')], expected: 1 },
      ],
      () => -1,
      none,
      10,
      1000,
    );
    assert.deepEqual(
      plans.map((p) =>
        p.kind === 'write'
          ? [p.firstRevision, p.firstPosition, p.result.nextRevision, p.result.position]
          : p.kind,
      ),
      [
        [0, 11, 1, 12],
        [0, 13, 0, 13],
        [2, 14, 2, 14],
      ],
    );
  });

  it('decides each kind of expected revision against the state the batch has reached', () => {
    const revisionOf = (s: string) => (s === 'exists' ? 4 : -1);
    const outcome = (expected: 'any' | 'no_stream' | 'stream_exists' | number, stream: string) =>
      planBatch([{ stream, events: [ev(`${stream}-${expected}`)], expected }], revisionOf, none, 0, 0)[0]!;
    assert.equal(outcome('no_stream', 'new').kind, 'write');
    assert.ok(
      (outcome('no_stream', 'exists') as { error: Error }).error instanceof WrongExpectedRevisionError,
    );
    assert.ok(
      (outcome('stream_exists', 'new') as { error: Error }).error instanceof WrongExpectedRevisionError,
    );
    assert.equal(outcome('stream_exists', 'exists').kind, 'write');
    assert.equal(outcome(4, 'exists').kind, 'write');
    const stale = outcome(3, 'exists') as unknown as { error: WrongExpectedRevisionError };
    assert.equal(stale.error.actual, 4);
    assert.equal(outcome('any', 'exists').kind, 'write');
    // Two appends at the same revision in one batch: the second sees the first.
    const race = planBatch(
      [
        { stream: 'exists', events: [ev('x')], expected: 4 },
        { stream: 'exists', events: [ev('y')], expected: 4 },
      ],
      revisionOf,
      none,
      0,
      0,
    );
    assert.deepEqual(
      race.map((p) => p.kind),
      ['write', 'error'],
    );
  });

  it('answers a retry of stored ids with the original result, and refuses partial repeats', () => {
    const stored = new Map<string, StoredId>([
      ['1', { stream: 'a', revision: 0, position: 7, created: 111 }],
      ['2', { stream: 'a', revision: 1, position: 8, created: 111 }],
    ]);
    const [retry, partial, dupInside] = planBatch(
      [
        { stream: 'a', events: [ev('1'), ev('2')], expected: 'no_stream' },
        { stream: 'a', events: [ev('2'), ev('9')], expected: 'any' },
        { stream: 'b', events: [ev('5'), ev('5')], expected: 'any' },
      ],
      () => 1,
      stored,
      8,
      222,
    );
    assert.deepEqual(retry, { kind: 'done', result: { nextRevision: 1, position: 8, created: 111 } });
    assert.ok((partial as { error: Error }).error instanceof DuplicateEventIdError);
    assert.ok((dupInside as { error: Error }).error instanceof DuplicateEventIdError);
  });
});
