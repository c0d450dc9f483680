// The console's device list for a large account: one account with 10,000 devices, made through the
// API (POST /devices, each with a nick and both metadata maps: the real stored state, projected
// by the hub), then its first page as the console asks for it, GET /devices (newest first, the
// default page of 50), timed at the client on loopback, in both profiles. The hub sends no
// Server-Timing header, so the ceiling beside it is a bare node:http server in the same run that
// answers the same bytes (the hub's own first page, captured): what loopback, HTTP and the client
// cost without the hub. A deep page (skip 9,950) is measured too, to show the cost does not grow
// with the offset. GET /devices takes no search parameter (the spec shows none), so none is measured.
//
//   node bench/console.ts [devices]      (default 10,000)
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../infra/config.ts';
import {
  benchUser,
  callHub,
  type Figure,
  fmt,
  hubArgs,
  isolatedDistributed,
  machine,
  percentile,
  recordFigures,
  releaseDistributed,
  startListening,
  writeSection,
} from './report.ts';

const DEVICES = Number(process.argv[2] ?? 10_000);
/** Requests not counted first (the code warms up), then the measured ones, one after another. */
const WARMUP = 30;
const SAMPLES = 300;
/** Devices created at once: the API's throughput, not a latency, is what the seeding needs. */
const CREATE_CONCURRENCY = 32;
const TARGET_MS = 300;
const REDIS_DB = 8;
const AUTO_THREADS = loadConfig({}).apiThreads;

const log = (line: string) => process.stderr.write(`${line}\n`);

interface Timing {
  p50: number;
  p95: number;
  p99: number;
  bytes: number;
}

/** `SAMPLES` sequential GETs of `target` (after `WARMUP`), each timed from the call to the last byte. */
async function timeGets(url: string, target: string, token?: string): Promise<Timing> {
  const headers = token ? { authorization: `Bearer ${token}` } : undefined;
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < WARMUP + SAMPLES; i++) {
    const started = performance.now();
    const res = await fetch(new URL(target, url), { headers });
    const body = await res.arrayBuffer();
    const ms = performance.now() - started;
    if (res.status !== 200) throw new Error(`GET ${target}: ${res.status} ${Buffer.from(body).toString()}`);
    bytes = body.byteLength;
    if (i >= WARMUP) times.push(ms);
  }
  times.sort((a, b) => a - b);
  return { p50: percentile(times, 50), p95: percentile(times, 95), p99: percentile(times, 99), bytes };
}

async function ready(url: string): Promise<void> {
  for (;;) {
    const res = await fetch(new URL('/readyz', url)).catch(() => undefined);
    await res?.text();
    if (res?.status === 200) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
}

/** The account's devices, each as a console user's would be: a nick, a name, a room, firmware. */
async function createDevices(url: string, token: string): Promise<number> {
  const started = performance.now();
  let next = 0;
  let said = started;
  await Promise.all(
    Array.from({ length: CREATE_CONCURRENCY }, async () => {
      for (let i = next++; i < DEVICES; i = next++) {
        await callHub(
          url,
          'POST',
          '/devices',
          {
            nick: `sensor-${String(i).padStart(5, '0')}`,
            'user-meta': { name: `Sensor ${i}`, room: `room-${i % 40}` },
            'device-meta': { fw: '4.2.1', temp: String(18 + (i % 7)) },
          },
          token,
        );
        if (performance.now() - said > 10_000) {
          said = performance.now();
          log(`  ${fmt(next)} of ${fmt(DEVICES)} devices created`);
        }
      }
    }),
  );
  return (performance.now() - started) / 1000;
}

interface ProfileRun {
  profile: 'embedded' | 'distributed';
  label: string;
  createSeconds: number;
  first: Timing;
  deep: Timing;
  /** The hub's first page, for the bare server to answer. */
  page: string;
}

async function hubRun(
  profile: ProfileRun['profile'],
  label: string,
  extra: Record<string, string>,
): Promise<ProfileRun> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-bench-console-'));
  const { child, url } = await startListening(hubArgs(extra, ['start']), {
    HUB_PORT: '0',
    HUB_LOG_LEVEL: 'warn',
    HUB_DATA_DIR: dataDir,
    // All of it comes from one address and one account: the rate limits would measure themselves.
    HUB_RATE_LIMIT_PER_SECOND: '0',
    HUB_LOGIN_LIMIT_PER_MINUTE: '1000000',
    ...extra,
  });
  try {
    await ready(url);
    const token = await benchUser(url, dataDir);
    log(`${label}: creating ${fmt(DEVICES)} devices`);
    const createSeconds = await createDevices(url, token);
    // Listed once the projection has them all (the read waits for the caller's writes anyway).
    for (;;) {
      const page = await callHub(url, 'GET', '/devices?limit=1', undefined, token);
      if (page.total === DEVICES) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    log(`${label}: ${fmt(DEVICES)} devices in ${fmt(createSeconds, 1)} s; timing the first page`);
    const first = await timeGets(url, '/devices', token);
    const deep = await timeGets(url, `/devices?skip=${DEVICES - 50}`, token);
    const page = JSON.stringify(await callHub(url, 'GET', '/devices', undefined, token));
    return { profile, label, createSeconds, first, deep, page };
  } finally {
    await stop(child);
  }
}

/** A node:http server answering `body` as JSON to every request: the ceiling, with the same bytes. */
async function bareRun(body: string): Promise<Timing> {
  const code = `
    const http = require('node:http');
    const body = process.env.BARE_BODY;
    http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
        res.end(body);
      });
    }).listen(0, '127.0.0.1', function () { console.log('listening on http://127.0.0.1:' + this.address().port); });
  `;
  const { child, url } = await startListening(['-e', code], { BARE_BODY: body });
  try {
    return await timeGets(url, '/devices');
  } finally {
    await stop(child);
  }
}

async function main() {
  const runs: ProfileRun[] = [];
  runs.push(
    await hubRun(
      'embedded',
      `embedded, as it starts (\`HUB_API_THREADS=auto\`: ${AUTO_THREADS} API threads here)`,
      {},
    ),
  );
  let env: Record<string, string> | undefined;
  try {
    env = await isolatedDistributed(REDIS_DB);
    runs.push(
      await hubRun('distributed', 'distributed (PostgreSQL, Redis, Kafka), all roles in one process', env),
    );
  } catch (err) {
    log(`distributed run skipped: ${(err as Error).message} (npm run infra:up)`);
  } finally {
    if (env) await releaseDistributed(env, REDIS_DB);
  }
  const bare = await bareRun(runs[0]!.page);

  const ms = (n: number) => fmt(n, 1);
  const rows = runs.flatMap((r) => [
    `| ${r.label} | first page (\`GET /devices\`) | ${ms(r.first.p50)} | ${ms(r.first.p95)} | ${ms(r.first.p99)} | ${fmt(r.first.bytes)} |`,
    `| ${r.label} | a deep page (\`?skip=${fmt(DEVICES - 50)}\`) | ${ms(r.deep.p50)} | ${ms(r.deep.p95)} | ${ms(r.deep.p99)} | ${fmt(r.deep.bytes)} |`,
  ]);
  const met = runs.every((r) => r.first.p95 <= TARGET_MS);
  const verdict = runs
    .map((r) => `${r.profile} p95 ${ms(r.first.p95)} ms (${r.first.p95 <= TARGET_MS ? 'met' : 'not met'})`)
    .join(', ');
  const body = `## The console's device list: a ${fmt(DEVICES)}-device account

${machine()}. One account with ${fmt(DEVICES)} devices, each made through the API (\`POST /devices\`
with a nick, user-meta and device-meta; ${runs.map((r) => `${r.profile}: ${fmt(r.createSeconds, 1)} s, ${CREATE_CONCURRENCY} at a time`).join('; ')}),
then the page the console's device list opens on: \`GET /devices\` (newest first, the default
page of 50 with both metadata maps), ${fmt(SAMPLES)} requests one after another after ${WARMUP}
not counted, each timed at the client from the call to the last byte on loopback. The hub sends no
Server-Timing header: the ceiling is a bare node:http server in the same run answering the same
bytes (the hub's first page), what loopback, HTTP and the client cost without the hub; the hub's
own time is what it adds to that. \`GET /devices\` takes no search parameter (the spec shows none), so
the console's search is not measured here. \`bench/console.ts\`.

| Hub | Request | p50 ms | p95 ms | p99 ms | Bytes |
|---|---|---:|---:|---:|---:|
${rows.join('\n')}
| bare node:http server (ceiling), the same bytes | first page | ${ms(bare.p50)} | ${ms(bare.p95)} | ${ms(bare.p99)} | ${fmt(bare.bytes)} |

Target: a ${fmt(DEVICES)}-device account lists its first page in ≤ ${TARGET_MS} ms (server time).
${met ? 'Met' : 'Not met'} in this run, at the client's p95, which bounds the server's time from above: ${verdict}.
`;
  writeSection('console', body);
  recordFigures(
    'console',
    runs.map(
      (r): Figure => ({
        benchmark: `first page of a ${fmt(DEVICES)}-device account (p95)`,
        profile: r.profile,
        value: r.first.p95,
        unit: 'ms',
        ceiling: bare.p95,
        ceilingName: 'bare node:http server, the same bytes',
        target: `≤ ${TARGET_MS} ms`,
        met: r.first.p95 <= TARGET_MS,
      }),
    ),
  );
  console.log(body);
}

await main();
