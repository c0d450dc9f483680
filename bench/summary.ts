// The last step of `npm run bench`: one table of every benchmark's figures beside the ceiling each
// measured in its own run, with the ratio and the target, and redis-benchmark (Debian's
// redis-tools) as the ceiling of the Redis-bound replay, measured now on the same Redis.
//
//   node bench/summary.ts      (after the other benchmarks; reads .hub/bench/*.json)
import { spawnSync } from 'node:child_process';
import { loadConfig } from '../infra/config.ts';
import { type Figure, fmt, machine, readFigures, writeSection } from './report.ts';

/** SET requests/s from redis-benchmark: 50 clients, pipelines of 16 (the replay's batches pipeline too). */
function redisBenchmark(): number | undefined {
  const url = new URL(loadConfig().redisUrl);
  const run = spawnSync(
    'redis-benchmark',
    ['-h', url.hostname, '-p', url.port || '6379', '-q', '-t', 'set', '-n', '300000', '-c', '50', '-P', '16'],
    // redis-benchmark retries a server that is down without end: bounded here.
    { encoding: 'utf8', timeout: 60_000 },
  );
  const m = /SET: ([\d.]+) requests per second/.exec(`${run.stdout}`);
  if (!m)
    process.stderr.write(
      `redis-benchmark did not run: ${run.error?.message ?? (run.stderr || 'no answer from Redis (npm run infra:up)')}\n`,
    );
  return m ? Number(m[1]) : undefined;
}

const isLatency = (f: Figure) => f.unit === 'ms';
const ratio = (f: Figure) =>
  !Number.isFinite(f.ceiling) || f.ceiling === 0
    ? '–'
    : isLatency(f)
      ? `${fmt(f.value / f.ceiling, 1)} × the ceiling`
      : `${fmt((100 * f.value) / f.ceiling)} %`;

const runs = readFigures();
const figures = runs.flatMap((r) => r.figures);
const redisSet = redisBenchmark();
const replay = figures.find((f) => f.benchmark === 'projection replay PostgreSQL → Redis');
if (replay && redisSet)
  figures.push({
    benchmark: 'projection replay: Redis writes (3 per event)',
    profile: 'distributed',
    value: replay.value * 3,
    unit: 'writes/s',
    ceiling: redisSet,
    ceilingName: 'redis-benchmark SET, 50 clients, pipeline 16',
  });

const rows = figures.map(
  (f) =>
    `| ${f.benchmark} | ${f.profile} | ${fmt(f.value, isLatency(f) ? 1 : 0)} ${f.unit} | ${fmt(f.ceiling, isLatency(f) ? 1 : 0)} (${f.ceilingName}) | ${ratio(f)} | ${f.target ?? ''} | ${f.met === undefined ? '' : f.met ? '✓' : '✗'} |`,
);
const body = `## Summary

\`npm run bench\` on ${machine()}: every benchmark below, each beside the ceiling measured in the
same run (its section says how), and redis-benchmark on the same Redis. Throughputs are shares of
their ceiling; latencies are multiples of the ceiling's.

| Benchmark | Profile | Figure | Ceiling | Ratio | Target | Met |
|---|---|---:|---:|---:|---|:---:|
${rows.join('\n')}
`;
writeSection('summary', body);
console.log(body);
