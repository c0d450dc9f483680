// Endpoint health: a healthy subscription's delivery latency alone, and beside a failing one that
// gets as many jobs (its receiver answers 500 after a second: slow to fail). With the
// circuit, the failing subscription holds one probe at a time and its jobs wait in the schedule,
// so the healthy one's p99 should stay within its solo figure. The embedded dispatcher as a hub
// runs it (the SQLite store on its thread, jobs handed off), a local receiver timing arrivals.
//
//   node bench/health.ts [jobs/s per subscription] [seconds]

import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { MemoryBus } from '../infra/bus/memory.ts';
import { TOPICS } from '../infra/bus/port.ts';
import { SqliteEventStore } from '../infra/eventstore/sqlite.ts';
import { createLogger } from '../infra/telemetry.ts';
import { Dispatcher } from '../processors/delivery/dispatcher.ts';
import { Egress } from '../processors/delivery/egress.ts';
import { ThreadedDeliveryStore } from '../processors/delivery/threaded.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { benchDispatcher, benchJob } from './dispatch.ts';
import { benchSubscription, fmt, machine, medianBy, percentile, writeSection } from './report.ts';

const RATE = Number(process.argv[2] ?? 200);
const SECONDS = Number(process.argv[3] ?? 20);
/** Arrivals in the first seconds are not counted: connections open, the circuit opens. */
const WARMUP_MS = 5000;
/** How long the failing receiver takes to answer 500. */
const FAIL_AFTER_MS = 1000;
const RUNS = 3;
const OWNER = 'prn:::accounts:/bench-health';
const logger = createLogger('warn');

interface Run {
  p50: number;
  p99: number;
  sent: number;
  delivered: number;
  /** After the warm-up: the failing subscription's attempts, and the most at once. */
  failingAttempts: number;
  failingMaxInFlight: number;
}

async function run(beside: boolean): Promise<Run> {
  const sent = new Map<string, number>();
  const latencies: number[] = [];
  let failingAttempts = 0;
  let failingInFlight = 0;
  let failingMaxInFlight = 0;
  let measureFrom = Number.POSITIVE_INFINITY;
  let measureFromPerf = Number.POSITIVE_INFINITY;
  let sentMeasured = 0;
  const server = createServer((req, res) => {
    if (req.url === '/down') {
      failingInFlight++;
      if (Date.now() >= measureFrom) {
        failingAttempts++;
        failingMaxInFlight = Math.max(failingMaxInFlight, failingInFlight);
      }
      req.resume();
      setTimeout(() => {
        failingInFlight--;
        res.writeHead(500).end('down');
      }, FAIL_AFTER_MS);
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const now = performance.now();
      const at = sent.get(JSON.parse(Buffer.concat(chunks).toString()).id);
      if (at !== undefined && at >= measureFromPerf) latencies.push(now - at);
      res.end('ok');
    });
  }).listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), 'hub-bench-health-'));
  const store = new SqliteEventStore(join(dir, 'events.sqlite'));
  const deliveries = new ThreadedDeliveryStore(join(dir, 'deliveries.sqlite'), { retentionMs: 86_400_000 });
  const sealKey = randomBytes(32);
  const subscribe = (path: string) =>
    benchSubscription(store, {
      owner: OWNER,
      url: `${base}${path}`,
      eventType: 'device.device_meta.updated',
      sealKey,
    });
  const healthy = await subscribe('/ok');
  const failing = beside ? await subscribe('/down') : undefined;
  const bus = new MemoryBus({ logger });
  await bus.ensureTopics([{ topic: TOPICS.deliveries, partitions: 1 }]);
  const dispatcher = benchDispatcher(
    { Dispatcher, Egress },
    { bus, registry: SchemaRegistry.load(), deliveries, store, sealKey, logger, metrics: new Registry() },
  );
  await dispatcher.start();
  const started = Date.now();
  measureFrom = started + WARMUP_MS;
  measureFromPerf = performance.now() + WARMUP_MS;
  // Every 10 ms, a hundredth of a second's jobs for each subscription, handed off as the
  // embedded processor hands them.
  const perTick = RATE / 100;
  let due = 0;
  let i = 0;
  while (Date.now() - started < SECONDS * 1000) {
    due += perTick;
    const jobs = [];
    for (; due >= 1; due--) {
      const job = benchJob(i++, [healthy], OWNER);
      sent.set(job.event.id, performance.now());
      if (Date.now() >= measureFrom) sentMeasured++;
      jobs.push(job);
      if (failing) jobs.push(benchJob(i++, [failing], OWNER));
    }
    if (jobs.length > 0) await dispatcher.handOff(jobs);
    await new Promise((r) => setTimeout(r, 10));
  }
  await new Promise((r) => setTimeout(r, 1000)); // the last ones arrive
  await dispatcher.stop();
  await deliveries.close();
  await store.close();
  server.closeAllConnections();
  server.close();
  const sorted = latencies.sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    sent: sentMeasured,
    delivered: sorted.length,
    failingAttempts,
    failingMaxInFlight,
  };
}

async function main() {
  const solo: Run[] = [];
  const beside: Run[] = [];
  // Alternated, so that a machine busy for a while weighs on both alike.
  for (let r = 0; r < RUNS; r++) {
    solo.push(await run(false));
    beside.push(await run(true));
  }
  const row = (name: string, runs: Run[]) => {
    const m = medianBy(runs, (x) => x.p99);
    return `| ${name} | ${fmt(m.delivered)} of ${fmt(m.sent)} | ${fmt(m.p50, 1)} | ${fmt(m.p99, 1)} | ${runs.map((x) => fmt(x.p99, 1)).join(', ')} | ${m.failingAttempts ? `${fmt(m.failingAttempts)}, at most ${m.failingMaxInFlight} at a time` : '–'} |`;
  };
  const soloP99 = medianBy(solo, (x) => x.p99).p99;
  const besideP99 = medianBy(beside, (x) => x.p99).p99;
  const body = `## Endpoint health: a failing subscription beside a healthy one

\`node bench/health.ts ${RATE} ${SECONDS}\` on ${machine()}. The embedded dispatcher (the SQLite
store on its thread, HTTP as \`HUB_DISPATCHER_HTTP_THREADS\` says, 10 s attempt timeout, 32 attempts in
flight per subscription) is handed ${fmt(RATE)} jobs/s of a healthy subscription for ${SECONDS} s, alone, then
beside a failing subscription handed as many, whose receiver answers 500 after ${FAIL_AFTER_MS / 1000} s (its circuit
opens within the first seconds). Latency is from the hand-off to the healthy receiver's arrival,
for the jobs handed off after the first ${WARMUP_MS / 1000} s; the failing subscription's attempts are counted
from then too. ${RUNS} runs of each, alternated, the median run by p99 shown.

Target: the healthy subscription's p99 beside the failing one is within its solo figure
([webhooks.md](webhooks.md#endpoint-health)).

| Run | Healthy deliveries | p50 ms | p99 ms | p99 of each run | Failing attempts |
|---|---:|---:|---:|---|---|
${row('healthy alone', solo)}
${row('beside a failing subscription', beside)}

Beside the failing one, the healthy p99 was ${fmt(besideP99, 1)} ms against ${fmt(soloP99, 1)} ms alone (${besideP99 <= soloP99 ? 'within' : `${fmt(besideP99 - soloP99, 1)} ms over`} its solo figure).
`;
  writeSection('health', body);
  console.log(body);
}

await main();
