// The retry schedule under load: 100,000 jobs pending (due in an hour) and a few probes due in
// 2–4 s; how late each probe reaches a receiver, and how much CPU the dispatcher burns while it
// waits (no busy polling). On both schedule stores: SQLite (embedded) and Redis (distributed).
//
//   node bench/schedule.ts [pending]     (the Redis run needs `npm run infra:up`)

import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Registry } from 'prom-client';
import { MemoryBus } from '../infra/bus/memory.ts';
import { TOPICS } from '../infra/bus/port.ts';
import { loadConfig } from '../infra/config.ts';
import { SqliteEventStore } from '../infra/eventstore/sqlite.ts';
import { createLogger } from '../infra/telemetry.ts';
import { Dispatcher } from '../processors/delivery/dispatcher.ts';
import { Egress } from '../processors/delivery/egress.ts';
import type { DeliveryStore, Job } from '../processors/delivery/port.ts';
import { RedisDeliveryStore } from '../processors/delivery/redis.ts';
import { SqliteDeliveryStore } from '../processors/delivery/sqlite.ts';
import { API_VERSION } from '../processors/stream/derive.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { benchSubscription, fmt, machine, writeSection } from './report.ts';

const PENDING = Number(process.argv[2] ?? 100_000);
const PROBES = 20;
const logger = createLogger('warn');

async function run(name: string, deliveries: DeliveryStore) {
  const arrivals = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      arrivals.set(JSON.parse(Buffer.concat(chunks).toString()).id, Date.now());
      res.end('ok');
    });
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  const store = new SqliteEventStore(join(mkdtempSync(join(tmpdir(), 'hub-bench-')), 'events.sqlite'));
  const sealKey = randomBytes(32);
  const sub = await benchSubscription(store, {
    owner: 'prn:::accounts:/bench',
    url,
    eventType: 'device.created',
    sealKey,
  });
  const job = (): Job => ({
    job_id: `job_${randomBytes(16).toString('hex')}`,
    subscription_id: sub,
    owner: 'prn:::accounts:/bench',
    kind: 'event',
    event: {
      id: `evt_${randomBytes(16).toString('hex')}`,
      type: 'device.created',
      api_version: API_VERSION,
      created: Math.floor(Date.now() / 1000),
      owner: 'prn:::accounts:/bench',
      resource_prn: '',
      livemode: true,
      data: {},
      source_position: 0,
      sequence: 0,
      created_ms: Date.now(),
    },
    attempt: 1,
    enqueued: Date.now(),
  });
  const later = Date.now() + 3_600_000;
  for (let i = 0; i < PENDING; i += 5000) {
    const jobs = Array.from({ length: Math.min(5000, PENDING - i) }, job);
    await deliveries.enqueue(jobs);
    await Promise.all(jobs.map((j) => deliveries.finish(j, null, later)));
  }
  const probes = Array.from({ length: PROBES }, job);
  await deliveries.enqueue(probes);
  const base = Date.now() + 2000;
  const due = new Map(probes.map((p, i) => [p.event.id, base + (i * 2000) / PROBES]));
  await Promise.all(probes.map((p) => deliveries.finish(p, null, due.get(p.event.id)!)));
  const bus = new MemoryBus({ logger });
  await bus.ensureTopics([{ topic: TOPICS.deliveries, partitions: 1 }]);
  const dispatcher = new Dispatcher({
    bus,
    registry: SchemaRegistry.load(),
    deliveries,
    store,
    sealKey,
    egress: new Egress({ allowHttp: true, allowNetworks: ['127.0.0.0/8'] }),
    logger,
    metrics: new Registry(),
    version: 'bench',
    timeoutMs: 10_000,
    maxInFlight: 1024,
    maxInFlightPerSubscription: 32,
    rotationWindowMs: 0,
    httpThreads: loadConfig().dispatcherHttpThreads, // as a hub reads it
    disableAfterMs: loadConfig().webhookDisableAfterS * 1000,
  });
  await dispatcher.start();
  const cpu = process.cpuUsage();
  const started = performance.now();
  while (arrivals.size < PROBES && performance.now() - started < 15_000)
    await new Promise((r) => setTimeout(r, 50));
  const used = process.cpuUsage(cpu);
  const wall = performance.now() - started;
  await dispatcher.stop();
  server.close();
  await store.close();
  const late = [...due]
    .map(([id, at]) => (arrivals.get(id) ?? Number.POSITIVE_INFINITY) - at)
    .sort((a, b) => a - b);
  return {
    name,
    delivered: arrivals.size,
    p50: late[Math.floor(late.length / 2)]!,
    max: late[late.length - 1]!,
    cpu: (100 * (used.user + used.system)) / 1000 / wall,
  };
}

async function main() {
  const rows = [];
  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-'));
  const sqlite = new SqliteDeliveryStore(join(dir, 'deliveries.sqlite'), { retentionMs: 86_400_000 });
  rows.push(await run('embedded (SQLite schedule)', sqlite));
  await sqlite.close();
  const config = loadConfig();
  const redis = new Redis(`${config.redisUrl.replace(/\/\d*$/, '')}/6`);
  await redis.flushdb();
  rows.push(
    await run('distributed (Redis schedule)', new RedisDeliveryStore(redis, { retentionMs: 86_400_000 })),
  );
  redis.disconnect();
  const body = `## Retry schedule

\`node bench/schedule.ts ${PENDING}\` on ${machine()}. ${fmt(PENDING)} jobs pending in the schedule (due in an
hour) and ${PROBES} probes due 2–4 s after the dispatcher starts; a local receiver notes when each probe
arrives. Lateness is arrival minus due time. CPU is the dispatcher process's share of one core
while it waits for the probes (no busy polling).

Target: every retry fires within one second of its due time with 100,000 pending.

| Schedule | Probes delivered | Lateness p50 ms | Lateness max ms | CPU while waiting |
|---|---:|---:|---:|---:|
${rows.map((r) => `| ${r.name} | ${r.delivered} of ${PROBES} | ${fmt(r.p50)} | ${fmt(r.max)} | ${fmt(r.cpu, 1)} % |`).join('\n')}
`;
  writeSection('schedule', body);
  console.log(body);
}

await main();
