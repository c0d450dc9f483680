// PostgreSQL specifics: several writers (separate pools, as separate processes would be) append
// while a subscriber follows; it must see every event once, in increasing positions, even though
// transactions commit in an order of their own.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { APPEND_LOCK, PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { dropSchema, testConfig } from '../harness.ts';

describe('PostgreSQL event store: gap-safe positions (int)', function () {
  this.timeout(60_000);
  const { postgresUrl } = testConfig();
  const schema = `test_${randomBytes(6).toString('hex')}`;
  after(async () => {
    await dropSchema(postgresUrl, schema);
  });

  /** Four writers append while `reader` follows from the start of a schema of its own. */
  async function followFourWriters(readerWrites: boolean) {
    const own = `test_${randomBytes(6).toString('hex')}`;
    const writers = Array.from(
      { length: 4 },
      () => new PostgresEventStore({ url: postgresUrl, schema: own }),
    );
    const reader = readerWrites ? writers[0]! : new PostgresEventStore({ url: postgresUrl, schema: own });
    const total = 4 * 500;
    const sub = reader.subscribe(0, { batchSize: 50 });
    const seen: { id: string; position: number }[] = [];
    const reading = (async () => {
      for await (const batch of sub) {
        for (const e of batch) seen.push({ id: e.id, position: e.position });
        if (seen.length >= total) break;
      }
    })();
    const ids = new Set<string>();
    await Promise.all(
      writers.map(async (w, n) => {
        for (let i = 0; i < 500; i += 10) {
          await Promise.all(
            Array.from({ length: 10 }, (_, j) => {
              const id = randomUUID();
              ids.add(id);
              return w.append(`w${n}-${(i + j) % 7}`, [{ id, type: 'Tested', data: { n, i: i + j } }]);
            }),
          );
        }
      }),
    );
    await reading;
    sub.close();
    await Promise.all([...new Set([...writers, reader])].map((s) => s.close()));
    await dropSchema(postgresUrl, own);
    assert.equal(seen.length, total);
    assert.equal(new Set(seen.map((s) => s.id)).size, total);
    assert.ok(seen.every((s) => ids.has(s.id)));
    assert.deepEqual(
      seen.map((s) => s.position),
      Array.from({ length: total }, (_, i) => i + 1),
      'every position once, in order',
    );
  }

  it('a subscriber following four concurrent writers misses nothing and never goes back', () =>
    followFourWriters(false));

  it("so does a subscriber of one of them, reading that one's own commits from memory and the others' from the table", () =>
    followFourWriters(true));

  it('an append waits while another transaction holds the append lock, so positions cannot interleave', async () => {
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    await store.append('lock-probe', [{ id: randomUUID(), type: 'Tested', data: {} }]);
    const blocker = new pg.Client({ connectionString: postgresUrl });
    await blocker.connect();
    await blocker.query('BEGIN');
    await blocker.query('SELECT pg_advisory_xact_lock($1)', [APPEND_LOCK]);
    let done = false;
    const append = store.append('lock-probe', [{ id: randomUUID(), type: 'Tested', data: {} }]).then((r) => {
      done = true;
      return r;
    });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(done, false, 'the append went ahead while another writer held the lock');
    await blocker.query('COMMIT');
    await blocker.end();
    assert.equal((await append).nextRevision, 1);
    await store.close();
  });
});
