// appendedElsewhere: what an API thread does with another thread's appends to its cached states;
// the ids a command gives its events.
import assert from 'node:assert/strict';
import {
  appendedElsewhere,
  cacheOf,
  type Evolver,
  handle,
  timeOrderedId,
} from '../../infra/eventstore/aggregate.ts';
import {
  type EventStore,
  type NewEvent,
  type RecordedEvent,
  WrongExpectedRevisionError,
} from '../../infra/eventstore/port.ts';

const counter: Evolver<{ n: number }> = {
  initial: () => ({ n: 0 }),
  evolve: (s, e) => ({ n: s.n + (e.data as { by: number }).by }),
};
const event = (stream: string, revision: number, by: number): RecordedEvent => ({
  id: `${stream}-${revision}`,
  type: 'Counted',
  data: { by },
  stream,
  revision,
  position: revision + 1,
  created: 0,
  metadata: {},
});

describe('aggregate caches told of appends elsewhere (unit)', () => {
  const store = { kind: 'test' } as EventStore; // only its identity keys the caches
  const cache = cacheOf(store, counter);

  it('a state cached just before the events moves on by them', () => {
    cache.set('a', { state: { n: 1 }, revision: 0 });
    appendedElsewhere(store, 'a', [event('a', 1, 2), event('a', 2, 3)]);
    assert.deepEqual(cache.get('a'), { state: { n: 6 }, revision: 2 });
  });

  it('a state further behind is forgotten; one already past them is left alone', () => {
    cache.set('b', { state: { n: 1 }, revision: 0 });
    appendedElsewhere(store, 'b', [event('b', 3, 5)]);
    assert.equal(cache.get('b'), undefined);
    cache.set('c', { state: { n: 9 }, revision: 4 });
    appendedElsewhere(store, 'c', [event('c', 3, 5), event('c', 4, 1)]);
    assert.deepEqual(cache.get('c'), { state: { n: 9 }, revision: 4 });
  });

  it('a stream not cached stays so', () => {
    appendedElsewhere(store, 'd', [event('d', 0, 1)]);
    assert.equal(cache.get('d'), undefined);
  });
});

describe('command event ids (unit)', () => {
  it('are time-ordered UUIDs (v7): a later command sorts after an earlier one', async () => {
    const appended: NewEvent[] = [];
    let revision = -1;
    // A store that only counts: enough for handle, whose ids are what is tested.
    const store = {
      kind: 'test',
      exclusiveWriter: true,
      append: async (_stream: string, events: NewEvent[]) => {
        appended.push(...events);
        revision += events.length;
        return { nextRevision: revision, position: revision + 1 };
      },
      readStream: async () => [],
    } as unknown as EventStore;
    for (let i = 0; i < 50; i++)
      await handle(store, 's', counter, () => ({
        events: [{ type: 'Counted', data: { by: 1 } }],
        result: 0,
      }));
    const ids = appended.map((e) => e.id);
    assert.equal(ids.length, 50);
    for (const id of ids)
      assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.deepEqual([...ids].sort(), ids);
  });

  it('stay increasing, unique and random-tailed over many pool refills, many ids to a millisecond', () => {
    const ids = Array.from({ length: 20_000 }, () => timeOrderedId());
    assert.deepEqual([...ids].sort(), ids);
    assert.equal(new Set(ids).size, ids.length);
    // The last 48 bits are random bytes from the pool: all but a few distinct.
    assert.ok(new Set(ids.map((id) => id.slice(-12))).size > ids.length - 5);
    for (const id of ids.slice(0, 300))
      assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });
});

describe('commands that meet concurrent appends (unit)', () => {
  /** A store whose first `conflicts` appends meet another writer's; it counts every try. */
  const racedStore = (conflicts: number) => {
    const tries = { n: 0 };
    let revision = -1;
    const store = {
      kind: 'test',
      exclusiveWriter: true,
      append: async (stream: string, events: NewEvent[], expected: number | 'no_stream') => {
        tries.n++;
        if (tries.n <= conflicts) {
          revision++; // the other writer's event went in
          throw new WrongExpectedRevisionError(stream, expected, revision);
        }
        revision += events.length;
        return { nextRevision: revision, position: revision + 1 };
      },
      readStream: async (stream: string) =>
        Array.from({ length: revision + 1 }, (_, r) => event(stream, r, 1)),
    } as unknown as EventStore;
    return { store, tries };
  };
  const count = () => ({ events: [{ type: 'Counted', data: { by: 1 } }], result: 0 });

  it('decide again past five conflicts while the budget lasts, and then append', async () => {
    const { store, tries } = racedStore(12);
    const { after } = await handle(store, 'raced', counter, count);
    assert.equal(tries.n, 13);
    assert.equal(after.n, 13); // the 12 other writers' events, then its own
  });

  it('give up with the conflict once the budget is spent, after five tries at least', async () => {
    const { store, tries } = racedStore(Number.POSITIVE_INFINITY);
    await assert.rejects(
      handle(store, 'hopeless', counter, count, { conflictRetryMs: 0 }),
      WrongExpectedRevisionError,
    );
    assert.equal(tries.n, 5);
  });
});
