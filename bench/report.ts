// Shared by the benchmarks: percentiles, the machine line, and writing one section of
// docs/benchmarks.md between markers, so each benchmark updates its own table only.

import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { webhookStream } from '../domain/subscriptions.ts';
// kafkajs as the hub runs it, for every bench's own clients (admins, taps, plain loops): its idle
// request-queue timer stopped (infra/bus/kafka.ts; unpatched, it printed TimeoutNegativeWarning).
import '../infra/bus/kafka.ts';
import { loadConfig } from '../infra/config.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import { seal } from '../infra/secrets.ts';
import { deleteTopics, dropSchema } from '../test/harness.ts';

// Every temporary directory of a bench run (its stores, the hubs it spawns) goes under one
// directory of the run, removed when the bench exits: os.tmpdir() reads TMPDIR at each call,
// and spawned processes inherit it. (A run's stores reach gigabytes; left behind, they add up.)
const scratch = mkdtempSync(join(tmpdir(), 'hub-bench-run-'));
process.env.TMPDIR = scratch;
process.on('exit', () => rmSync(scratch, { recursive: true, force: true }));
process.once('SIGINT', () => process.exit(130)); // interrupted, the directory goes too
process.once('SIGTERM', () => process.exit(143));

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** The middle one of `xs` by `by` (of an even count, the upper middle): the benches' medians of runs. */
export function medianBy<T>(xs: T[], by: (x: T) => number): T {
  return [...xs].sort((a, b) => by(a) - by(b))[xs.length >> 1]!;
}

export function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown CPU'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}, ${new Date().toISOString().slice(0, 10)}`;
}

/** The Kafka release that infra/local.sh runs: HUB_KAFKA_VERSION, else infra/kafka/pom.xml's kafka.version. */
export function kafkaVersion(): string {
  const pom = readFileSync(new URL('../infra/kafka/pom.xml', import.meta.url), 'utf8');
  return process.env.HUB_KAFKA_VERSION || (/<kafka\.version>([^<]+)</.exec(pom)?.[1] ?? 'unknown');
}

const DOC = new URL('../docs/benchmarks.md', import.meta.url);

/** HUB_BENCH_PRINT_ONLY=1: the benches' sections are printed only, the docs and figures left alone. */
const PRINT_ONLY = Boolean(process.env.HUB_BENCH_PRINT_ONLY);

export function writeSection(name: string, body: string): void {
  if (PRINT_ONLY) return;
  let doc: string;
  try {
    doc = readFileSync(DOC, 'utf8');
  } catch {
    doc =
      '# Benchmarks\n\nFigures measured by the scripts in `bench/`; each section is rewritten by its own script.\n';
  }
  const start = `<!-- bench:${name} -->`;
  const end = `<!-- /bench:${name} -->`;
  const section = `${start}\n${body.trim()}\n${end}`;
  const from = doc.indexOf(start);
  const to = doc.indexOf(end);
  doc =
    from >= 0 && to > from
      ? doc.slice(0, from) + section + doc.slice(to + end.length)
      : `${doc.trimEnd()}\n\n${section}\n`;
  writeFileSync(DOC, doc);
}

export const fmt = (n: number, digits = 0) =>
  n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

/**
 * Empties one of the benchmarks' Redis databases, before a run and after it: what a run leaves
 * (jobs and attempts kept for their retention) would otherwise weigh on the next runs, whose Redis
 * rewrites its append-only file with all of it (a rewrite stalled a loaded pipeline for seconds).
 * Before a run (`compact`), the append-only file is rewritten too, and the run waits for it: the
 * file keeps every write of the earlier runs, flushed or not, and its automatic rewrite (from
 * 1 GB, \`infra/local.sh\`) fell inside a measured minute, a stall of 1.5 s.
 */
export async function flushRedisDb(redisDb: number, o: { compact?: boolean } = {}): Promise<string> {
  const redisUrl = `${loadConfig().redisUrl.replace(/\/\d*$/, '')}/${redisDb}`;
  const redis = new Redis(redisUrl);
  await redis.flushdb();
  if (o.compact && /aof_enabled:1/.test(await redis.info('persistence'))) {
    await redis.bgrewriteaof().catch(() => undefined); // one already running will do
    const busy = /aof_rewrite_in_progress:1|aof_rewrite_scheduled:1/;
    while (busy.test(await redis.info('persistence'))) await new Promise((r) => setTimeout(r, 100));
  }
  redis.disconnect();
  return redisUrl;
}

/** A distributed hub of its own: a fresh PostgreSQL schema and Kafka prefix, and a Redis
 * database emptied for it (read models, checkpoints and schedules of earlier runs would mislead),
 * Redis's append-only file rewritten first. */
export async function isolatedDistributed(redisDb: number): Promise<Record<string, string>> {
  const config = loadConfig();
  const tag = `bench_${Date.now()}`;
  const redisUrl = await flushRedisDb(redisDb, { compact: true });
  return {
    HUB_PROFILE: 'distributed',
    HUB_POSTGRES_URL: `${config.postgresUrl}${config.postgresUrl.includes('?') ? '&' : '?'}schema=${tag}`,
    HUB_REDIS_URL: redisUrl,
    HUB_KAFKA_PREFIX: `${tag}-`,
  };
}

/** Gives back what isolatedDistributed(redisDb) took once its run is over: the Redis database
 * emptied, the schema dropped, the topics deleted. Left, they piled up run after run (a machine had
 * 3,483 partitions, 4 GB, and the broker slowed with them). */
export async function releaseDistributed(env: Record<string, string>, redisDb: number): Promise<void> {
  await flushRedisDb(redisDb);
  const { postgresUrl, kafkaBrokers } = loadConfig();
  const schema = /[?&]schema=(\w+)/.exec(env.HUB_POSTGRES_URL ?? '')?.[1];
  if (schema?.startsWith('bench_')) await dropSchema(postgresUrl, schema);
  const prefix = env.HUB_KAFKA_PREFIX;
  if (prefix?.startsWith('bench_')) await deleteTopics(kafkaBrokers, prefix);
}

const ROOT = new URL('..', import.meta.url).pathname;

/** The Node flags bin/hub (what `npm start` and the `hub` command run) starts a hub with under
 * the profile `env` names, read from its `case`: a bench's hub runs with them. A tree from before
 * bin/hub (`root`, a variant to compare with) had them on bin/hub.ts's first line. */
export function hubNodeFlags(env: Record<string, string | undefined>, root = ROOT): string[] {
  if (!existsSync(join(root, 'bin/hub')))
    return readFileSync(join(root, 'bin/hub.ts'), 'utf8')
      .split('\n', 1)[0]!
      .split(/\s+/)
      .filter((word) => word.startsWith('--'));
  const launcher = readFileSync(join(root, 'bin/hub'), 'utf8');
  const profile = env.HUB_PROFILE ?? process.env.HUB_PROFILE ?? 'embedded';
  const arm = (pattern: string) => new RegExp(`^\\s*${pattern}\\) flags="([^"]*)"`, 'm').exec(launcher)?.[1];
  const flags = (/^[a-z]+$/.test(profile) ? arm(profile) : undefined) ?? arm('\\*');
  if (flags === undefined) throw new Error(`bin/hub names no flags for ${profile}`);
  return flags.split(/\s+/).filter(Boolean);
}
/** `node <flags> bin/hub.ts <args>` as bin/hub runs it under `env`'s profile: this tree's, or another
 * tree's (`root`, a variant to compare with), with bin/hub's flags or Node flags of the caller's. */
export const hubArgs = (
  env: Record<string, string | undefined>,
  args: string[],
  o: { root?: string; nodeFlags?: string[] } = {},
) => [...(o.nodeFlags ?? hubNodeFlags(env, o.root)), join(o.root ?? ROOT, 'bin/hub.ts'), ...args];

/** A Node process (a hub, a receiver, a bare server) resolved once it prints "listening on <url>". */
export async function startListening(
  args: string[],
  env: Record<string, string>,
): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, args, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) => reject(new Error(`exited with ${code}`)));
  });
  return { child, url };
}

/** JSON over HTTP to a hub; `target` is a path on `url` or a whole URL. Throws on a non-2xx. */
export async function callHub(url: string, method: string, target: string, body?: unknown, token?: string) {
  const res = await fetch(new URL(target, url), {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${target}: ${res.status} ${text}`);
  // biome-ignore lint/suspicious/noExplicitAny: benchmarks read arbitrary JSON
  return (text ? JSON.parse(text) : undefined) as any;
}

/** A user registered, verified through the emailed link (read from the hub's mail folder) and
 * logged in, as people do: its token. */
export async function benchUser(url: string, dataDir: string): Promise<string> {
  const nick = `bench${Date.now()}`;
  const account = await callHub(url, 'POST', '/auth/accounts', {
    email: `${nick}@example.com`,
    nick,
    password: 'bench-password',
  });
  await callHub(url, 'POST', account['redirect-uri'], {});
  let link = '';
  for (let i = 0; i < 200 && !link; i++) {
    await new Promise((r) => setTimeout(r, 50));
    try {
      for (const f of readdirSync(join(dataDir, 'mail')).filter((name) => name.endsWith('.json'))) {
        const m = /(http\S+\/auth\/verify\?token=\S+)/.exec(
          JSON.parse(readFileSync(join(dataDir, 'mail', f), 'utf8')).text,
        );
        if (m) link = m[1]!;
      }
    } catch {}
  }
  await callHub(url, 'GET', link);
  return (await callHub(url, 'POST', '/auth/login', { username: nick, password: 'bench-password' })).token;
}

/** `count` devices of the user, each logged in with its own token. */
export async function benchDevices(
  url: string,
  token: string,
  count: number,
): Promise<{ id: string; token: string }[]> {
  const devices: { id: string; token: string }[] = [];
  for (let i = 0; i < count; i += 50) {
    devices.push(
      ...(await Promise.all(
        Array.from({ length: Math.min(50, count - i) }, async () => {
          const d = await callHub(url, 'POST', '/devices', {}, token);
          const login = await callHub(url, 'POST', '/auth/login', { username: d.prn, password: d.secret });
          return { id: d.id as string, token: login.token as string };
        }),
      )),
    );
  }
  return devices;
}

/** A subscription appended straight to the store (dispatcher benchmarks run without an API):
 * its id. Its secret is sealed with `sealKey`, which the benchmark's dispatcher is given. */
export async function benchSubscription(
  store: EventStore,
  o: { owner: string; url: string; eventType: string; sealKey: Buffer },
): Promise<string> {
  const id = randomBytes(12).toString('hex');
  await store.append(webhookStream(id), [
    {
      id: randomUUID(),
      type: 'WebhookCreated',
      data: {
        webhook_id: id,
        owner_prn: o.owner,
        nick: 'bench',
        url: o.url,
        description: '',
        event_types: [o.eventType],
        enabled: true,
        devices: [],
        user_meta_keys: [],
        device_meta_keys: [],
        custom_headers: {},
        retry_policy: null,
        secret_sealed: seal(o.sealKey, 'whsec_bench'),
      },
    },
  ]);
  return id;
}

/** One figure of a benchmark beside its ceiling, for the summary table of `npm run bench`. */
export interface Figure {
  benchmark: string;
  profile: 'embedded' | 'distributed';
  value: number;
  unit: string;
  ceiling: number;
  ceilingName: string;
  /** The target, as text, and whether this run met it (none for figures without one). */
  target?: string;
  met?: boolean;
}

const FIGURES_DIR = new URL('../.hub/bench/', import.meta.url);

/** Kept beside the section: bench/summary.ts puts every benchmark's figures in one table. */
export function recordFigures(name: string, figures: Figure[]): void {
  if (PRINT_ONLY) return;
  mkdirSync(FIGURES_DIR, { recursive: true });
  writeFileSync(
    new URL(`${name}.json`, FIGURES_DIR),
    JSON.stringify({ machine: machine(), figures }, null, 1),
  );
}

export function readFigures(): { name: string; machine: string; figures: Figure[] }[] {
  let files: string[] = [];
  try {
    files = readdirSync(FIGURES_DIR).filter((f) => f.endsWith('.json'));
  } catch {}
  return files.sort().map((f) => ({
    name: f.replace(/\.json$/, ''),
    ...JSON.parse(readFileSync(new URL(f, FIGURES_DIR), 'utf8')),
  }));
}

// ---- CPU from /proc ---------------------------------------------------------------------------

const TICK_MS = 10; // USER_HZ 100

/** utime + stime of a process or thread, ms; 0 once it is gone. With `reaped`, also its children's
 * that ended (cutime + cstime): a PostgreSQL backend's time moves to its postmaster's when it exits. */
export function cpuMs(statPath: string, reaped = false): number {
  try {
    const stat = readFileSync(statPath, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const own = Number(fields[11]) + Number(fields[12]);
    return (reaped ? own + Number(fields[13]) + Number(fields[14]) : own) * TICK_MS;
  } catch {
    return 0;
  }
}

/** The process listening on a local TCP port (from /proc/net/tcp and the processes' sockets). */
export function listening(port: number): number | undefined {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text = '';
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === '0A' && Number.parseInt(f[1]!.split(':')[1]!, 16) === port) inodes.add(f[9]!);
    }
  }
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${entry}/fd/${fd}`));
        if (m && inodes.has(m[1]!)) return Number(entry);
      } catch {}
    }
  }
  return undefined;
}

/** The shared infrastructure's processes: the Kafka broker and Redis of the hub's URLs, and
 * PostgreSQL's postmaster. */
export function infraPids(config = loadConfig()): Map<string, number | undefined> {
  const port = (hostPort: string) => Number(hostPort.split(':').pop());
  return new Map([
    ['Kafka', listening(port(config.kafkaBrokers[0]!))],
    ['Redis', listening(Number(new URL(config.redisUrl).port || 6379))],
    ['PostgreSQL', listening(Number(new URL(config.postgresUrl).port || 5432))],
  ]);
}

/** CPU ms of a server so far: PostgreSQL's is its postmaster's, the backends that ended (reaped
 * into the postmaster's children's time) and those alive now (backends come and go in a window:
 * those counted at its start alone made the figure negative). */
export function serverMs(name: string, pid: number | undefined): number {
  if (!pid) return 0;
  if (name !== 'PostgreSQL') return cpuMs(`/proc/${pid}/stat`);
  let ms = cpuMs(`/proc/${pid}/stat`, true);
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid)
        ms += cpuMs(`/proc/${entry}/stat`);
    } catch {}
  }
  return ms;
}
