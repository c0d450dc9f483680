// Projection replay throughput on both profiles: a log of N events replayed by
// `replayProjection` (the code behind `hub projections replay`, and what rebuilds the embedded read
// models) beside ceilings measured in the same run.
//   distributed: PostgreSQL → Redis; ceilings: reading the same log alone, and a plain pipelined
//                ioredis loop sending the same Redis commands without the projection machinery.
//   embedded:    SQLite → the in-process read store; ceiling: reading the same log alone.
//
//   node bench/replay.ts [events]      (default 1,000,000; the distributed run needs `npm run infra:up`)
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import pg from 'pg';
import { loadConfig } from '../infra/config.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import { PostgresEventStore } from '../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../infra/eventstore/sqlite.ts';
import { MemoryReadStore } from '../infra/readstore/memory.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import { RedisReadStore } from '../infra/readstore/redis.ts';
import { createLogger } from '../infra/telemetry.ts';
import { replayProjection } from '../projections/replay.ts';
import { streamCatalog } from '../projections/streams.ts';
import { fmt, machine, recordFigures, writeSection } from './report.ts';

const EVENTS = Number(process.argv[2] ?? 1_000_000);
const STREAMS = 10_000;
const config = loadConfig();
const logger = createLogger('warn');
const schema = `bench_${randomBytes(4).toString('hex')}`;
const projection = { ...streamCatalog, name: `bench-${schema}` };

/** The same log in SQLite, seeded straight with SQL like the PostgreSQL one. */
async function seedSqlite(path: string): Promise<void> {
  await new SqliteEventStore(path).close(); // creates the file and runs the migrations
  const db = new DatabaseSync(path);
  db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
    WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ${EVENTS})
    INSERT INTO events (position, stream, revision, id, type, data, metadata, created)
    SELECT n, 'device-' || (n % ${STREAMS}), n / ${STREAMS}, 'evt-' || n,
           CASE WHEN n % 3 = 0 THEN 'DeviceUpdated' ELSE 'DeviceMetaUpdated' END,
           json_object('device_id', 'device-' || (n % ${STREAMS}), 'changed', json_object('fw', '4.2.1', 'temp', CAST(n % 40 AS TEXT))),
           '{}', (unixepoch() - ${EVENTS} + n) * 1000
    FROM g;`);
  db.close();
}

/** Replays the catalog projection from 0 into `readStore`, with progress. */
async function replay(store: EventStore, readStore: ReadStore) {
  let lastPrint = 0;
  const result = await replayProjection({
    store,
    readStore,
    projection,
    logger,
    owner: 'bench',
    dropGraceMs: 0,
    batchSize: 2000,
    onProgress: (p) => {
      if (Date.now() - lastPrint > 2000) {
        lastPrint = Date.now();
        process.stderr.write(`  ${fmt(p.checkpoint)}/${fmt(p.head)} ${fmt(p.eventsPerSecond)} events/s\n`);
      }
    },
  });
  const memory = process.memoryUsage().rss;
  await readStore.drop(projection.name, result.generation);
  return { rate: result.applied / result.seconds, applied: result.applied, seconds: result.seconds, memory };
}

/** Reading the log alone, page by page as the replay does: a ceiling. */
async function readRate(store: EventStore): Promise<number> {
  const started = performance.now();
  let n = 0;
  for (
    let page = await store.readAll(0, 1000);
    page.length > 0;
    page = await store.readAll(page.at(-1)!.position, 1000)
  ) {
    n += page.length;
  }
  return n / ((performance.now() - started) / 1000);
}

async function seed(): Promise<void> {
  // Seeding goes straight to SQL: the append path is measured by bench/eventstore.ts.
  const store = new PostgresEventStore({ url: config.postgresUrl, schema });
  await store.head(); // runs the migrations
  await store.close();
  const client = new pg.Client({ connectionString: config.postgresUrl });
  await client.connect();
  await client.query(`SET search_path = ${schema}`);
  await client.query(
    `INSERT INTO hub_events (position, stream, revision, id, type, data, metadata, created)
     SELECT g, 'device-' || (g % ${STREAMS}), g / ${STREAMS}, 'evt-' || g,
            CASE WHEN g % 3 = 0 THEN 'DeviceUpdated' ELSE 'DeviceMetaUpdated' END,
            json_build_object('device_id', 'device-' || (g % ${STREAMS}), 'changed', json_build_object('fw', '4.2.1', 'temp', (g % 40)::text)),
            '{}'::json, now() - make_interval(secs => ${EVENTS} - g)
     FROM generate_series(1, ${EVENTS}) AS g`,
  );
  await client.end();
}

/** The same three Redis writes per event, sent by a plain pipelined loop. */
async function redisCeiling(): Promise<number> {
  const redis = new Redis(config.redisUrl);
  const prefix = `hub:bench-ceiling:${schema}:`;
  const started = performance.now();
  const now = Date.now();
  for (let i = 0; i < EVENTS; i += 1000) {
    const pipe = redis.pipeline();
    for (let j = i; j < Math.min(EVENTS, i + 1000); j++) {
      const stream = `device-${j % STREAMS}`;
      pipe.hset(
        `${prefix}stream:${stream}`,
        'stream',
        JSON.stringify(stream),
        'revision',
        String(j),
        'last_type',
        '"DeviceMetaUpdated"',
        'last_position',
        String(j),
        'updated',
        String(now),
      );
      pipe.hincrby(`${prefix}totals`, 'DeviceMetaUpdated', 1);
    }
    await pipe.exec();
  }
  const rate = EVENTS / ((performance.now() - started) / 1000);
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length) await redis.unlink(keys);
  } while (cursor !== '0');
  await redis.quit();
  return rate;
}

async function embeddedRun() {
  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-replay-'));
  try {
    const path = join(dir, 'events.sqlite');
    process.stderr.write(`seeding ${fmt(EVENTS)} events into SQLite...\n`);
    await seedSqlite(path);
    const store = new SqliteEventStore(path);
    const readStore = new MemoryReadStore();
    const run = await replay(store, readStore);
    await readStore.close();
    const read = await readRate(store);
    await store.close();
    return { ...run, read };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function distributedRun() {
  process.stderr.write(`seeding ${fmt(EVENTS)} events into PostgreSQL schema ${schema}...\n`);
  await seed();
  const store = new PostgresEventStore({ url: config.postgresUrl, schema });
  const readStore = new RedisReadStore(config.redisUrl);
  const run = await replay(store, readStore);
  await readStore.close();
  const read = await readRate(store);
  await store.close();
  const redisRate = await redisCeiling();
  const client = new pg.Client({ connectionString: config.postgresUrl });
  await client.connect();
  await client.query(`DROP SCHEMA ${schema} CASCADE`);
  await client.end();
  return { ...run, read, redisRate };
}

async function main() {
  const embedded = await embeddedRun();
  const distributed = await distributedRun();
  const lower = Math.min(distributed.read, distributed.redisRate);
  const body = `## Projection replay

\`node bench/replay.ts ${EVENTS}\` on ${machine()}. A log of ${fmt(EVENTS)} events over ${fmt(STREAMS)}
streams, replayed by \`replayProjection\` (what \`hub projections replay\` runs, and what rebuilds the
embedded read models at each start) through the stream catalog projection (three read-model writes
per event), in batches of 2,000, each batch applied with its checkpoint. Embedded: from SQLite into
the in-process read store. Distributed: from PostgreSQL into Redis, each batch one Lua script.
Ceilings measured in the same run: reading the same log alone (both profiles), and a plain pipelined
ioredis loop sending the same commands with no projection, batching or checkpoint (distributed). The
replay can beat that loop: one Lua script per batch spares Redis a parsed command and a reply for
every write.

Target: ≥ 50,000 events/s on a 2-core machine.

| Profile | Run | Events/s | Seconds | RSS at the end MiB | Share of ceiling |
|---|---|---:|---:|---:|---:|
| embedded | replay SQLite → in-process read store | ${fmt(embedded.rate)} | ${embedded.seconds.toFixed(1)} | ${fmt(embedded.memory / 2 ** 20)} | ${fmt((100 * embedded.rate) / embedded.read)} % of reading the log |
| embedded | ceiling: read the log from SQLite | ${fmt(embedded.read)} | | | |
| distributed | replay PostgreSQL → Redis | ${fmt(distributed.rate)} | ${distributed.seconds.toFixed(1)} | ${fmt(distributed.memory / 2 ** 20)} | ${fmt((100 * distributed.rate) / lower)} % of the lower ceiling |
| distributed | ceiling: read the log from PostgreSQL | ${fmt(distributed.read)} | | | |
| distributed | ceiling: plain pipelined Redis writes | ${fmt(distributed.redisRate)} | | | |
`;
  writeSection('replay', body);
  recordFigures('replay', [
    {
      benchmark: 'projection replay SQLite → in-process read store',
      profile: 'embedded',
      value: embedded.rate,
      unit: 'events/s',
      ceiling: embedded.read,
      ceilingName: 'reading the log from SQLite',
      target: '≥ 50,000 events/s',
      met: embedded.rate >= 50_000,
    },
    {
      benchmark: 'projection replay PostgreSQL → Redis',
      profile: 'distributed',
      value: distributed.rate,
      unit: 'events/s',
      ceiling: lower,
      ceilingName: 'the lower of: reading the log, pipelined Redis writes',
      target: '≥ 50,000 events/s',
      met: distributed.rate >= 50_000,
    },
  ]);
  console.log(body);
}

await main();
