// Derivation throughput of the stream processor, on both profiles: a `changes` topic prefilled
// with the changes of 10,000 devices (each created, then reporting metadata), consumed by one
// processor (actors, every derived event logged, subscriptions matched), beside the ceiling
// measured in the same run: a plain consumer loop reading the same topic and doing nothing else.
//   embedded:    the in-process bus, actors and event log in memory (one partition, as `hub start`)
//   distributed: Kafka, actor states in Redis, the event log in PostgreSQL
//
//   node bench/derivation.ts [changes]      (the distributed run needs `npm run infra:up`)
//   HUB_BENCH_PRINT_ONLY=1                  printed, docs untouched
import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { Registry } from 'prom-client';
import { KafkaBus } from '../infra/bus/kafka.ts';
import { MemoryBus } from '../infra/bus/memory.ts';
import { type Bus, SCHEMA_HEADER, TOPICS } from '../infra/bus/port.ts';
import { loadConfig } from '../infra/config.ts';
import { MemoryReadStore } from '../infra/readstore/memory.ts';
import { RedisReadStore } from '../infra/readstore/redis.ts';
import { createLogger } from '../infra/telemetry.ts';
import { type ActorStates, MemoryActorStates, RedisActorStates } from '../processors/stream/actors.ts';
import type { DeviceActor } from '../processors/stream/derive.ts';
import { type EventLog, MemoryEventLog } from '../processors/stream/eventlog.ts';
import { PostgresEventLog } from '../processors/stream/eventlog-postgres.ts';
import { PostgresLogs } from '../processors/stream/postgres-logs.ts';
import {
  ProcessorMetrics,
  projectedSubscriptions,
  StreamProcessor,
  type Subscriptions,
} from '../processors/stream/processor.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { fmt, kafkaVersion, machine, recordFigures, writeSection } from './report.ts';

const CHANGES = Number(process.argv[2] ?? 400_000);
const DEVICES = 10_000;
const PARTITIONS = 12;
const config = loadConfig();
const logger = createLogger('warn');
const prefix = `bench-${Date.now()}-`;
const registry = SchemaRegistry.load();

async function prefill(bus: Bus): Promise<void> {
  const owner = `prn:::accounts:/bench-${randomBytes(3).toString('hex')}`;
  const ids = Array.from({ length: DEVICES }, () => randomBytes(12).toString('hex'));
  const header = { [SCHEMA_HEADER]: 'ChangeRecord.v1' };
  const started = Date.now();
  let position = 0;
  const record = (id: string, type: string, data: Record<string, unknown>) => ({
    key: id,
    value: registry.encode('ChangeRecord', {
      id: randomUUID(),
      type,
      stream: `device-${id}`,
      revision: 0,
      position: ++position,
      created: started,
      schema_version: 1,
      data: JSON.stringify(data),
      metadata: '{}',
    }),
    headers: header,
  });
  let batch = ids.map((id) =>
    record(id, 'DeviceCreated', {
      device_id: id,
      prn: `prn:::devices:/${id}`,
      owner_id: 'o',
      owner_prn: owner,
      owner_nick: 'bench',
      nick: id,
      secret_sealed: 's',
      challenge: 'c',
      user_meta: {},
      device_meta: { fw: '1.0' },
      certificate: null,
    }),
  );
  await bus.send(TOPICS.changes, batch);
  for (let round = 0; position < CHANGES; round++) {
    batch = [];
    for (const id of ids) {
      if (position >= CHANGES) break;
      batch.push(
        record(id, 'DeviceMetaUpdated', {
          device_id: id,
          owner_prn: owner,
          changed: { temp: String(round % 40), seq: String(round) },
          removed: [],
        }),
      );
    }
    await bus.send(TOPICS.changes, batch);
  }
  process.stderr.write(
    `prefilled ${fmt(position)} changes in ${((Date.now() - started) / 1000).toFixed(1)} s\n`,
  );
}

/** A plain consumer of the in-process bus reading the topic, nothing else: the embedded ceiling. */
async function memoryCeiling(): Promise<number> {
  const bus = new MemoryBus({ logger, capacity: CHANGES + DEVICES });
  await bus.ensureTopics([{ topic: TOPICS.changes, partitions: 1 }]);
  await prefill(bus);
  let count = 0;
  let first = 0;
  let done!: (rate: number) => void;
  const finished = new Promise<number>((resolve) => {
    done = resolve;
  });
  const consumer = await bus.consume({
    group: 'ceiling',
    topic: TOPICS.changes,
    handle: async (messages) => {
      first ||= performance.now();
      count += messages.length;
      if (count >= CHANGES) done(CHANGES / ((performance.now() - first) / 1000));
    },
  });
  const rate = await finished;
  await consumer.stop();
  await bus.close();
  return rate;
}

/** A plain kafkajs consumer reading the topic, nothing else: the distributed ceiling. */
async function kafkaCeiling(): Promise<number> {
  const kafka = new Kafka({ clientId: 'bench', brokers: config.kafkaBrokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({
    groupId: `${prefix}ceiling`,
    maxWaitTimeInMs: 50,
    maxBytesPerPartition: 4 << 20,
  });
  await consumer.connect();
  await consumer.subscribe({ topic: prefix + TOPICS.changes, fromBeginning: true });
  let count = 0;
  let first = 0;
  const rate = await new Promise<number>((resolve) => {
    void consumer.run({
      partitionsConsumedConcurrently: 4,
      eachBatch: async ({ batch }) => {
        first ||= performance.now();
        count += batch.messages.length;
        if (count >= CHANGES) resolve(CHANGES / ((performance.now() - first) / 1000));
      },
    });
  });
  await consumer.disconnect();
  return rate;
}

async function derivation(
  bus: Bus,
  parts: {
    states: ActorStates<DeviceActor>;
    log: EventLog;
    subscriptions: Subscriptions;
    partitionsConcurrently: number;
  },
  /** In-process consumers start at once: time from the start (Kafka: from the first change consumed, after the group join). */
  timeFromStart = false,
) {
  const metrics = new ProcessorMetrics(new Registry());
  const processor = new StreamProcessor({
    bus,
    registry,
    ...parts,
    logger,
    metrics,
    concurrency: config.processorConcurrency,
    // No subscription matches here: there are no jobs to hand off.
    handOff: async () => {},
  });
  const rss: number[] = [];
  let first = timeFromStart ? performance.now() : 0;
  let derived = 0;
  await processor.start();
  const elapsed = await new Promise<number>((resolve) => {
    const timer = setInterval(async () => {
      const consumed = (await metrics.changes.get()).values[0]?.value ?? 0;
      if (consumed > 0) first ||= performance.now();
      rss.push(process.memoryUsage().rss);
      if (rss.length % 40 === 0)
        process.stderr.write(`derived from ${fmt(consumed)} of ${fmt(CHANGES)} changes\n`);
      if (consumed >= CHANGES) {
        clearInterval(timer);
        derived = (await metrics.derived.get()).values.reduce((n, v) => n + v.value, 0);
        resolve((performance.now() - first) / 1000);
      }
    }, 25);
  });
  await processor.stop();
  return { rate: CHANGES / elapsed, elapsed, derived, rss: Math.max(...rss) };
}

interface Run {
  profile: 'embedded' | 'distributed';
  name: string;
  ceilingName: string;
  rate: number;
  ceiling: number;
  elapsed: number;
  derived: number;
  rss: number;
}

async function embeddedRun(): Promise<Run> {
  const plain = await memoryCeiling();
  process.stderr.write(`embedded ceiling: ${fmt(plain)} changes/s\n`);
  const bus = new MemoryBus({ logger, capacity: CHANGES + DEVICES });
  await bus.ensureTopics([{ topic: TOPICS.changes, partitions: 1 }]);
  await prefill(bus);
  const run = await derivation(
    bus,
    {
      states: new MemoryActorStates<DeviceActor>(),
      log: new MemoryEventLog({ retentionMs: 86_400_000 }),
      subscriptions: projectedSubscriptions(new MemoryReadStore()),
      partitionsConcurrently: 1,
    },
    true,
  );
  await bus.close();
  return {
    profile: 'embedded',
    name: 'in-process bus, actors and event log in memory',
    ceilingName: 'plain in-process bus consumer loop',
    ceiling: plain,
    ...run,
  };
}

async function distributedRun(): Promise<Run> {
  const bus = new KafkaBus({ brokers: config.kafkaBrokers, clientId: 'bench', logger, prefix });
  const redis = new Redis(config.redisUrl, { enableAutoPipelining: false });
  const readStore = new RedisReadStore(config.redisUrl);
  // The log's tables in a schema of the run's own, dropped after it.
  const schema = `bench_${Date.now()}`;
  const logs = new PostgresLogs({
    url: `${config.postgresUrl}${config.postgresUrl.includes('?') ? '&' : '?'}schema=${schema}`,
    retentionMs: 86_400_000,
  });
  try {
    await bus.ensureTopics([
      { topic: TOPICS.changes, partitions: PARTITIONS },
      { topic: TOPICS.deliveries, partitions: PARTITIONS },
    ]);
    await prefill(bus);
    const plain = await kafkaCeiling();
    process.stderr.write(`Kafka ceiling: ${fmt(plain)} changes/s\n`);
    const run = await derivation(bus, {
      states: new RedisActorStates<DeviceActor>(redis, `${prefix}device`),
      log: new PostgresEventLog(logs),
      subscriptions: projectedSubscriptions(readStore),
      partitionsConcurrently: PARTITIONS,
    });
    return {
      profile: 'distributed',
      name: `Kafka (${PARTITIONS} partitions), actor states in Redis, event log in PostgreSQL`,
      ceilingName: 'plain kafkajs consumer loop',
      ceiling: plain,
      ...run,
    };
  } finally {
    await bus.close();
    redis.disconnect();
    await readStore.close();
    await logs.close();
    const client = new pg.Client({ connectionString: config.postgresUrl });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).finally(() => client.end());
  }
}

async function main() {
  const runs = [await embeddedRun(), await distributedRun()];
  const body = `## Webhook event derivation

\`node bench/derivation.ts ${CHANGES}\` on ${machine()}. A \`changes\` topic prefilled with
${fmt(CHANGES)} changes of ${fmt(DEVICES)} devices (each created, then reporting metadata) is consumed by one
stream processor in one process: device actors, every derived event written to the account's event
log, subscriptions matched. Embedded: the in-process bus with one partition (as \`hub start\` runs it),
actors and event log in memory. Distributed: ${PARTITIONS} partitions on one local Kafka ${kafkaVersion()} broker, actor states
in Redis and the event log in PostgreSQL. Each ceiling, measured in the same run, is a plain consumer of the same bus
reading the same topic and doing nothing.

Target: ≥ 20,000 events/s on a 2-core machine with a single broker.

| Profile | Run | Changes/s | Events derived | Seconds | Peak RSS MiB | Ceiling changes/s | Share of ceiling |
|---|---|---:|---:|---:|---:|---:|---:|
${runs
  .map(
    (r) =>
      `| ${r.profile} | ${r.name} | ${fmt(r.rate)} | ${fmt(r.derived)} | ${r.elapsed.toFixed(1)} | ${fmt(r.rss / 2 ** 20)} | ${fmt(r.ceiling)} (${r.ceilingName}) | ${fmt((100 * r.rate) / r.ceiling)} % |`,
  )
  .join('\n')}

Every change derives one event here, so changes/s is events/s.
`;
  writeSection('derivation', body);
  recordFigures(
    'derivation',
    runs.map((r) => ({
      benchmark: r.profile === 'embedded' ? 'webhook event derivation' : 'webhook event derivation on Kafka',
      profile: r.profile,
      value: r.rate,
      unit: 'changes/s',
      ceiling: r.ceiling,
      ceilingName: r.ceilingName,
      target: '≥ 20,000 events/s',
      met: r.rate >= 20_000,
    })),
  );
  console.log(body);
}

await main();
