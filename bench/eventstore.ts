// Append throughput and latency of each event store adapter at 1, 16 and 256 concurrent
// appenders, beside the ceiling of the same storage: a plain driver loop inserting the same
// rows in large transactions, with none of the store's checks. Writes docs/benchmarks.md.
//
//   node bench/eventstore.ts [seconds-per-run]     (needs `npm run infra:up` for PostgreSQL)
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import pg from 'pg';
import { loadConfig } from '../infra/config.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import { PostgresEventStore } from '../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../infra/eventstore/sqlite.ts';
import { fmt, machine, percentile, recordFigures, writeSection } from './report.ts';

const SECONDS = Number(process.argv[2] ?? 3);
const CONCURRENCY = [1, 16, 256];
const config = loadConfig();

/** A device-meta change of realistic size (~250 bytes of JSON). */
const payload = (i: number) => ({
  device_id: `dev-${i % 1000}`,
  changed: { fw: '4.2.1', temp: String(20 + (i % 10)), uptime: String(i), rssi: '-67', ip: '10.0.0.12' },
  removed: [],
});

interface Row {
  adapter: string;
  appenders: number;
  eventsPerSecond: number;
  p50: number;
  p99: number;
}

async function run(adapter: string, store: EventStore, appenders: number): Promise<Row> {
  const latencies: number[] = [];
  const deadline = performance.now() + SECONDS * 1000;
  let n = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: appenders }, async (_, a) => {
      while (performance.now() < deadline) {
        const i = n++;
        const t0 = performance.now();
        await store.append(`bench-${a}-${i % 100}`, [
          { id: randomUUID(), type: 'DeviceMetaUpdated', data: payload(i) },
        ]);
        latencies.push(performance.now() - t0);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  latencies.sort((x, y) => x - y);
  return {
    adapter,
    appenders,
    eventsPerSecond: latencies.length / elapsed,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
  };
}

async function sqliteCeiling(): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-'));
  const db = new DatabaseSync(join(dir, 'plain.sqlite'));
  db.exec('PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;');
  db.exec(
    'CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT, revision INTEGER, id TEXT UNIQUE, type TEXT, data TEXT, metadata TEXT, created INTEGER)',
  );
  const insert = db.prepare('INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
  const deadline = performance.now() + SECONDS * 1000;
  const started = performance.now();
  let n = 0;
  while (performance.now() < deadline) {
    db.exec('BEGIN');
    for (let j = 0; j < 1024; j++, n++)
      insert.run(
        n + 1,
        `s-${n % 100}`,
        n,
        randomUUID(),
        'DeviceMetaUpdated',
        JSON.stringify(payload(n)),
        '{}',
        Date.now(),
      );
    db.exec('COMMIT');
  }
  const rate = n / ((performance.now() - started) / 1000);
  db.close();
  rmSync(dir, { recursive: true, force: true });
  return rate;
}

async function postgresCeiling(schema: string): Promise<number> {
  const client = new pg.Client({ connectionString: config.postgresUrl });
  await client.connect();
  await client.query(`CREATE SCHEMA ${schema}; SET search_path = ${schema};
    CREATE TABLE plain (position bigint PRIMARY KEY, stream text, revision bigint, id text UNIQUE, type text, data json, metadata json, created timestamptz DEFAULT now())`);
  const deadline = performance.now() + SECONDS * 1000;
  const started = performance.now();
  let n = 0;
  while (performance.now() < deadline) {
    const cols: unknown[][] = [[], [], [], [], [], [], []];
    for (let j = 0; j < 1000; j++, n++) {
      cols[0]!.push(n + 1);
      cols[1]!.push(`s-${n % 100}`);
      cols[2]!.push(n);
      cols[3]!.push(randomUUID());
      cols[4]!.push('DeviceMetaUpdated');
      cols[5]!.push(JSON.stringify(payload(n)));
      cols[6]!.push('{}');
    }
    await client.query(
      'INSERT INTO plain (position, stream, revision, id, type, data, metadata) SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::json[], $7::json[])',
      cols,
    );
  }
  const rate = n / ((performance.now() - started) / 1000);
  await client.query(`DROP SCHEMA ${schema} CASCADE`);
  await client.end();
  return rate;
}

async function main() {
  const rows: Row[] = [];
  const ceilings: Record<string, number> = {};

  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-'));
  const sqlite = new SqliteEventStore(join(dir, 'events.sqlite'));
  for (const c of CONCURRENCY) rows.push(await run('embedded SQLite (synchronous=FULL)', sqlite, c));
  await sqlite.close();
  rmSync(dir, { recursive: true, force: true });
  ceilings['embedded SQLite (synchronous=FULL)'] = await sqliteCeiling();

  const schema = `bench_${randomBytes(4).toString('hex')}`;
  const postgres = new PostgresEventStore({ url: config.postgresUrl, schema });
  try {
    await postgres.head();
    for (const c of CONCURRENCY) rows.push(await run('PostgreSQL', postgres, c));
    ceilings.PostgreSQL = await postgresCeiling(`${schema}_plain`);
  } catch (err) {
    console.error(`PostgreSQL skipped: ${(err as Error).message} (run npm run infra:up)`);
  } finally {
    await postgres.close();
    const c = new pg.Client({ connectionString: config.postgresUrl });
    await c
      .connect()
      .then(() => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`))
      .catch(() => {});
    await c.end().catch(() => {});
  }

  if (config.esdbUrl) {
    const { EsdbEventStore } = await import('../infra/eventstore/esdb.ts');
    const esdb = new EsdbEventStore(config.esdbUrl);
    for (const c of CONCURRENCY) rows.push(await run('EventStoreDB', esdb, c));
    await esdb.close();
  }

  const table = [
    '| Adapter | Appenders | Events/s | p50 ms | p99 ms | Ceiling events/s (plain driver loop) | Share of ceiling |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.adapter} | ${r.appenders} | ${fmt(r.eventsPerSecond)} | ${fmt(r.p50, 2)} | ${fmt(r.p99, 2)} | ${fmt(ceilings[r.adapter] ?? Number.NaN)} | ${ceilings[r.adapter] ? `${fmt((100 * r.eventsPerSecond) / ceilings[r.adapter]!)} %` : '–'} |`,
    ),
  ];
  const body = `## Event store appends

\`node bench/eventstore.ts ${SECONDS}\` on ${machine()}. Each run appends one ~250-byte event per
append for ${SECONDS} s to 100 streams per appender; every append is acknowledged only once durable
(SQLite \`synchronous=FULL\` in WAL mode; PostgreSQL with \`synchronous_commit=on\`). The ceiling is
a plain driver loop inserting the same rows in transactions of ~1,000 with none of the store's checks
(expected revision, idempotency, ordering lock).${config.esdbUrl ? '' : ' EventStoreDB was not measured: no server here (set `HUB_ESDB_URL`).'}

Targets: embedded ≥ 20,000 durable events/s at 256 appenders; PostgreSQL ≥ 5,000 events/s.

${table.join('\n')}
`;
  writeSection('eventstore', body);
  const at256 = (adapter: string) => rows.find((r) => r.adapter === adapter && r.appenders === 256);
  recordFigures(
    'eventstore',
    (
      [
        ['embedded SQLite (synchronous=FULL)', 'embedded', 20_000],
        ['PostgreSQL', 'distributed', 5_000],
      ] as const
    ).flatMap(([adapter, profile, target]) => {
      const r = at256(adapter);
      return r
        ? [
            {
              benchmark: `event store appends, 256 appenders (${adapter})`,
              profile,
              value: r.eventsPerSecond,
              unit: 'events/s',
              ceiling: ceilings[adapter] ?? Number.NaN,
              ceilingName: 'plain driver loop',
              target: `≥ ${fmt(target)} events/s`,
              met: r.eventsPerSecond >= target,
            },
          ]
        : [];
    }),
  );
  console.log(body);
}

await main();
