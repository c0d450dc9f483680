// A distributed hub for the fault and drain tests: every role its own process (or all in one) on the real
// PostgreSQL, Redis and Kafka (isolated: a Redis database, a PostgreSQL schema and Kafka names of
// its own), a fleet under a steady load of device-meta writes, and the audit that compares what
// was accepted with the event log and what the receivers got.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { MemoryReadStore } from '../../infra/readstore/memory.ts';
import type { ReadStore } from '../../infra/readstore/port.ts';
import { createLogger } from '../../infra/telemetry.ts';
import { projections } from '../../projections/index.ts';
import { replayProjection } from '../../projections/replay.ts';
import { deleteTopics, dropSchema, inSchema, redisDb, request, testConfig } from '../harness.ts';
import { endProcess, type RoleProcess, remoteHub, spawnRole, type TestHub, type User } from '../hub.ts';
import type { Receiver } from '../webhooks/receiver.ts';

export const ROLES = ['api', 'projector', 'processor', 'dispatcher'] as const;
export type RoleName = (typeof ROLES)[number];

export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

export interface Cluster {
  env: Record<string, string>;
  roles: Map<RoleName, RoleProcess>;
  api: string;
  hub: TestHub;
  /** Starts `role` again (the API on its port). */
  restart(role: RoleName): Promise<void>;
  stop(): Promise<void>;
}

export async function startCluster(
  name: string,
  /** The Redis database of this cluster (flushed at its start). */
  database: number,
  extra: Record<string, string> = {},
  /** apart: every role its own process; together: one process running them all (`hub start`),
   * which each role's name in `roles` then names, and `restart` starts again. */
  layout: 'apart' | 'together' = 'apart',
): Promise<Cluster> {
  const base = testConfig();
  const id = randomBytes(4).toString('hex');
  const redisUrl = redisDb(base.redisUrl, database);
  const redis = new Redis(redisUrl);
  await redis.flushdb();
  redis.disconnect();
  const apiPort = await freePort();
  const schema = `${name}_${id}`;
  const prefix = `${name}-${id}-`;
  const env = {
    HUB_PROFILE: 'distributed',
    HUB_REDIS_URL: redisUrl,
    HUB_POSTGRES_URL: inSchema(base.postgresUrl, schema),
    HUB_KAFKA_PREFIX: prefix,
    HUB_DATA_DIR: mkdtempSync(join(tmpdir(), `hub-${name}-`)),
    HUB_WEBHOOK_ALLOW_HTTP: 'true',
    HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
    HUB_LOGIN_LIMIT_PER_MINUTE: '100000',
    HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE: '100000',
    HUB_PUBLIC_URL: `http://127.0.0.1:${apiPort}`,
    ...extra,
  };
  const roles = new Map<RoleName, RoleProcess>();
  const start = async (role: RoleName) => {
    if (layout === 'apart')
      roles.set(role, await spawnRole(role, { ...env, HUB_PORT: role === 'api' ? String(apiPort) : '0' }));
    else {
      const all = await spawnRole('start', { ...env, HUB_PORT: String(apiPort) });
      for (const r of ROLES) roles.set(r, all);
    }
  };
  for (const role of layout === 'apart' ? ROLES : ROLES.slice(0, 1)) await start(role);
  const api = roles.get('api')!.url;
  return {
    env,
    roles,
    api,
    hub: remoteHub(api, env.HUB_DATA_DIR),
    restart: async (role) => {
      await start(role);
    },
    stop: async () => {
      await Promise.all([...roles.values()].map((r) => endProcess(r.child, 'SIGKILL')));
      // Cleanup that fails must not leave the rest undone (nor hide why a test failed).
      await dropSchema(base.postgresUrl, schema).catch((err) =>
        process.stderr.write(`schema ${schema} not dropped: ${(err as Error).message}\n`),
      );
      await deleteTopics(base.kafkaBrokers, prefix);
    },
  };
}

export interface Fleet {
  user: User;
  devices: { id: string; token: string }[];
}

/** `count` devices of `user`, each logged in. */
export async function fleet(hub: TestHub, user: User, count: number): Promise<Fleet> {
  const devices: Fleet['devices'] = [];
  for (let i = 0; i < count; i++) {
    const d = await hub.call('POST', '/devices', { token: user.token, body: {} });
    assert.ok(d.status < 300, JSON.stringify(d.body));
    const login = await hub.call('POST', '/auth/login', {
      body: { username: d.body.prn, password: d.body.secret },
    });
    assert.equal(login.status, 200, JSON.stringify(login.body));
    devices.push({ id: d.body.id, token: login.body.token });
  }
  return { user, devices };
}

/** A subscription of `user` to device-meta updates at `url`. */
export async function subscribe(hub: TestHub, user: User, url: string, extra: Record<string, unknown> = {}) {
  const sub = await hub.call('POST', '/webhooks/', {
    token: user.token,
    body: {
      nick: new URL(url).pathname.replaceAll('/', '-').slice(1),
      url,
      event_types: ['device.device_meta.updated'],
      enabled: true,
      ...extra,
    },
  });
  assert.equal(sub.status, 201, JSON.stringify(sub.body));
  return sub.body.id as string;
}

export interface Load {
  /** Sequence numbers of the writes answered 200. */
  accepted: Set<string>;
  sent(): number;
  refused(): number;
  /** The refused writes by answer: an HTTP status, or `down` when no answer came. */
  refusals(): Record<string, number>;
  /** Resolves once writes are accepted again after `since` (a count of accepted writes). */
  acceptingAgain(since: number, what: string, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** One write every 1/rate s round-robin over the devices, each a new `seq` value. */
export function steadyLoad(api: string, f: Fleet, rate: number): Load {
  const accepted = new Set<string>();
  let refused = 0;
  const refusals: Record<string, number> = {};
  const refuse = (why: string) => {
    refused++;
    refusals[why] = (refusals[why] ?? 0) + 1;
  };
  let sent = 0;
  let loading = true;
  const run = (async () => {
    const inflight: Promise<void>[] = [];
    const started = Date.now();
    while (loading) {
      for (; sent < ((Date.now() - started) / 1000) * rate; sent++) {
        const seq = String(sent);
        const d = f.devices[sent % f.devices.length]!;
        inflight.push(
          request(`${api}/devices/${d.id}/device-meta`, {
            method: 'PATCH',
            body: { seq },
            headers: { authorization: `Bearer ${d.token}` },
          }).then(
            (r) => {
              if (r.status === 200) accepted.add(seq);
              else refuse(String(r.status));
            },
            () => refuse('down'), // not accepted: the API was down
          ),
        );
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    await Promise.all(inflight);
  })();
  return {
    accepted,
    sent: () => sent,
    refused: () => refused,
    refusals: () => ({ ...refusals }),
    acceptingAgain: async (since, what, timeoutMs = 30_000) => {
      const deadline = Date.now() + timeoutMs;
      while (accepted.size <= since + 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.ok(accepted.size > since + 5, `writes are accepted again after ${what}`);
    },
    stop: async () => {
      loading = false;
      await run;
    },
  };
}

const seqOf = (body: string) => JSON.parse(body).data.changed.seq as string;

/**
 * The audit: every accepted write has exactly one event in the account's log; every receiver path
 * got every one of those events at least once (waiting up to `timeoutMs`), and every delivery carries
 * the logged event id of its write (so duplicates carry the same id). Returns the figures.
 */
export async function audit(
  hub: TestHub,
  user: User,
  accepted: Set<string>,
  rx: Receiver,
  paths: string[],
  timeoutMs = 90_000,
): Promise<{ accepted: number; deliveries: number; duplicates: number; lost: number }> {
  const deadline = Date.now() + timeoutMs;
  /** Accepted writes a receiver never got: counted from its receipts, and asserted to be none. */
  let lost = 0;
  for (const path of paths) {
    const { missing } = await untilAllIn(accepted, deadline, async () => {
      const ok = rx.at(path).filter((r) => r.status !== undefined && r.status < 300);
      return new Set(ok.map((r) => seqOf(r.body)));
    });
    lost += missing.length;
    assert.equal(
      missing.length,
      0,
      `${path}: ${missing.length} of ${accepted.size} accepted writes not delivered (${missing.slice(0, 10)})`,
    );
  }
  // The log's rows go in up to HUB_POSTGRES_LOG_LINGER_MS after their events, which nothing on a
  // delivery's way waits for: the last writes' rows may land just after their deliveries.
  const { read: logged, missing } = await untilAllIn(accepted, deadline, () => eventLog(hub, user));
  assert.deepEqual(missing, [], `${missing.length} of ${accepted.size} accepted writes not in the event log`);
  let deliveries = 0;
  let duplicates = 0;
  for (const path of paths) {
    const seen = new Set<string>();
    for (const r of rx.at(path)) {
      const body = JSON.parse(r.body);
      const seq = body.data.changed.seq as string;
      assert.equal(
        body.id,
        logged.get(seq),
        `${path}: a delivery carries the logged event id of write ${seq}`,
      );
      deliveries++;
      if (seen.has(seq)) duplicates++;
      seen.add(seq);
    }
  }
  return { accepted: accepted.size, deliveries, duplicates, lost };
}

/** Reads every 250 ms until what is read holds every one of `wanted`, or `deadline` passes: the
 * last read, and those of `wanted` it does not hold. */
async function untilAllIn<T extends { has(key: string): boolean }>(
  wanted: Set<string>,
  deadline: number,
  readNow: () => Promise<T>,
): Promise<{ read: T; missing: string[] }> {
  for (;;) {
    const read = await readNow();
    const missing = [...wanted].filter((k) => !read.has(k));
    if (missing.length === 0 || Date.now() > deadline) return { read, missing };
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** The account's event log of device-meta changes: each write's `seq` → its event's id, asserting
 * that no write has two. */
async function eventLog(hub: TestHub, user: User): Promise<Map<string, string>> {
  const logged = new Map<string, string>();
  for (let skip = 0; ; skip += 500) {
    const page = await hub.call(
      'GET',
      `/webhooks/events?type=device.device_meta.updated&limit=500&skip=${skip}`,
      { token: user.token },
    );
    assert.equal(page.status, 200, JSON.stringify(page.body));
    for (const e of page.body.items) {
      const seq = e.data.changed.seq as string;
      assert.ok(!logged.has(seq) || logged.get(seq) === e.id, `write ${seq} has one event id`);
      logged.set(seq, e.id);
    }
    if (page.body.items.length < 500) return logged;
  }
}

export { endProcess };

/** Every read model of `readStore` equals a fresh replay of `store` into memory (compared whole). */
export async function assertReadModelsEqualReplay(store: EventStore, readStore: ReadStore): Promise<void> {
  const head = await store.head();
  for (const projection of projections) {
    const generation = await readStore.activeGeneration(projection.name, true);
    const deadline = Date.now() + 60_000;
    while ((await readStore.checkpoint(projection.name, generation)).position < head && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 200));
    const fresh = new MemoryReadStore();
    const replayed = await replayProjection({
      store,
      readStore: fresh,
      projection,
      logger: createLogger('warn'),
      owner: 'faults-audit',
      dropGraceMs: 0,
    });
    assert.deepEqual(
      await readStore.dump(projection.name, generation),
      await fresh.dump(projection.name, replayed.generation),
      `${projection.name} equals a fresh replay`,
    );
  }
}
