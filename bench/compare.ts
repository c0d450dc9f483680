// Embedded dispatch, two versions of the code side by side: each tree's dispatcher (handed-off jobs,
// the SQLite store on its own thread, as bench/dispatch.ts runs it) in this one process, the two
// taking turns on chunks of jobs, each round between two plain loops to the same receiver. The
// machine's speed drifts by ±25 % from minute to minute here, more than most changes move the
// rate, so runs made minutes apart cannot tell two versions apart; turns of a few seconds can. The
// figure to read is B against A, round by round: this loop's share is higher than the bench's
// (a shorter loop, run cold), so only bench/dispatch.ts gives the share against the target. The
// same code against itself gave 0.85–1.13 by round and 1.04 at the median of four, with these
// defaults (2026-11-25; shorter chunks vary more): a change must move the median of six rounds by
// more than about 5 % to show.
//
//   git worktree add /tmp/base <rev>
//   node bench/compare.ts /tmp/base .        (A = the first tree, B = the second)
//   HUB_COMPARE_ROUNDS=6 HUB_COMPARE_CHUNK=15000
//
// Prints only: docs/benchmarks.md is bench/dispatch.ts's.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Registry } from 'prom-client';
import { attemptsMade, benchDispatcher, benchJob, ceiling, RECEIVER } from './dispatch.ts';
import { benchSubscription, fmt, startListening } from './report.ts';

const ROUNDS = Number(process.env.HUB_COMPARE_ROUNDS ?? 6);
const CHUNK = Number(process.env.HUB_COMPARE_CHUNK ?? 15_000);
/** Delivered by each version before the first round and left out: its code warms up. */
const WARMUP = 10_000;
const HERE = new URL('..', import.meta.url).pathname;

interface Turn {
  rate: number;
  /** µs of CPU per delivery: the process's, and the main thread's. */
  cpu: number;
  main: number;
}

/** A tree's embedded dispatcher, ready for turns of `count` jobs. Its modules are the tree's own. */
async function version(root: string, receiver: string): Promise<(count: number) => Promise<Turn>> {
  // A worktree has no node_modules of its own: it resolves this one's.
  if (!existsSync(join(root, 'node_modules')))
    symlinkSync(join(HERE, 'node_modules'), join(root, 'node_modules'));
  const load = (path: string) => import(join(root, path));
  // The first of `paths` the tree has: a tree from before processors/delivery/ keeps its modules
  // where they were.
  const loadFirst = (...paths: string[]) => load(paths.find((p) => existsSync(join(root, p))) ?? paths[0]!);
  const [{ MemoryBus }, { loadConfig }, { openEventStore }, { createLogger }] = await Promise.all([
    load('infra/bus/memory.ts'),
    load('infra/config.ts'),
    load('infra/eventstore/open.ts'),
    load('infra/telemetry.ts'),
  ]);
  const [{ ThreadedDeliveryStore }, { Dispatcher }, { Egress }, { SchemaRegistry }] = await Promise.all([
    loadFirst('processors/delivery/threaded.ts', 'processors/deliveries.ts'),
    loadFirst('processors/delivery/dispatcher.ts', 'processors/dispatcher.ts'),
    loadFirst('processors/delivery/egress.ts', 'processors/egress.ts'),
    load('schemas/registry.ts'),
  ]);
  const dir = mkdtempSync(join(tmpdir(), 'hub-compare-'));
  const store = await openEventStore(loadConfig({ HUB_DATA_DIR: dir }));
  const sealKey = randomBytes(32);
  const owner = `prn:::accounts:/bench-${randomBytes(3).toString('hex')}`;
  const subs: string[] = [];
  for (let i = 0; i < 10; i++)
    subs.push(
      await benchSubscription(store, {
        owner,
        url: `${receiver}/ok`,
        eventType: 'device.device_meta.updated',
        sealKey,
      }),
    );
  const logger = createLogger('warn');
  const bus = new MemoryBus({ logger });
  await bus.ensureTopics([{ topic: 'deliveries', partitions: 12 }]);
  const metrics = new Registry();
  const dispatcher = benchDispatcher(
    { Dispatcher, Egress },
    {
      bus,
      registry: SchemaRegistry.load(),
      deliveries: new ThreadedDeliveryStore(join(dir, 'deliveries.sqlite'), { retentionMs: 86_400_000 }),
      store,
      sealKey,
      logger,
      metrics,
    },
  );
  await dispatcher.start();
  const attempts = () => attemptsMade(metrics);
  let made = 0;
  // A turn: the jobs made first (not timed), then handed off in batches as the bench does, timed
  // until every one is delivered and durable.
  return async (count) => {
    const jobs = Array.from({ length: count }, () => benchJob(made++, subs, owner));
    const before = await attempts();
    const started = performance.now();
    const cpu = process.cpuUsage();
    const main = process.threadCpuUsage();
    const durables: Promise<void>[] = [];
    for (let i = 0; i < count; i += 1000)
      durables.push((await dispatcher.handOff(jobs.slice(i, i + 1000))).durable);
    while ((await attempts()) - before < count) await new Promise((r) => setTimeout(r, 10));
    await Promise.all(durables);
    const seconds = (performance.now() - started) / 1000;
    const perJob = (u: { user: number; system: number }) => (u.user + u.system) / count;
    return {
      rate: count / seconds,
      cpu: perJob(process.cpuUsage(cpu)),
      main: perJob(process.threadCpuUsage(main)),
    };
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main() {
  const [a, b] = process.argv.slice(2).map((p) => resolve(p));
  if (!a || !b) throw new Error('usage: node bench/compare.ts <tree A> <tree B>');
  const rx = await startListening(['-e', RECEIVER], {});
  try {
    const turns = { A: await version(a, rx.url), B: await version(b, rx.url) };
    await turns.A(WARMUP);
    await turns.B(WARMUP);
    const ratios: number[] = [];
    const shares: Record<'A' | 'B', number[]> = { A: [], B: [] };
    let loopBefore = await ceiling(rx.url, 5000, CHUNK);
    for (let round = 0; round < ROUNDS; round++) {
      // Each goes first in every other round: neither always follows the loop.
      const order = round % 2 === 0 ? (['A', 'B'] as const) : (['B', 'A'] as const);
      const got = {} as Record<'A' | 'B', Turn>;
      for (const v of order) got[v] = await turns[v](CHUNK);
      const loopAfter = await ceiling(rx.url, 5000, CHUNK);
      const loop = (loopBefore + loopAfter) / 2;
      loopBefore = loopAfter;
      ratios.push(got.B.rate / got.A.rate);
      for (const v of ['A', 'B'] as const) shares[v].push(got[v].rate / loop);
      const show = (v: 'A' | 'B') =>
        `${v} ${fmt(got[v].rate)}/s (${fmt((100 * got[v].rate) / loop)} %, ${fmt(got[v].cpu, 1)} µs CPU, ${fmt(got[v].main, 1)} main)`;
      console.log(
        `round ${round + 1}: loop ${fmt(loop)}/s; ${show('A')}; ${show('B')}; B/A ${fmt(ratios.at(-1)!, 3)}`,
      );
    }
    console.log(
      `median of ${ROUNDS} rounds: B/A ${fmt(median(ratios), 3)} (rounds ${fmt(Math.min(...ratios), 3)}–${fmt(Math.max(...ratios), 3)}); share of this loop A ${fmt(100 * median(shares.A))} %, B ${fmt(100 * median(shares.B))} %`,
    );
  } finally {
    rx.child.kill();
  }
  process.exit(0); // the dispatchers' threads and timers: nothing left to wait for
}

await main();
