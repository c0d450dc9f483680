// Given/when/then for decisions, without I/O: given the events a stream holds, when a command is
// decided, then these events (or this refusal). Each aggregate's decisions are tested through it
// (test/domain/*.unit.test.ts).
import assert from 'node:assert/strict';
import type { DomainError, Refusal } from '../../domain/errors.ts';
import type { DomainEvent, EventType, FoldedEvent } from '../../domain/events.ts';

export interface Folding<S> {
  initial(): S;
  evolve(state: S, event: FoldedEvent): S;
}

/** `given(devices)(events…).when((s) => decide(command, s)).thenEmits(events…)`, or
 * `.thenRefuses('conflict', /taken/)`. (Not `.then`: an object with one is a thenable.) */
export function given<S>(aggregate: Folding<S>) {
  return (...history: DomainEvent[]) => {
    // Each event recorded a millisecond after the one before it, from t = 1000.
    const state = history.reduce(
      (s, e, i) => aggregate.evolve(s, { ...e, created: 1_000 + i } as FoldedEvent),
      aggregate.initial(),
    );
    return {
      state,
      when<T extends EventType>(decide: (state: S) => DomainEvent<T>[]) {
        return {
          /** The decision's events, compared whole (type and data). */
          thenEmits(...expected: DomainEvent<T>[]) {
            assert.deepEqual(decide(state), expected);
          },
          /** The decision refuses: with this refusal, and a message matching `message` if given. */
          thenRefuses(refusal: Refusal, message?: RegExp) {
            assert.throws(
              () => decide(state),
              (err: unknown) => {
                assert.equal((err as Error).name, 'DomainError', String(err));
                assert.equal((err as DomainError).refusal, refusal);
                if (message) assert.match((err as Error).message, message);
                return true;
              },
            );
          },
        };
      },
    };
  };
}
