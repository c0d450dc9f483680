// Graceful shutdown of every role, each its own process on the real PostgreSQL, Redis and Kafka:
// under a steady load of device-meta writes, each role in turn gets SIGTERM, must exit 0 within
// HUB_SHUTDOWN_TIMEOUT_MS, and is started again. Afterwards every accepted write has exactly one
// event in the account's log, and the receiver got every one of those events (duplicates only
// with the same event id).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { request, testConfig } from '../harness.ts';
import { endProcess, type RoleProcess, remoteHub, signup, spawnRole } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';

const SHUTDOWN_BOUND_MS = 15_000;
const RATE = 80; // writes per second, across the devices
const DEVICES = 8;

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe('graceful shutdown of every role under load (int)', function () {
  this.timeout(180_000);
  const roles = new Map<string, RoleProcess>();
  let rx: Receiver;
  let env: Record<string, string>;

  before(async () => {
    rx = await new Receiver().start();
    // Isolated: a Redis database, a PostgreSQL schema and Kafka names of its own.
    const base = testConfig();
    const id = randomBytes(4).toString('hex');
    const redisUrl = `${base.redisUrl.replace(/\/\d*$/, '')}/12`;
    const redis = new Redis(redisUrl);
    await redis.flushdb();
    redis.disconnect();
    const apiPort = await freePort();
    env = {
      HUB_PROFILE: 'distributed',
      HUB_REDIS_URL: redisUrl,
      HUB_POSTGRES_URL: `${base.postgresUrl}${base.postgresUrl.includes('?') ? '&' : '?'}schema=drain_${id}`,
      HUB_KAFKA_PREFIX: `drain-${id}-`,
      HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-drain-')),
      HUB_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_BOUND_MS),
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_LOGIN_LIMIT_PER_MINUTE: '100000',
      HUB_PUBLIC_URL: `http://127.0.0.1:${apiPort}`,
    };
    roles.set('api', await spawnRole('api', { ...env, HUB_PORT: String(apiPort) }));
    for (const role of ['projector', 'processor', 'dispatcher']) roles.set(role, await spawnRole(role, env));
  });
  after(async () => {
    await Promise.all([...roles.values()].map((r) => endProcess(r.child, 'SIGKILL')));
    await rx.stop();
  });

  it('SIGTERM drains each role with exit 0; every accepted write is delivered after the restarts', async () => {
    const api = roles.get('api')!.url;
    const hub = remoteHub(api, env.HUB_DATA_DIR!);
    const alice = await signup(hub, `drain${Date.now().toString(36)}`);
    const sub = await hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: {
        nick: 'drain',
        url: `${rx.url}/ok/drain`,
        event_types: ['device.device_meta.updated'],
        enabled: true,
      },
    });
    assert.equal(sub.status, 201, JSON.stringify(sub.body));
    const devices: { id: string; token: string }[] = [];
    for (let i = 0; i < DEVICES; i++) {
      const d = await hub.call('POST', '/devices', { token: alice.token, body: {} });
      assert.ok(d.status < 300, JSON.stringify(d.body));
      const login = await hub.call('POST', '/auth/login', {
        body: { username: d.body.prn, password: d.body.secret },
      });
      devices.push({ id: d.body.id, token: login.body.token });
    }

    // The load: one write every 1/RATE s, each a new value; only 200 answers count as accepted.
    const accepted = new Set<string>();
    let refused = 0;
    let sent = 0;
    let loading = true;
    const load = (async () => {
      const inflight: Promise<void>[] = [];
      const started = Date.now();
      while (loading) {
        for (; sent < ((Date.now() - started) / 1000) * RATE; sent++) {
          const seq = String(sent);
          const d = devices[sent % DEVICES]!;
          inflight.push(
            request(`${api}/devices/${d.id}/device-meta`, {
              method: 'PATCH',
              body: { seq },
              headers: { authorization: `Bearer ${d.token}` },
            }).then(
              (r) => {
                if (r.status === 200) accepted.add(seq);
                else refused++;
              },
              () => {
                refused++; // not accepted: the API was restarting
              },
            ),
          );
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      await Promise.all(inflight);
    })();

    // Each role in turn: SIGTERM mid-load, a clean exit within the bound, a new process.
    const drains: Record<string, { code: number | null; ms: number }> = {};
    for (const role of ['processor', 'dispatcher', 'projector', 'api']) {
      await new Promise((r) => setTimeout(r, 1500));
      const before = accepted.size;
      drains[role] = await endProcess(roles.get(role)!.child, 'SIGTERM');
      const port = role === 'api' ? new URL(api).port : '0';
      roles.set(role, await spawnRole(role, { ...env, HUB_PORT: port }));
      for (let i = 0; i < 100 && accepted.size <= before; i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok(accepted.size > before, `writes are accepted again after ${role} restarted`);
    }
    await new Promise((r) => setTimeout(r, 1500));
    loading = false;
    await load;
    for (const [role, d] of Object.entries(drains)) {
      assert.equal(d.code, 0, `${role} exits 0 on SIGTERM: ${roles.get(role)!.output().slice(-1500)}`);
      assert.ok(d.ms < SHUTDOWN_BOUND_MS, `${role} drained in ${d.ms} ms`);
    }
    assert.ok(accepted.size > RATE * 5, `${accepted.size} writes accepted of ${sent} (${refused} refused)`);

    // Every role serves its own metrics.
    const ownMetric = {
      api: 'hub_http_request_duration_seconds_count',
      projector: 'hub_projection_events_applied_total',
      processor: 'hub_processor_changes_total',
      dispatcher: 'hub_webhook_attempts_total',
    };
    for (const [role, metric] of Object.entries(ownMetric)) {
      const r = await fetch(`${roles.get(role)!.url}/metrics`);
      assert.equal(r.status, 200, `${role} serves /metrics`);
      assert.match(await r.text(), new RegExp(`^${metric}`, 'm'), `${role} exposes ${metric}`);
    }

    // Every accepted write reaches the receiver.
    const seqOf = (body: string) => JSON.parse(body).data.changed.seq as string | undefined;
    const deadline = Date.now() + 90_000;
    let delivered = new Set<string>();
    while (Date.now() < deadline) {
      delivered = new Set(rx.at('/ok/drain').map((r) => seqOf(r.body)!));
      if ([...accepted].every((s) => delivered.has(s))) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    process.stderr.write(
      `drain: ${JSON.stringify(drains)} accepted ${accepted.size} of ${sent}, refused ${refused}, deliveries ${rx.at('/ok/drain').length}\n`,
    );
    const lost = [...accepted].filter((s) => !delivered.has(s));
    assert.deepEqual(lost, [], `${lost.length} of ${accepted.size} accepted writes not delivered`);

    // By event id: each accepted write has one event in the log; every delivery carries its id.
    const logged = new Map<string, string>(); // seq → event id
    for (let skip = 0; ; skip += 500) {
      const page = await hub.call(
        'GET',
        `/webhooks/events?type=device.device_meta.updated&limit=500&skip=${skip}`,
        { token: alice.token },
      );
      assert.equal(page.status, 200, JSON.stringify(page.body));
      for (const e of page.body.items) {
        const seq = e.data.changed.seq as string;
        assert.ok(!logged.has(seq) || logged.get(seq) === e.id, `write ${seq} has one event id`);
        logged.set(seq, e.id);
      }
      if (page.body.items.length < 500) break;
    }
    for (const seq of accepted) assert.ok(logged.has(seq), `write ${seq} is in the event log`);
    for (const r of rx.at('/ok/drain')) {
      const body = JSON.parse(r.body);
      assert.equal(body.id, logged.get(body.data.changed.seq), 'a delivery carries the logged event id');
    }
  });
});
