import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import type { RecordedEvent } from '../../infra/eventstore/port.ts';
import {
  APPEND_LOCK,
  PostgresEventStore,
  STATEMENTS,
  sessionOptions,
} from '../../infra/eventstore/postgres.ts';
import { dropSchema, testConfig } from '../harness.ts';
import { eventStoreContract } from './contract.ts';

const { postgresUrl } = testConfig();

eventStoreContract(
  'PostgreSQL',
  async () => {
    const schema = `test_${randomBytes(6).toString('hex')}`;
    return {
      open: async () => new PostgresEventStore({ url: postgresUrl, schema }),
      cleanup: () => dropSchema(postgresUrl, schema),
    };
  },
  { sharedWriters: true },
);

/** Calls `counted` with the name of each named statement `store` sends: counted at the real pool,
 * which every read goes through (appends may too). */
function countStatements(store: PostgresEventStore, counted: (name: string) => void): void {
  const pool = (store as unknown as { pool: pg.Pool }).pool;
  const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
  pool.query = ((...args: unknown[]) => {
    const name = (args[0] as { name?: string }).name;
    if (name) counted(name);
    return query(...args);
  }) as typeof pool.query;
}

const countReadsOfLog = (store: PostgresEventStore, counted: () => void) =>
  countStatements(store, (name) => name === 'hub-read-all' && counted());

describe('PostgreSQL event store: reads of the log', () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let store: PostgresEventStore;
  // Appends the log's reads are made after: another process's, which this store reads from the table.
  let writer: PostgresEventStore;
  let queries = 0;
  let streamQueries = 0;
  let snapshotQueries = 0;
  const ev = () => ({ id: randomUUID(), type: 'Tested', data: { n: 1 } });

  before(async () => {
    store = new PostgresEventStore({ url: postgresUrl, schema });
    writer = new PostgresEventStore({ url: postgresUrl, schema });
    countStatements(store, (name) => {
      if (name === 'hub-read-all') queries++;
      if (name === 'hub-read-streams') streamQueries++;
      if (name === 'hub-read-snapshots') snapshotQueries++;
    });
  });
  after(async () => {
    await store.close();
    await writer.close();
    await dropSchema(postgresUrl, schema);
  });

  it('reads asked for in one turn share one query, each answered its own page; a read asked for once it was sent has its own', async () => {
    await writer.append('s-1', [ev()]);
    queries = 0;
    const pages = await Promise.all([
      store.readAll(0, 10),
      store.readAll(0, 10),
      store.readAll(0, 1),
      store.readAll(1, 10),
    ]);
    assert.equal(queries, 1, 'one query from the lowest position');
    assert.deepEqual(
      pages.map((p) => p.map((e) => e.position)),
      [[1], [1], [1], []],
    );
    const first = store.readAll(0, 10);
    await new Promise((resolve) => setImmediate(resolve)); // first's query is on its way
    await writer.append('s-1', [ev()]);
    const second = await store.readAll(0, 10);
    assert.equal(second.length, 2, 'the later read sees what was appended before it was asked for');
    await first;
    assert.equal(queries, 3);
  });

  it("reads of streams asked for in one turn go as one statement, each answered its own stream's page", async () => {
    await store.append('r-1', [ev(), ev(), ev()]);
    await store.append('r-2', [ev()]);
    await store.append('r-1', [ev()]);
    streamQueries = 0;
    const pages = await Promise.all([
      store.readStream('r-1', 0, 10),
      store.readStream('r-2', 0, 10),
      store.readStream('r-1', 1, 2),
      store.readStream('r-1', 0, 10),
      store.readStream('r-3', 0, 10),
      store.readStream('r-2', 1, 10),
    ]);
    assert.equal(streamQueries, 1, 'one statement');
    assert.deepEqual(
      pages.map((p) => p.map((e) => `${e.stream}@${e.revision}`)),
      [
        ['r-1@0', 'r-1@1', 'r-1@2', 'r-1@3'],
        ['r-2@0'],
        ['r-1@1', 'r-1@2'],
        ['r-1@0', 'r-1@1', 'r-1@2', 'r-1@3'],
        [],
        [],
      ],
    );
    assert.deepEqual(pages[0], await store.readStream('r-1', 0, 10), 'as a read of its own answers');
    assert.equal(streamQueries, 2);
  });

  it('reads of snapshots asked for in one turn go as one statement, each answered its own', async () => {
    await store.saveSnapshot('r-1', { kind: 'device', shape: '1.a', revision: 3, state: { n: 1 } });
    await store.saveSnapshot('r-1', { kind: 'trail', shape: '1.b', revision: 2, state: { n: 2 } });
    await store.saveSnapshot('r-2', { kind: 'device', shape: '1.a', revision: 0, state: { n: 3 } });
    snapshotQueries = 0;
    const found = await Promise.all([
      store.readSnapshot('r-1', 'device'),
      store.readSnapshot('r-9', 'device'),
      store.readSnapshot('r-2', 'device'),
      store.readSnapshot('r-1', 'trail'),
      store.readSnapshot('r-1', 'device'),
    ]);
    assert.equal(snapshotQueries, 1, 'one statement');
    assert.deepEqual(found, [
      { kind: 'device', shape: '1.a', revision: 3, state: { n: 1 } },
      undefined,
      { kind: 'device', shape: '1.a', revision: 0, state: { n: 3 } },
      { kind: 'trail', shape: '1.b', revision: 2, state: { n: 2 } },
      { kind: 'device', shape: '1.a', revision: 3, state: { n: 1 } },
    ]);
    assert.deepEqual(await store.readSnapshot('r-1', 'trail'), found[3], 'as a read of its own answers');
    assert.equal(snapshotQueries, 2);
  });

  it('reads asked for just before the store closes are answered', async () => {
    const closing = new PostgresEventStore({ url: postgresUrl, schema });
    await closing.head();
    const reads = [
      closing.readStream('r-1', 0, 10),
      closing.readSnapshot('r-1', 'device'),
      closing.readAll(0, 1),
    ];
    await closing.close();
    const [events, snapshot, log] = await Promise.all(reads);
    assert.equal((events as RecordedEvent[]).length, 4);
    assert.equal((snapshot as { revision: number }).revision, 3);
    assert.equal((log as RecordedEvent[]).length, 1);
  });

  it('a read whose page the shared query cut short gets a query of its own', async () => {
    const head = (await store.readAll(0, 1000)).length;
    await writer.append(
      's-2',
      Array.from({ length: 10 }, () => ev()),
    );
    queries = 0;
    const [low, high, end] = await Promise.all([
      store.readAll(0, 3),
      store.readAll(head + 5, 3),
      store.readAll(head + 9, 3),
    ]);
    assert.deepEqual(
      low.map((e) => e.position),
      [1, 2, 3],
    );
    assert.deepEqual(
      high.map((e) => e.position),
      [head + 6, head + 7, head + 8],
    );
    assert.deepEqual(
      end.map((e) => e.position),
      [head + 10],
    );
    assert.equal(
      queries,
      3,
      'the shared one (three rows from the start), then one for each page it cut short',
    );
  });
});

describe("PostgreSQL event store: notifications of a schema's commits", () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  const elsewhere = `test_${randomBytes(6).toString('hex')}`;
  let store: PostgresEventStore;
  let neighbour: PostgresEventStore; // another hub, in the same database
  let queries = 0;
  const ev = () => ({ id: randomUUID(), type: 'Tested', data: { n: 1 } });

  before(async () => {
    store = new PostgresEventStore({ url: postgresUrl, schema });
    neighbour = new PostgresEventStore({ url: postgresUrl, schema: elsewhere });
    countReadsOfLog(store, () => queries++);
  });
  after(async () => {
    await store.close();
    await neighbour.close();
    await dropSchema(postgresUrl, schema);
    await dropSchema(postgresUrl, elsewhere);
  });

  it("wake its followers, not another hub's in the same database", async () => {
    const got: RecordedEvent[] = [];
    const sub = store.subscribe(0, { pollMs: 60_000 });
    const following = (async () => {
      for await (const page of sub) got.push(...page);
    })();
    await store.append('s-a', [ev()]);
    await new Promise((r) => setTimeout(r, 300)); // listening, and caught up
    assert.equal(got.length, 1);
    queries = 0;
    for (let i = 0; i < 5; i++) await neighbour.append('s-n', [ev()]);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(queries, 0, "the other hub's commits woke no follower here");
    await store.append('s-a', [ev()]);
    for (const end = Date.now() + 5_000; got.length < 2 && Date.now() < end; )
      await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(
      got.map((e) => e.position),
      [1, 2],
      'its own commit woke it (the poll is a minute)',
    );
    sub.close();
    await following;
  });
});

describe("PostgreSQL event store: a process's own commits", () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let store: PostgresEventStore;
  let other: PostgresEventStore; // another process writing the same log
  let queries = 0;
  const ev = () => ({ id: randomUUID(), type: 'Tested', data: { n: 1 } });

  before(async () => {
    store = new PostgresEventStore({ url: postgresUrl, schema });
    other = new PostgresEventStore({ url: postgresUrl, schema });
    countReadsOfLog(store, () => queries++);
  });
  after(async () => {
    await store.close();
    await other.close();
    await dropSchema(postgresUrl, schema);
  });

  /** A follower of `store` from the start (polling once a minute: only a wake moves it). */
  async function follow() {
    const got: RecordedEvent[] = [];
    const sub = store.subscribe(0, { pollMs: 60_000 });
    const following = (async () => {
      for await (const page of sub) got.push(...page);
    })();
    const until = async (n: number) => {
      for (const end = Date.now() + 5_000; got.length < n && Date.now() < end; )
        await new Promise((r) => setTimeout(r, 5));
      assert.equal(got.length, n, `the follower has ${n} events`);
    };
    const stop = async () => {
      sub.close();
      await following;
    };
    return { got, until, stop };
  }

  it('are read by its followers from memory, as the table answers them', async () => {
    const follower = await follow();
    await new Promise((r) => setTimeout(r, 300)); // listening, and its first read answered
    queries = 0;
    const events = [
      { id: randomUUID(), type: 'Tested', data: { nested: { list: [1, 'two', null] }, text: 'é ✓ \u0000' } },
      { id: randomUUID(), type: 'Tested', data: null, metadata: { by: 'someone', at: 1.5 } },
      { id: randomUUID(), type: 'Other', data: 'a string' },
    ];
    await store.append('own-1', events.slice(0, 2));
    await Promise.all([store.append('own-2', [events[2]!]), store.append('own-1', [ev()])]);
    await follower.until(4);
    assert.equal(queries, 0, 'no read of the table');
    assert.deepEqual(follower.got, await other.readAll(0, 100), 'the events as the table has them');
    await follower.stop();
  });

  it("another process's commits between its own are read from the table, none skipped", async () => {
    const head = await store.head();
    const follower = await follow();
    await follower.until(head);
    await store.append('own-3', [ev()]);
    await follower.until(head + 1);
    queries = 0;
    await other.append('other-1', [ev()]); // announced by its notification only
    await follower.until(head + 2);
    assert.ok(queries >= 1, 'read from the table');
    await store.append('own-3', [ev()]); // after the other's: this process's tail starts again
    await store.append('own-3', [ev()]);
    await follower.until(head + 4);
    assert.deepEqual(follower.got, await other.readAll(0, 100));
    assert.deepEqual(
      follower.got.map((e) => e.position),
      Array.from({ length: head + 4 }, (_, i) => i + 1),
    );
    await follower.stop();
  });

  it("another process's commit, heard while a commit of this one waits for the append lock, is read without waiting for it", async () => {
    const head = await store.head();
    const follower = await follow();
    await follower.until(head);
    // Transactions that take the append lock in turn, as other processes' group commits do.
    const locker = async () => {
      const c = new pg.Client({ connectionString: postgresUrl });
      await c.connect();
      await c.query('BEGIN');
      return c;
    };
    const lock = (c: pg.Client) => c.query('SELECT pg_advisory_xact_lock($1)', [APPEND_LOCK]);
    const first = await locker();
    const second = await locker();
    await lock(first);
    // In the lock's queue, in this order: the other process's commit, a second holder, this one's.
    const othersCommit = other.append('other-2', [ev()]);
    await new Promise((r) => setTimeout(r, 100));
    const secondHolds = lock(second);
    await new Promise((r) => setTimeout(r, 100));
    let ownAnswered = false;
    const ownCommit = store.append('own-4', [ev()]).then(() => {
      ownAnswered = true;
    });
    await new Promise((r) => setTimeout(r, 100));
    await first.query('COMMIT'); // the other process commits; the second holder then keeps the lock
    await othersCommit;
    await secondHolds;
    await follower.until(head + 1);
    assert.equal(ownAnswered, false, "heard while this process's commit was still waiting");
    await second.query('COMMIT');
    await ownCommit;
    await follower.until(head + 2);
    await Promise.all([first.end(), second.end()]);
    await follower.stop();
  });
});

describe('PostgreSQL event store: the plans it keeps', () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let client: pg.Client;
  const args: Record<keyof typeof STATEMENTS, string> = {
    'hub-append-known': `ARRAY['id-1','id-2','x'], ARRAY['device-0','device-1','nope']`,
    'hub-read-streams': `ARRAY['device-0','device-1','nope'], ARRAY[10, 0, 5]::bigint[], ARRAY[100, 3, 100]`,
    'hub-read-all': `10, 100`,
    'hub-read-snapshots': `ARRAY['device-0','device-1'], ARRAY['device','device']`,
    'hub-save-snapshot': `'device-0', 'device', '1.abc', 10, '{}'`,
  };
  const types: Record<keyof typeof STATEMENTS, string> = {
    'hub-append-known': 'text[], text[]',
    'hub-read-streams': 'text[], bigint[], bigint[]',
    'hub-read-all': 'bigint, int',
    'hub-read-snapshots': 'text[], text[]',
    'hub-save-snapshot': 'text, text, text, bigint, json',
  };
  const names = Object.keys(STATEMENTS) as (keyof typeof STATEMENTS)[];
  // The generic plan, made for what the table holds now: the one a store's session keeps from its first call.
  const prepareAll = async () => {
    await client.query('DEALLOCATE ALL');
    for (const [i, name] of names.entries())
      await client.query(`PREPARE s${i}(${types[name]}) AS ${STATEMENTS[name]}`);
  };
  const plans = async (analyze: boolean) => {
    const out: [keyof typeof STATEMENTS, string][] = [];
    for (const [i, name] of names.entries()) {
      const { rows } = await client.query<{ 'QUERY PLAN': string }>(
        `EXPLAIN ${analyze ? '(ANALYZE, TIMING OFF) ' : ''}EXECUTE s${i}(${args[name]})`,
      );
      out.push([name, rows.map((r) => r['QUERY PLAN']).join('\n')]);
    }
    return out;
  };
  const indexOnly = (plan: string, name: string) => {
    assert.doesNotMatch(plan, /Seq Scan|Sort|Hash|GroupAggregate/, `${name}:\n${plan}`);
    // The only aggregates: the look-up's two JSON ones, over the arrays it was given.
    assert.equal(
      plan.match(/Aggregate/g)?.length ?? 0,
      name === 'hub-append-known' ? 2 : 0,
      `${name}:\n${plan}`,
    );
  };

  before(async () => {
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    await store.head(); // migrated: the table exists, empty
    await store.close();
    client = new pg.Client({ connectionString: postgresUrl, options: sessionOptions(schema) });
    await client.connect();
  });
  after(async () => {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  const insert = (from: number, to: number) =>
    client.query(
      `INSERT INTO hub_events (position, stream, revision, id, type, data, metadata)
       SELECT g, 'device-' || (g % 2), g / 2, 'id-' || g, 'Tested', '{}', '{}'
       FROM generate_series(${from}, ${to}) g`,
    );

  const snapshots = (from: number, to: number) =>
    client.query(
      `INSERT INTO hub_snapshots (stream, kind, shape, revision, state)
       SELECT 'device-' || g, 'device', '1.a', g, '{}' FROM generate_series(${from}, ${to}) g`,
    );

  it("are a store session's from the first call: never planned again for the values of a call", async () => {
    // A custom plan sizes unnest() from the arrays it is given, so it always looked cheaper than
    // the generic one, and PostgreSQL planned every call of hub_append's statements again.
    const append = () =>
      client.query({
        name: 'generic-append',
        text: 'SELECT hub_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) AS written',
        values: [
          ['generic'],
          [0],
          ['any'],
          ['generic'],
          [1],
          [randomUUID()],
          ['Tested'],
          ['{}'],
          ['{}'],
          Date.now(),
          'hub_test',
        ],
      });
    for (let i = 0; i < 8; i++) assert.notEqual((await append()).rows[0].written, null);
    const { rows } = await client.query(
      `SELECT generic_plans::int, custom_plans::int FROM pg_prepared_statements WHERE name = 'generic-append'`,
    );
    assert.deepEqual(rows, [{ generic_plans: 8, custom_plans: 0 }]);
    await client.query(`DELETE FROM hub_events WHERE stream = 'generic'`);
  });

  it('are index look-ups, made from an empty table', async () => {
    await prepareAll();
    for (const [name, plan] of await plans(false)) indexOnly(plan, name);
  });

  it('made from a tiny analyzed table, stay index look-ups as it grows large', async () => {
    await insert(1, 5);
    await snapshots(0, 4);
    await client.query('ANALYZE hub_events');
    await client.query('ANALYZE hub_snapshots');
    await prepareAll();
    for (const [i, name] of names.entries()) await client.query(`EXECUTE s${i}(${args[name]})`); // planned
    await insert(6, 100_000); // two streams of 50,000 events; the plans are kept
    await snapshots(5, 50_000);
    for (const [name, plan] of await plans(true)) indexOnly(plan, name);
    // Each maximum is the first entry of a backward scan of its index.
    const known = (await plans(false))[0]![1];
    assert.match(known, /Limit[\s\S]*Index Only Scan Backward using hub_events_stream_revision_key/);
    assert.match(known, /Limit[\s\S]*Index Only Scan Backward using hub_events_pkey/);
    // One look-up per id and per stream, not one for the aggregate and another for its filter.
    assert.equal(known.match(/using hub_events_id_key/g)?.length, 1, known);
    assert.equal(known.match(/using hub_events_stream_revision_key/g)?.length, 1, known);
  });
});

describe('PostgreSQL event store: the one-statement append', () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let store: PostgresEventStore;
  let checked = 0; // group commits decided by the general path
  const ev = (n: number) => ({ id: randomUUID(), type: 'Tested', data: { n } });

  before(async () => {
    store = new PostgresEventStore({ url: postgresUrl, schema });
    await store.head(); // migrated
    const inner = store as unknown as { commitChecked: (...args: unknown[]) => Promise<unknown> };
    const commitChecked = inner.commitChecked.bind(store);
    inner.commitChecked = (...args) => {
      checked++;
      return commitChecked(...args);
    };
  });
  after(async () => {
    await store.close();
    await dropSchema(postgresUrl, schema);
  });

  it('writes a batch of new events itself; a conflict or a retry in a batch is decided by the checked path', async () => {
    const [a, b] = [`a-${randomUUID()}`, `b-${randomUUID()}`];
    const head = await store.head();
    const first = await Promise.all([
      store.append(a, [ev(1), ev(2)], 'no_stream'),
      store.append(b, [ev(3)], 'any'),
      store.append(a, [ev(4)], 1), // after the first append of the same batch
    ]);
    assert.equal(checked, 0, 'written in one statement');
    assert.deepEqual(
      first.map((r) => [r.nextRevision, r.position - head]),
      [
        [1, 2],
        [0, 3],
        [2, 4],
      ],
    );
    assert.deepEqual(
      (await store.readStream(a)).map((e) => [e.revision, e.position - head, (e.data as { n: number }).n]),
      [
        [0, 1, 1],
        [1, 2, 2],
        [2, 4, 4],
      ],
    );
    // Two racing appends at one revision and a good neighbour: the statement writes nothing, and
    // the checked path stores the first and the neighbour and refuses the second.
    const retried = ev(5);
    const racing = await Promise.allSettled([
      store.append(a, [retried], 2),
      store.append(a, [ev(6)], 2),
      store.append(b, [ev(7)], 0),
    ]);
    assert.equal(checked, 1);
    assert.deepEqual(
      racing.map((r) => r.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.match(String((racing[1] as PromiseRejectedResult).reason), /revision/i);
    // A retry of a stored append answers its first result and stores nothing.
    const again = await store.append(a, [retried], 2);
    assert.equal(checked, 2);
    assert.deepEqual(again, (racing[0] as PromiseFulfilledResult<typeof again>).value);
    assert.deepEqual(
      (await store.readStream(a)).map((e) => (e.data as { n: number }).n),
      [1, 2, 4, 5],
    );
  });

  it('reads by index only, its plans made from a tiny table, as the table grows large', async () => {
    const client = new pg.Client({ connectionString: postgresUrl, options: sessionOptions(schema) });
    await client.connect();
    try {
      const append = (stream: string, expected: string) =>
        client.query(
          `SELECT hub_append(ARRAY[$1], ARRAY[0], ARRAY[$2], ARRAY[$1], ARRAY[1::bigint], ARRAY[$3],
             ARRAY['Tested'], ARRAY['{}'::json], ARRAY['{}'::json], $4, 'hub_test') AS written`,
          [stream, expected, randomUUID(), Date.now()],
        );
      assert.notEqual((await append('big-0', 'no_stream')).rows[0].written, null); // planned here
      await client.query(
        `INSERT INTO hub_events (position, stream, revision, id, type, data, metadata)
         SELECT h + g, 'big-' || (g % 2), g / 2, 'grown-' || g, 'Tested', '{}', '{}'
         FROM generate_series(1, 100000) g, (SELECT max(position) AS h FROM hub_events) m`,
      );
      const stats = async () => {
        await client.query('SELECT pg_stat_force_next_flush()');
        await new Promise((r) => setTimeout(r, 50)); // flushed as the transaction before this ends
        const { rows } = await client.query(
          `SELECT seq_scan::int, seq_tup_read::int, (idx_tup_fetch + 0)::int AS fetched
           FROM pg_stat_user_tables WHERE relname = 'hub_events' AND schemaname = $1`,
          [schema],
        );
        return rows[0] as { seq_scan: number; seq_tup_read: number; fetched: number };
      };
      const before = await stats();
      const written = (await append('big-0', '50000')).rows[0].written;
      const after = await stats();
      assert.equal(written.revisions['big-0'], 50000, "checked the stream's last revision");
      assert.equal(after.seq_scan - before.seq_scan, 0, 'no sequential scan');
      assert.ok(
        after.fetched - before.fetched < 10,
        `${after.fetched - before.fetched} rows fetched by index`,
      );
    } finally {
      await client.end();
    }
  });
});
