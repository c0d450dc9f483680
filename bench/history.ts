// What a long history costs a hub: histories of N events over a fixed fleet (100,000 devices, one
// of them with up to 1M events of its own), in both profiles. For each size: the first start,
// which builds the derived state once; then restarts, measured from the spawn of `hub start`: the
// time to /readyz, the hub's RSS when ready and after a minute of device-meta load, the first
// PATCH and the first GET of the long device, and the disk each event takes. Beside them, a hub
// started on an empty data dir with the same settings: the RSS the targets compare with.
//
//   node bench/history.ts [events…] [--devices N] [--long N] [--load-seconds S] [--profiles embedded,distributed]
//   (default: 1,000,000 and 10,000,000 events, 100,000 devices, a 1,000,000-event device, 60 s)
//
// Seeding appends straight through the store adapter the hub appends through, behind
// SchemaCheckedStore: the events the API appends, schema-checked. The owner account and the long
// device are made through the API of a hub started on the empty store (the owner verified through
// its emailed link), so the bench logs in as they do; the other devices' secrets are sealed with
// the hub's key, and the devices of the load log in with them.
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { Redis } from 'ioredis';
import { exportPKCS8, generateKeyPair } from 'jose';
import pg from 'pg';
import { fromPem, jwtKeyFile } from '../api/auth/keys.ts';
import { accountStream } from '../domain/accounts.ts';
import { devicePrn, deviceStream } from '../domain/devices.ts';
import { loadConfig } from '../infra/config.ts';
import { timeOrderedId } from '../infra/eventstore/aggregate.ts';
import type { EventStore, NewEvent } from '../infra/eventstore/port.ts';
import { PostgresEventStore } from '../infra/eventstore/postgres.ts';
import { SchemaCheckedStore } from '../infra/eventstore/schema-checked.ts';
import { SqliteEventStore } from '../infra/eventstore/sqlite.ts';
import { seal } from '../infra/secrets.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import {
  benchDevices,
  benchUser,
  callHub,
  fmt,
  hubArgs,
  isolatedDistributed,
  machine,
  recordFigures,
  releaseDistributed,
  startListening,
  writeSection,
} from './report.ts';

const { values: flags, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    devices: { type: 'string', default: '100000' },
    long: { type: 'string', default: '1000000' },
    'load-seconds': { type: 'string', default: '60' },
    profiles: { type: 'string', default: 'embedded,distributed' },
  },
});
const SIZES = (positionals.length > 0 ? positionals : ['1000000', '10000000']).map(Number);
const DEVICES = Number(flags.devices);
const LONG = Number(flags.long);
const LOAD_SECONDS = Number(flags['load-seconds']);
const PROFILES = flags.profiles.split(',') as Profile[];
/** The devices that PATCH device-meta during the load, at a fixed rate: a steady fleet's trickle,
 * not a stress (bench/ingestion.ts measures the most a hub takes). */
const LOAD_DEVICES = Math.min(1000, DEVICES - 2);
const LOAD_RATE = 1000;
const LOAD_CONNECTIONS = 32;
/** Appends in flight while seeding: the store group-commits them, many streams per transaction. */
const SEED_WINDOW = 4096;
/** A device's metadata reports per append while seeding: the SQLite writer thread, the seeding's
 * limit, took 12,000 events/s so, and 6,600 at one event an append (the API's way), on this machine. */
const SEED_EVENTS_PER_APPEND = 10;
const REDIS_DB = 9;

type Profile = 'embedded' | 'distributed';
const MiB = 2 ** 20;
const ms = (from: number) => performance.now() - from;
const log = (line: string) => process.stderr.write(`${line}\n`);
const secs = (msValue: number) => fmt(msValue / 1000, 1);
const mib = (bytes: number) => fmt(bytes / MiB);
const verdict = (met: boolean) => (met ? 'met' : 'not met');
const secretOf = (i: number) => `history-bench-secret-${String(i).padStart(8, '0')}`;

/** A hub process this run started. */
interface Hub {
  child: ChildProcess;
  url: string;
  /** From the spawn to /readyz answering 200. */
  readyMs: number;
}

/** The same settings for every hub of a profile: the empty one and every size. */
function hubEnv(dataDir: string, extra: Record<string, string>): Record<string, string> {
  return {
    HUB_PORT: '0',
    HUB_LOG_LEVEL: 'warn',
    HUB_DATA_DIR: dataDir,
    // All load comes from one address: the per-address limits would measure themselves.
    HUB_RATE_LIMIT_PER_SECOND: '0',
    HUB_LOGIN_LIMIT_PER_MINUTE: '1000000',
    ...extra,
  };
}

/** Spawns `hub start` and waits for /readyz to answer 200, printing what it waits for now and then. */
async function startHub(env: Record<string, string>, what: string): Promise<Hub> {
  const started = performance.now();
  const { child, url } = await startListening(hubArgs(env, ['start']), env);
  const listenMs = ms(started);
  let exited = false;
  child.once('exit', () => {
    exited = true;
  });
  let said = performance.now();
  for (;;) {
    if (exited) throw new Error(`${what}: the hub exited before it was ready`);
    const res = await fetch(new URL('/readyz', url)).catch(() => undefined);
    if (res?.status === 200) {
      await res.text();
      break;
    }
    const body = await res?.text();
    if (ms(said) > 30_000) {
      said = performance.now();
      log(`  ${what}: not ready after ${fmt(ms(started) / 1000)} s: ${body ?? 'no answer'}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  const readyMs = ms(started);
  log(`  ${what}: listening after ${fmt(listenMs)} ms, ready after ${fmt(readyMs)} ms`);
  return { child, url, readyMs };
}

/** SIGTERM, and the wait for the hub to exit (SIGKILL after two minutes). */
async function stopHub(hub: Hub): Promise<void> {
  if (hub.child.exitCode !== null || hub.child.signalCode !== null) return;
  const exited = new Promise((r) => hub.child.once('exit', r));
  hub.child.kill('SIGTERM');
  const timer = setTimeout(() => {
    log('  the hub did not stop within two minutes of SIGTERM: killed');
    hub.child.kill('SIGKILL');
  }, 120_000);
  await exited;
  clearTimeout(timer);
}

function rss(hub: Hub): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${hub.child.pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

/** The sum of the samples of one metric of /metrics (all its labels), undefined when absent. */
async function metric(url: string, name: string): Promise<number | undefined> {
  const text = await (await fetch(new URL('/metrics', url))).text();
  let sum: number | undefined;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm')))
    sum = (sum ?? 0) + Number(m[1]);
  return sum;
}

/**
 * Waits until the change pipeline has caught up with the store too (readiness covers the read
 * models; the processor derives the event log and the actors' states behind them): the relay has
 * passed `head`, the processor's count of changes stands still and its consumers lag nothing.
 */
async function waitSettled(hub: Hub, head: number, what: string): Promise<void> {
  let last = -1;
  let still = 0;
  let said = performance.now();
  for (;;) {
    const relayed = (await metric(hub.url, 'hub_relay_position')) ?? 0;
    const changes = (await metric(hub.url, 'hub_processor_changes_total')) ?? 0;
    const lag = (await metric(hub.url, 'hub_processor_consumer_lag')) ?? 0;
    still = relayed >= head && lag === 0 && changes === last ? still + 1 : 0;
    if (still >= 2) return;
    last = changes;
    if (ms(said) > 30_000) {
      said = performance.now();
      log(
        `  ${what}: relayed ${fmt(relayed)} of ${fmt(head)}, ${fmt(changes)} changes processed, lag ${fmt(lag)}`,
      );
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

/** One timed request; throws on a non-2xx. */
async function timed(url: string, method: string, target: string, token: string, body?: unknown) {
  const started = performance.now();
  await callHub(url, method, target, body, token);
  return ms(started);
}

// ---------------------------------------------------------------- the history

interface Owner {
  id: string;
  prn: string;
  nick: string;
}
interface Device {
  id: string;
  prn: string;
  secret: string;
}

/** The history of one size: how its events are shared out. */
interface Plan {
  events: number;
  devices: number;
  /** The long device's DeviceMetaUpdated events. */
  long: number;
}

/**
 * At most half of the metadata events go to the long device: a history of 1M events over
 * 100,000 devices (300,000 events to create them) cannot give one device 1M of its own.
 */
function plan(events: number): Plan {
  const meta = events - 3 * DEVICES;
  if (meta < 2 * DEVICES) throw new Error(`${fmt(events)} events are too few for ${fmt(DEVICES)} devices`);
  return { events, devices: DEVICES, long: Math.min(LONG, Math.floor(meta / 2)) };
}

/** The device events the API appends: its nick and PRN claimed (one stream each), then DeviceCreated. */
function enrolment(owner: Owner, id: string, nick: string, sealed: string): [string, NewEvent][] {
  const prn = devicePrn(id);
  const claim = (kind: string, value: string): NewEvent => ({
    id: timeOrderedId(),
    type: 'NameClaimed',
    data: { kind, value, owner_id: id },
  });
  return [
    [`unique-devnick-${owner.id}-${nick}`, claim(`devnick-${owner.id}`, nick)],
    [`unique-prn-${prn}`, claim('prn', prn)],
    [
      deviceStream(id),
      {
        id: timeOrderedId(),
        type: 'DeviceCreated',
        data: {
          device_id: id,
          prn,
          owner_id: owner.id,
          owner_prn: owner.prn,
          owner_nick: owner.nick,
          nick,
          secret_sealed: sealed,
          challenge: '',
          user_meta: {},
          device_meta: { fw: '4.2.1', temp: '20' },
          certificate: null,
        },
      },
    ],
  ];
}

/** A report of a new temperature: each one changes the map, as the API appends only changes (21 on: the devices start at 20). */
const metaEvent = (id: string, owner: Owner, temp: number): NewEvent => ({
  id: timeOrderedId(),
  type: 'DeviceMetaUpdated',
  data: { device_id: id, owner_prn: owner.prn, changed: { temp: String(temp) }, removed: [] },
});

/**
 * Appends the history after what the API wrote: DEVICES - 1 devices (the long one exists), then
 * metadata events, one per append as the API appends them, the long device's spread evenly
 * among the others' (round robin), up to `p.events` in the store. Answers the devices, in order.
 */
async function seed(
  store: EventStore,
  p: Plan,
  owner: Owner,
  long: Device,
  sealKey: Buffer,
): Promise<Device[]> {
  const started = performance.now();
  let said = started;
  let window: Promise<unknown>[] = [];
  const append = async (stream: string, events: NewEvent[]) => {
    window.push(store.append(stream, events));
    if (window.length < SEED_WINDOW) return;
    await Promise.all(window);
    window = [];
    if (ms(said) < 10_000) return;
    said = performance.now();
    const head = await store.head();
    log(`  seeding: ${fmt(head)} of ${fmt(p.events)} events, ${fmt(head / (ms(started) / 1000))} events/s`);
  };
  const devices: Device[] = [];
  for (let i = 0; i < p.devices - 1; i++) {
    const id = randomBytes(12).toString('hex'); // as the API makes them
    const secret = secretOf(i);
    devices.push({ id, prn: devicePrn(id), secret });
    for (const [stream, event] of enrolment(owner, id, `sensor-${i}`, seal(sealKey, secret)))
      await append(stream, [event]);
  }
  await Promise.all(window);
  window = [];
  const meta = p.events - (await store.head());
  // A device's reports go SEED_EVENTS_PER_APPEND to an append, the long device's appends spread
  // evenly among the others' (round robin over the devices).
  const appends =
    Math.ceil(p.long / SEED_EVENTS_PER_APPEND) + Math.ceil((meta - p.long) / SEED_EVENTS_PER_APPEND);
  const longAppends = Math.ceil(p.long / SEED_EVENTS_PER_APPEND);
  let longLeft = p.long;
  let othersLeft = meta - p.long;
  let other = 0;
  const rounds = new Map<string, number>();
  for (let k = 0; k < appends; k++) {
    const longTurn = Math.floor(((k + 1) * longAppends) / appends) > Math.floor((k * longAppends) / appends);
    const toLong = othersLeft === 0 || (longTurn && longLeft > 0);
    const n = Math.min(SEED_EVENTS_PER_APPEND, toLong ? longLeft : othersLeft);
    if (toLong) longLeft -= n;
    else othersLeft -= n;
    const id = toLong ? long.id : devices[other++ % devices.length]!.id;
    const round = rounds.get(id) ?? 0;
    rounds.set(id, round + n);
    await append(
      deviceStream(id),
      Array.from({ length: n }, (_, i) => metaEvent(id, owner, 21 + ((round + i) % 15))),
    );
  }
  await Promise.all(window);
  log(`  seeded up to ${fmt(await store.head())} events in ${fmt(ms(started) / 1000)} s`);
  return devices;
}

/** The store adapter the hub of `env` opens, behind the schema checks, for seeding. */
function seedingStore(env: Record<string, string>): EventStore {
  const config = loadConfig({ ...process.env, ...env });
  const registry = SchemaRegistry.load();
  if (config.eventStoreKind === 'sqlite')
    return new SchemaCheckedStore(
      new SqliteEventStore(join(config.dataDir, 'events.sqlite'), {
        synchronous: 'normal',
        writerThread: true,
      }),
      registry,
    );
  const url = new URL(config.postgresUrl);
  const schema = url.searchParams.get('schema') ?? undefined;
  url.searchParams.delete('schema');
  return new SchemaCheckedStore(new PostgresEventStore({ url: url.href, schema }), registry);
}

// ---------------------------------------------------------------- what is measured

/** Bytes on disk under a directory (allocated blocks, as du counts). */
function diskBytes(dir: string): number {
  let bytes = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    bytes += entry.isDirectory() ? diskBytes(path) : statSync(path).blocks * 512;
  }
  return bytes;
}

/** The embedded data dir by part: the event store, the derived state, the rest. */
function embeddedDisk(dataDir: string): Record<string, number> {
  const of = (prefix: string) =>
    readdirSync(dataDir)
      .filter((f) => f.startsWith(prefix))
      .reduce((sum, f) => sum + statSync(join(dataDir, f)).blocks * 512, 0);
  const total = diskBytes(dataDir);
  const events = of('events.sqlite');
  const derived = of('derived.sqlite');
  return { total, events, derived, other: total - events - derived };
}

/** The PostgreSQL relations of the hub's schema (tables with their indexes and TOAST). */
async function postgresDisk(env: Record<string, string>): Promise<Record<string, number>> {
  const schema = /[?&]schema=(\w+)/.exec(env.HUB_POSTGRES_URL ?? '')![1]!;
  const client = new pg.Client({ connectionString: loadConfig().postgresUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ relname: string; bytes: string }>(
      `SELECT c.relname, pg_total_relation_size(c.oid) AS bytes FROM pg_class c
       JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`,
      [schema],
    );
    const total = rows.reduce((sum, r) => sum + Number(r.bytes), 0);
    const events = Number(rows.find((r) => r.relname === 'hub_events')?.bytes ?? 0);
    return { total, events, other: total - events };
  } finally {
    await client.end();
  }
}

/** Redis: the server's used_memory (every database, other users' too), and what the hub's own
 * database holds (MEMORY USAGE of each of its keys). */
async function redisMemory(env: Record<string, string>): Promise<{ usedMemory: number; hubKeys: number }> {
  const redis = new Redis(env.HUB_REDIS_URL!);
  try {
    const usedMemory = Number(/used_memory:(\d+)/.exec(await redis.info('memory'))![1]);
    let hubKeys = 0;
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'COUNT', 1000);
      cursor = next;
      const pipe = redis.pipeline();
      for (const key of keys) pipe.memory('USAGE', key);
      for (const [, bytes] of (await pipe.exec()) ?? []) hubKeys += Number(bytes ?? 0);
    } while (cursor !== '0');
    return { usedMemory, hubKeys };
  } finally {
    redis.disconnect();
  }
}

/** PATCH device-meta at LOAD_RATE requests/s over the devices, each with its own token. */
async function load(url: string, devices: { id: string; token: string }[], seconds: number) {
  let n = 0;
  const r = await autocannon({
    url,
    connections: LOAD_CONNECTIONS,
    overallRate: LOAD_RATE,
    duration: seconds,
    requests: [
      {
        method: 'PATCH',
        setupRequest: (req) => {
          const i = n++;
          const device = devices[i % devices.length]!;
          return {
            ...req,
            path: `/devices/${device.id}/device-meta`,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${device.token}` },
            body: JSON.stringify({ temp: String(Math.floor(i / devices.length)), fw: '4.2.1' }),
          };
        },
      },
    ],
  });
  // What went wrong, by status and kind: the table shows it beside the count.
  const failures = [
    ...Object.entries(r.statusCodeStats ?? {})
      .filter(([code]) => !code.startsWith('2'))
      .map(([code, stat]) => `${fmt(stat.count ?? 0)} × ${code}`),
    ...(r.timeouts ? [`${fmt(r.timeouts)} timeouts`] : []),
    ...(r.errors > r.timeouts ? [`${fmt(r.errors - r.timeouts)} connection errors`] : []),
  ];
  return {
    rps: r.requests.average,
    p99: r.latency.p99,
    errors: r.non2xx + r.errors,
    failures: failures.join(', '),
  };
}

/** Logs devices in (concurrently, 50 at a time): their tokens. */
async function logIn(url: string, devices: Device[]): Promise<string[]> {
  const tokens: string[] = [];
  for (let i = 0; i < devices.length; i += 50)
    tokens.push(
      ...(await Promise.all(
        devices
          .slice(i, i + 50)
          .map(
            async (d) =>
              (
                await callHub(url, 'POST', '/auth/login', { username: d.prn, password: d.secret })
              ).token as string,
          ),
      )),
    );
  return tokens;
}

interface Empty {
  readyMs: number;
  rss: number;
  /** After the load, on a fleet of LOAD_DEVICES devices with no history. */
  rssLoaded: number;
  load: Awaited<ReturnType<typeof load>>;
}

interface SizeRun extends Plan {
  seedSeconds: number;
  /** The first start after seeding: it builds the derived state. */
  first: { readyMs: number; settledMs: number };
  /** The measured restarts (the second only for the first GETs). */
  readyMs: number;
  readyMs2: number;
  rssReady: number;
  rssLoaded: number;
  load: Awaited<ReturnType<typeof load>>;
  patchLong: number;
  patchShort: number;
  getLong: number;
  getShort: number;
  head: number;
  disk: Record<string, number>;
  redis?: { ready: { usedMemory: number; hubKeys: number }; loaded: { usedMemory: number; hubKeys: number } };
}

/** A fresh data dir (and, distributed, its own schema, Redis database and topics) for one hub's life. */
async function fresh(
  profile: Profile,
): Promise<{ env: Record<string, string>; release: () => Promise<void> }> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-bench-history-'));
  // Each size's data dir goes once measured, not at the end of the run: 10M events take gigabytes.
  const removeDir = async () => rmSync(dataDir, { recursive: true, force: true });
  if (profile === 'embedded') return { env: hubEnv(dataDir, {}), release: removeDir };
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  const distributed = await isolatedDistributed(REDIS_DB);
  return {
    env: hubEnv(dataDir, { ...distributed, HUB_JWT_PRIVATE_KEY: await exportPKCS8(privateKey) }),
    release: () => releaseDistributed(distributed, REDIS_DB).finally(removeDir),
  };
}

/**
 * A hub on an empty data dir: its RSS when ready is what the targets compare with. Then the same
 * load on a fleet made through its API (the owner and LOAD_DEVICES devices, no history): what the
 * load alone does to its RSS.
 */
async function emptyRun(profile: Profile): Promise<Empty> {
  const { env, release } = await fresh(profile);
  try {
    const hub = await startHub(env, `${profile}, empty`);
    const readyRss = rss(hub);
    const devices = await benchDevices(hub.url, await benchUser(hub.url, env.HUB_DATA_DIR!), LOAD_DEVICES);
    const loaded = await load(hub.url, devices, LOAD_SECONDS);
    const result = { readyMs: hub.readyMs, rss: readyRss, rssLoaded: rss(hub), load: loaded };
    await stopHub(hub);
    log(
      `${profile}, empty data dir: ready in ${fmt(result.readyMs)} ms, RSS ${mib(result.rss)} MiB, ${mib(result.rssLoaded)} MiB after the load`,
    );
    return result;
  } finally {
    await release();
  }
}

async function sizeRun(profile: Profile, events: number): Promise<SizeRun> {
  const p = plan(events);
  const { env, release } = await fresh(profile);
  const what = `${profile}, ${fmt(events)} events`;
  try {
    // The owner and the long device, made through the API as people do.
    log(`${what}: the owner and the long device through the API`);
    let hub = await startHub(env, what);
    const ownerToken = await benchUser(hub.url, env.HUB_DATA_DIR!);
    const made = await callHub(hub.url, 'POST', '/devices', { nick: 'long-device' }, ownerToken);
    const long: Device = { id: made.id, prn: made.prn, secret: made.secret };
    const owner: Owner = {
      id: (made.owner as string).replace('prn:::accounts:/', ''),
      prn: made.owner,
      nick: made['owner-nick'],
    };
    await stopHub(hub);

    const keys = await fromPem(
      env.HUB_JWT_PRIVATE_KEY ?? readFileSync(jwtKeyFile(env.HUB_DATA_DIR!), 'utf8'),
    );
    log(`${what}: seeding`);
    const seedStarted = performance.now();
    const store = seedingStore(env);
    if ((await store.readStream(accountStream(owner.id))).length === 0)
      throw new Error('the owner is not in the store');
    const devices = await seed(store, p, owner, long, keys.sealKey);
    const head = await store.head();
    await store.close();
    const seedSeconds = ms(seedStarted) / 1000;

    log(`${what}: first start (builds the derived state)`);
    const firstStarted = performance.now();
    hub = await startHub(env, `${what}, first start`);
    await waitSettled(hub, head, `${what}, first start`);
    const settledMs = ms(firstStarted);
    // Tokens for the restarts, taken now: a login loads the device, which the restart must not find done.
    const loadDevices = devices.slice(2, 2 + LOAD_DEVICES);
    const short = devices[0]!;
    const [longToken, shortToken, ...loadTokens] = await logIn(hub.url, [long, short, ...loadDevices]);
    await stopHub(hub);
    const first = { readyMs: hub.readyMs, settledMs };
    log(`${what}: first start ready in ${fmt(first.readyMs)} ms, settled in ${fmt(settledMs)} ms`);
    const disk = profile === 'embedded' ? embeddedDisk(env.HUB_DATA_DIR!) : await postgresDisk(env);
    log(
      `${what}: disk ${Object.entries(disk)
        .map(([k, v]) => `${k} ${fmt(v / head)} bytes/event`)
        .join(', ')}`,
    );

    log(`${what}: restart, the first PATCH, ${LOAD_SECONDS} s of load`);
    hub = await startHub(env, `${what}, restart`);
    const readyMs = hub.readyMs;
    const rssReady = rss(hub);
    const redisReady = profile === 'distributed' ? await redisMemory(env) : undefined;
    // A device with a short history first: what a first request costs whatever the device.
    const patchShort = await timed(hub.url, 'PATCH', `/devices/${short.id}/device-meta`, shortToken!, {
      temp: 'restarted',
    });
    const patchLong = await timed(hub.url, 'PATCH', `/devices/${long.id}/device-meta`, longToken!, {
      temp: 'restarted',
    });
    const loaded = await load(
      hub.url,
      loadDevices.map((d, i) => ({ id: d.id, token: loadTokens[i]! })),
      LOAD_SECONDS,
    );
    const rssLoaded = rss(hub);
    const redisLoaded = profile === 'distributed' ? await redisMemory(env) : undefined;
    await stopHub(hub);

    log(`${what}: restart, the first GET`);
    hub = await startHub(env, `${what}, second restart`);
    const getShort = await timed(hub.url, 'GET', `/devices/${short.id}`, shortToken!);
    const getLong = await timed(hub.url, 'GET', `/devices/${long.id}`, longToken!);
    const readyMs2 = hub.readyMs;
    await stopHub(hub);

    const run: SizeRun = {
      ...p,
      seedSeconds,
      first,
      readyMs,
      readyMs2,
      rssReady,
      rssLoaded,
      load: loaded,
      patchLong,
      patchShort,
      getLong,
      getShort,
      head,
      disk,
      ...(redisReady && redisLoaded ? { redis: { ready: redisReady, loaded: redisLoaded } } : {}),
    };
    return run;
  } finally {
    await release();
  }
}

interface ProfileRun {
  profile: Profile;
  empty: Empty;
  sizes: SizeRun[];
}

/** The issue's targets beside this run's figures, each met or not. */
function targets(runs: ProfileRun[]): { text: string; figures: Parameters<typeof recordFigures>[1] } {
  const lines: string[] = [];
  const figures: Parameters<typeof recordFigures>[1] = [];
  for (const { profile, empty, sizes } of runs) {
    const small = sizes[0]!;
    const large = sizes.at(-1)!;
    const at = `${fmt(large.events)} events`;
    // Against a smaller history of the same run; with one size, nothing to compare.
    const compared = sizes.length > 1;
    if (profile === 'embedded') {
      const fast = large.readyMs <= 3000;
      const flat = large.readyMs <= 1.5 * small.readyMs;
      const calm = large.rssReady <= 1.15 * empty.rss;
      const loaded = large.rssLoaded <= 1.5 * empty.rss;
      lines.push(
        `- Embedded start to ready at ${at} ≤ 3 s: ${secs(large.readyMs)} s, **${verdict(fast)}**${compared ? `; ≤ 1.5 × the ${fmt(small.events)}-event figure: ${fmt(large.readyMs / small.readyMs, 2)} ×, **${verdict(flat)}**` : ''}.`,
        `- Embedded RSS when ready at ${at} ≤ 1.15 × the empty hub's (${mib(empty.rss)} MiB): ${mib(large.rssReady)} MiB, ${fmt(large.rssReady / empty.rss, 2)} ×, **${verdict(calm)}**; ≤ 1.5 × it after ${LOAD_SECONDS} s of load: ${mib(large.rssLoaded)} MiB, ${fmt(large.rssLoaded / empty.rss, 2)} ×, **${verdict(loaded)}** (the empty hub after the same load on a fleet without history: ${mib(empty.rssLoaded)} MiB, ${fmt(empty.rssLoaded / empty.rss, 2)} ×).`,
      );
      const fromEmpty = {
        profile,
        ceiling: empty.rss / MiB,
        unit: 'MiB',
        ceilingName: 'a hub on an empty data dir, ready',
      };
      figures.push(
        {
          benchmark: `history: restart to /readyz, ${at}`,
          profile,
          value: large.readyMs,
          unit: 'ms',
          ceiling: empty.readyMs,
          ceilingName: 'a hub on an empty data dir',
          target: compared ? `≤ 3 s, ≤ 1.5 × at ${fmt(small.events)} events` : '≤ 3 s',
          met: fast && (flat || !compared),
        },
        {
          benchmark: `history: RSS when ready, ${at}`,
          value: large.rssReady / MiB,
          ...fromEmpty,
          target: '≤ 1.15 × the empty hub',
          met: calm,
        },
        {
          benchmark: `history: RSS after ${LOAD_SECONDS} s of load, ${at}`,
          value: large.rssLoaded / MiB,
          ...fromEmpty,
          target: '≤ 1.5 × the empty hub',
          met: loaded,
        },
      );
    }
    // The issue's line is of the largest history's long device; a smaller history's, shorter
    // device is shown beside it with a short device's first requests (a new process's own cost).
    const quick = Math.max(large.patchLong, large.getLong) <= 50;
    const smaller = sizes
      .slice(0, -1)
      .map(
        (r) =>
          `; with ${fmt(r.events)} events, its ${fmt(r.long)}-event device ${fmt(r.patchLong)} and ${fmt(r.getLong)} ms, a short device ${fmt(r.patchShort)} and ${fmt(r.getShort)} ms`,
      )
      .join('');
    lines.push(
      `- First PATCH and first GET of the ${fmt(large.long)}-event device after a restart ≤ 50 ms each, ${profile}: ${fmt(large.patchLong)} and ${fmt(large.getLong)} ms, **${verdict(quick)}** (a short device ${fmt(large.patchShort)} and ${fmt(large.getShort)} ms${smaller}).`,
    );
    for (const [kind, of, ofShort] of [
      ['PATCH', (r: SizeRun) => r.patchLong, (r: SizeRun) => r.patchShort],
      ['GET', (r: SizeRun) => r.getLong, (r: SizeRun) => r.getShort],
    ] as const)
      figures.push({
        benchmark: `history: first ${kind} of a device with ${fmt(large.long)} events after a restart`,
        profile,
        value: of(large),
        unit: 'ms',
        ceiling: ofShort(large),
        ceilingName: `first ${kind} of a device with a short history`,
        target: '≤ 50 ms',
        met: of(large) <= 50,
      });
    if (profile === 'distributed' && large.redis && small.redis) {
      // When ready: the load's own events would count as history.
      const flat = large.redis.ready.hubKeys <= 1.1 * small.redis.ready.hubKeys;
      const each = sizes
        .map((r) => `${mib(r.redis!.ready.hubKeys)} MiB at ${fmt(r.events)} events`)
        .join(', ');
      lines.push(
        `- Redis does not grow with history beyond the fleet's read models: the hub's keys when ready, ${each}${compared ? ` (the same fleet at each size: within 10 % of the ${fmt(small.events)}-event figure), **${verdict(flat)}**` : ''}.`,
      );
      if (compared)
        figures.push({
          benchmark: `history: Redis, the hub's keys when ready, ${at}`,
          profile,
          value: large.redis.ready.hubKeys / MiB,
          unit: 'MiB',
          ceiling: small.redis.ready.hubKeys / MiB,
          ceilingName: `the same at ${fmt(small.events)} events`,
          target: '≤ 1.1 × (not growing with history)',
          met: flat,
        });
    }
  }
  return { text: lines.join('\n'), figures };
}

function report(runs: ProfileRun[]): void {
  const starts = [
    '| Profile | Events | Seeded in s | First start: ready s | …: change pipeline caught up s | Restart: ready s (second restart) | RSS ready MiB | RSS after the load MiB | Load: requests/s, p99 ms, errors |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const costs = [
    '| Profile | Events | Long device events | First PATCH ms: long device (short) | First GET ms: long device (short) | Disk bytes/event | Of which the event store | Redis: the hub’s keys MiB, ready / after the load (server used_memory) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const { profile, empty, sizes } of runs) {
    starts.push(
      `| ${profile} | empty data dir (then ${fmt(LOAD_DEVICES)} devices for the load) | | | | ${secs(empty.readyMs)} | ${mib(empty.rss)} | ${mib(empty.rssLoaded)} | ${fmt(empty.load.rps)}, ${fmt(empty.load.p99)}, ${fmt(empty.load.errors)}${empty.load.failures ? ` (${empty.load.failures})` : ''} |`,
    );
    for (const r of sizes) {
      starts.push(
        `| ${profile} | ${fmt(r.head)} | ${fmt(r.seedSeconds)} | ${secs(r.first.readyMs)} | ${secs(r.first.settledMs)} | ${secs(r.readyMs)} (${secs(r.readyMs2)}) | ${mib(r.rssReady)} | ${mib(r.rssLoaded)} | ${fmt(r.load.rps)}, ${fmt(r.load.p99)}, ${fmt(r.load.errors)}${r.load.failures ? ` (${r.load.failures})` : ''} |`,
      );
      costs.push(
        `| ${profile} | ${fmt(r.head)} | ${fmt(r.long)} | ${fmt(r.patchLong)} (${fmt(r.patchShort)}) | ${fmt(r.getLong)} (${fmt(r.getShort)}) | ${fmt(r.disk.total! / r.head)} | ${fmt(r.disk.events! / r.head)} | ${r.redis ? `${mib(r.redis.ready.hubKeys)} / ${mib(r.redis.loaded.hubKeys)} (${mib(r.redis.loaded.usedMemory)})` : ''} |`,
      );
    }
  }
  const { text, figures } = targets(runs);
  const issueSizes = SIZES.length === 2 && SIZES[0] === 1_000_000 && SIZES[1] === 10_000_000;
  const body = `## Long histories

\`node bench/history.ts ${process.argv.slice(2).join(' ')}\` on ${machine()}: histories of
${SIZES.map((n) => fmt(n)).join(' and ')} events over ${fmt(DEVICES)} devices of one owner, one of them
with ${fmt(LONG)} metadata events of its own or half the history's metadata events, whichever is fewer
(the table says how many). The owner (registered, verified through its emailed link) and the long
device are made through the API of a hub started on the empty store; the rest is appended straight
through the store adapter behind \`SchemaCheckedStore\`, as the API appends it: each device's nick
and PRN claims and \`DeviceCreated\` (its secret sealed with the hub's key), one event per append, then
\`DeviceMetaUpdated\`, ${SEED_EVENTS_PER_APPEND} reports of a device per append, the long device's appends
spread evenly among the others'. The first start after
seeding builds the derived state (read models, the event log, the actors' states); "caught up" is
when the change pipeline has derived the whole store too (the relay past the head, the processor's
count still). Then the hub is stopped (SIGTERM) and started again: the time from the spawn of
\`hub start\` to \`/readyz\` answering 200, its RSS then, the first PATCH of a device with a short
history (what any first request costs a new process), then of the long device (each with a token
taken before the restart), ${LOAD_SECONDS} s of
\`PATCH /devices/{id}/device-meta\` at ${fmt(LOAD_RATE)} requests/s over ${fmt(LOAD_DEVICES)} devices
(${LOAD_CONNECTIONS} connections), its RSS then; a second restart for the first GETs. Disk: the data
dir (embedded), the schema's PostgreSQL relations with their indexes (distributed), after the first
start, over the events in the store. Distributed: every role in one process, on a schema, a Redis
database and a Kafka prefix of its own; Redis is measured as the hub's keys (\`MEMORY USAGE\`
summed) beside the server's \`used_memory\` (other users' databases included). Each profile first
starts a hub on an empty data dir with the same settings: the RSS the targets compare with.

${starts.join('\n')}

${costs.join('\n')}

Targets (issue 40)${issueSizes ? '' : `, of this run's sizes (the issue's are 1M and 10M events, 100,000 devices, a device with 1M events)`}:

${text}
`;
  writeSection('history', body);
  recordFigures('history', figures);
  console.log(body);
}

async function main() {
  log(
    `history: ${SIZES.map((n) => fmt(n)).join(', ')} events, ${fmt(DEVICES)} devices; ${PROFILES.join(', ')}`,
  );
  const runs: ProfileRun[] = [];
  for (const profile of PROFILES) {
    try {
      const empty = await emptyRun(profile);
      const sizes: SizeRun[] = [];
      for (const events of SIZES) sizes.push(await sizeRun(profile, events));
      runs.push({ profile, empty, sizes });
    } catch (err) {
      if (profile !== 'distributed') throw err;
      log(`distributed run skipped: ${(err as Error).message} (npm run infra:up)`);
    }
  }
  report(runs);
}

await main();
