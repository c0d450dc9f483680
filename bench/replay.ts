// Projection replay throughput on the distributed profile: a log of N events in PostgreSQL
// replayed into Redis by `replayProjection` (the code behind `hub projections replay`), beside
// two ceilings measured in the same run: reading the same log alone, and a plain pipelined
// ioredis loop sending the same Redis commands without the projection machinery.
//
//   node bench/replay.ts [events]      (default 1,000,000; needs `npm run infra:up`)
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { loadConfig } from '../infra/config.ts';
import { PostgresEventStore } from '../infra/eventstore/postgres.ts';
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

async function readOnlyCeiling(): Promise<number> {
  const store = new PostgresEventStore({ url: config.postgresUrl, schema });
  const started = performance.now();
  let n = 0;
  for (
    let page = await store.readAll(0, 1000);
    page.length > 0;
    page = await store.readAll(page.at(-1)!.position, 1000)
  ) {
    n += page.length;
  }
  await store.close();
  return n / ((performance.now() - started) / 1000);
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
      pipe.zadd(`${prefix}streams-by-update`, now + j, stream);
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

async function main() {
  process.stderr.write(`seeding ${fmt(EVENTS)} events into PostgreSQL schema ${schema}...\n`);
  await seed();
  const store = new PostgresEventStore({ url: config.postgresUrl, schema });
  const readStore = new RedisReadStore(config.redisUrl);
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
  const replayRate = result.applied / result.seconds;
  const memory = process.memoryUsage().rss;
  await readStore.drop(projection.name, result.generation);
  await readStore.close();
  await store.close();
  const readRate = await readOnlyCeiling();
  const redisRate = await redisCeiling();
  const client = new pg.Client({ connectionString: config.postgresUrl });
  await client.connect();
  await client.query(`DROP SCHEMA ${schema} CASCADE`);
  await client.end();

  const body = `## Projection replay (distributed profile)

\`node bench/replay.ts ${EVENTS}\` on ${machine()}. A log of ${fmt(EVENTS)} events over ${fmt(STREAMS)}
streams in PostgreSQL, replayed by \`replayProjection\` (what \`hub projections replay\` runs) through the
stream catalog projection (three Redis writes per event) into Redis, in batches of 2,000, each batch
one Lua script with its checkpoint. Ceilings measured in the same run: reading the same log alone, and a
plain pipelined ioredis loop sending the same commands with no projection, batching or checkpoint.
The replay can beat that loop: one Lua script per batch spares Redis a parsed command and a reply
for every write.

Target: ≥ 50,000 events/s on a 2-core machine.

| Run | Events/s | Share of ceiling |
|---|---:|---:|
| replay PostgreSQL → Redis | ${fmt(replayRate)} | ${fmt((100 * replayRate) / Math.min(readRate, redisRate))} % of the lower ceiling |
| ceiling: read the log from PostgreSQL | ${fmt(readRate)} | |
| ceiling: plain pipelined Redis writes | ${fmt(redisRate)} | |

Replay: ${fmt(result.applied)} events in ${result.seconds.toFixed(1)} s; resident memory at the end ${fmt(memory / 2 ** 20)} MiB.
`;
  writeSection('replay', body);
  recordFigures('replay', [
    {
      benchmark: 'projection replay PostgreSQL → Redis',
      profile: 'distributed',
      value: replayRate,
      unit: 'events/s',
      ceiling: Math.min(readRate, redisRate),
      ceilingName: 'the lower of: reading the log, pipelined Redis writes',
      target: '≥ 50,000 events/s',
      met: replayRate >= 50_000,
    },
  ]);
  console.log(body);
}

await main();
