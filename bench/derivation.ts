// Derivation throughput of the stream processor on Kafka: a `changes` topic prefilled with the
// changes of 10,000 devices (each created, then reporting metadata), consumed by one processor
// (actors with their state in Redis, every derived event logged in Redis, subscriptions matched),
// beside the ceiling measured in the same run: a plain kafkajs consumer loop reading the same
// topic and doing nothing else.
//
//   node bench/derivation.ts [changes]      (needs `npm run infra:up`)
//   HUB_BENCH_PRINT_ONLY=1                  printed, docs untouched
import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import { Registry } from 'prom-client';
import { KafkaBus } from '../infra/bus/kafka.ts';
import { SCHEMA_HEADER, TOPICS } from '../infra/bus/port.ts';
import { loadConfig } from '../infra/config.ts';
import { RedisReadStore } from '../infra/readstore/redis.ts';
import { createLogger } from '../infra/telemetry.ts';
import { RedisActorStates } from '../processors/actors.ts';
import type { DeviceActor } from '../processors/derive.ts';
import { RedisEventLog } from '../processors/eventlog.ts';
import { ProcessorMetrics, projectedSubscriptions, StreamProcessor } from '../processors/processor.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { fmt, machine, recordFigures, writeSection } from './report.ts';

const CHANGES = Number(process.argv[2] ?? 400_000);
const DEVICES = 10_000;
const PARTITIONS = 12;
const config = loadConfig();
const logger = createLogger('warn');
const prefix = `bench-${Date.now()}-`;
const registry = SchemaRegistry.load();

async function prefill(bus: KafkaBus): Promise<void> {
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

/** A plain kafkajs consumer reading the topic, nothing else: the ceiling. */
async function ceiling(): Promise<number> {
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

async function derivation(bus: KafkaBus, redis: Redis, readStore: RedisReadStore) {
  const metrics = new ProcessorMetrics(new Registry());
  const processor = new StreamProcessor({
    bus,
    registry,
    states: new RedisActorStates<DeviceActor>(redis, `${prefix}device`),
    log: new RedisEventLog({ redis, retentionMs: 86_400_000 }),
    subscriptions: projectedSubscriptions(readStore),
    logger,
    metrics,
    concurrency: config.processorConcurrency,
    partitionsConcurrently: PARTITIONS,
    // No subscription matches here: there are no jobs to hand off.
    handOff: async () => {},
  });
  const rss: number[] = [];
  let first = 0;
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

async function main() {
  const bus = new KafkaBus({ brokers: config.kafkaBrokers, clientId: 'bench', logger, prefix });
  const redis = new Redis(config.redisUrl, { enableAutoPipelining: false });
  const readStore = new RedisReadStore(config.redisUrl);
  try {
    await bus.ensureTopics([
      { topic: TOPICS.changes, partitions: PARTITIONS },
      { topic: TOPICS.deliveries, partitions: PARTITIONS },
    ]);
    await prefill(bus);
    const plain = await ceiling();
    process.stderr.write(`ceiling: ${fmt(plain)} changes/s\n`);
    const run = await derivation(bus, redis, readStore);
    const body = `## Webhook event derivation (distributed profile)

\`node bench/derivation.ts ${CHANGES}\` on ${machine()}. A \`changes\` topic of ${PARTITIONS} partitions
on one local Kafka 3.9 broker, prefilled with ${fmt(CHANGES)} changes of ${fmt(DEVICES)} devices (each created, then
reporting metadata), is consumed by one stream processor in one process: device actors with their state
in Redis, every derived event written to the account's event log in Redis, subscriptions matched. The
ceiling, measured in the same run, is a plain kafkajs consumer reading the same topic and doing nothing.

Target: ≥ 20,000 events/s on a 2-core machine with a single broker.

| Run | Changes/s | Events derived | Share of ceiling |
|---|---:|---:|---:|
| stream processor (derive, log, match, save actor states) | ${fmt(run.rate)} | ${fmt(run.derived)} | ${fmt((100 * run.rate) / plain)} % |
| ceiling: plain kafkajs consumer loop | ${fmt(plain)} | | 100 % |

Every change derives one event here, so changes/s is events/s. ${fmt(CHANGES)} changes in ${run.elapsed.toFixed(1)} s;
peak resident memory of the processor's process ${fmt(run.rss / 2 ** 20)} MiB.
`;
    if (process.env.HUB_BENCH_PRINT_ONLY) console.log(body);
    else {
      writeSection('derivation', body);
      recordFigures('derivation', [
        {
          benchmark: 'webhook event derivation on Kafka',
          profile: 'distributed',
          value: run.rate,
          unit: 'changes/s',
          ceiling: plain,
          ceilingName: 'plain kafkajs consumer loop',
          target: '≥ 20,000 events/s',
          met: run.rate >= 20_000,
        },
      ]);
      console.log(body);
    }
  } finally {
    await bus.close();
    redis.disconnect();
    await readStore.close();
  }
}

await main();
