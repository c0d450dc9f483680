import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { KNOWN_SQL, PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { testConfig } from '../harness.ts';
import { eventStoreContract } from './contract.ts';

const { postgresUrl } = testConfig();

eventStoreContract(
  'PostgreSQL',
  async () => {
    const schema = `test_${randomBytes(6).toString('hex')}`;
    return {
      open: async () => new PostgresEventStore({ url: postgresUrl, schema }),
      cleanup: async () => {
        const client = new pg.Client({ connectionString: postgresUrl });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      },
    };
  },
  { sharedWriters: true },
);

describe('PostgreSQL event store: reads of the log', () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let store: PostgresEventStore;
  let queries = 0;
  const ev = () => ({ id: randomUUID(), type: 'Tested', data: { n: 1 } });

  before(async () => {
    store = new PostgresEventStore({ url: postgresUrl, schema });
    // Counted at the real pool: every readAll query goes through it (appends take a client of it).
    const pool = (store as unknown as { pool: pg.Pool }).pool;
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    pool.query = ((...args: unknown[]) => {
      queries++;
      return query(...args);
    }) as typeof pool.query;
  });
  after(async () => {
    await store.close();
    const client = new pg.Client({ connectionString: postgresUrl });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  it('reads of one page asked for in one turn share one query; a read asked for once it was sent has its own', async () => {
    await store.append('s-1', [ev()]);
    queries = 0;
    const pages = await Promise.all([
      store.readAll(0, 10),
      store.readAll(0, 10),
      store.readAll(0, 10),
      store.readAll(1, 10),
    ]);
    assert.equal(queries, 2, 'one query per distinct page');
    assert.deepEqual(
      pages.map((p) => p.length),
      [1, 1, 1, 0],
    );
    const first = store.readAll(0, 10);
    await new Promise((resolve) => setImmediate(resolve)); // first's query is on its way
    await store.append('s-1', [ev()]);
    const second = await store.readAll(0, 10);
    assert.equal(second.length, 2, 'the later read sees what was appended before it was asked for');
    await first;
    assert.equal(queries, 4);
  });
});

describe('PostgreSQL event store: the append look-up plan', () => {
  const schema = `test_${randomBytes(6).toString('hex')}`;
  let client: pg.Client;
  // The plan PostgreSQL keeps for the named statement after five calls: the generic one, made for
  // whatever the table held then.
  const genericPlan = async () => {
    await client.query('DEALLOCATE ALL');
    await client.query(`PREPARE known(text[], text[]) AS ${KNOWN_SQL}`);
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(
      `EXPLAIN EXECUTE known(ARRAY['a','b','c'], ARRAY['device-0','device-1'])`,
    );
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  };

  before(async () => {
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    await store.head(); // migrated: the table exists, empty
    await store.close();
    client = new pg.Client({ connectionString: postgresUrl, options: `-c search_path=${schema}` });
    await client.connect();
    await client.query('SET plan_cache_mode = force_generic_plan');
  });
  after(async () => {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  });

  it('reads one index entry per id and per stream, however large the table and its streams', async () => {
    const empty = await genericPlan();
    assert.doesNotMatch(empty, /Seq Scan|Hash Join/, empty);
    await client.query(
      `INSERT INTO hub_events (position, stream, revision, id, type, data, metadata)
       SELECT g, 'device-' || (g % 2), g / 2, 'id-' || g, 'Tested', '{}', '{}'
       FROM generate_series(1, 100000) g`,
    );
    await client.query('ANALYZE hub_events');
    const large = await genericPlan();
    assert.doesNotMatch(large, /Seq Scan|Hash Join|GroupAggregate/, large);
    // Each stream's last revision: the first entry of a backward scan of its index.
    assert.match(large, /Limit[\s\S]*Index Only Scan Backward using hub_events_stream_revision_key/, large);
  });
});
