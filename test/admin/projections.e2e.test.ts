// The operators' projection routes (/admin/projections) end to end, on both profiles: admins only
// (403 in the error shape otherwise), the listing, a replay started from the API that keeps reads
// answered while it runs and then switches the generation, 409 for a second one while the first
// holds its lease, 404 for an unknown name. Distributed: the API and the projector are separate
// processes, so the replay runs in the API process, not where the live runner is.
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from '../faults/cluster.ts';
import { deleteTopics, dropSchema, inSchema, redisDb, testConfig } from '../harness.ts';
import {
  createDevice,
  type Device,
  endProcess,
  type RoleProcess,
  signup,
  spawnRole,
  startHub,
  type TestHub,
  type User,
} from '../hub.ts';

/** Events of no interest to the devices projection, which its replay still reads: enough that
 * the replay runs for a while, so reads can be seen answered during it. */
const FILLER = 100_000;
const REDIS_DB = 10;

interface Profile {
  name: string;
  start(): Promise<{ hub: TestHub; stop(): Promise<void> }>;
}

const hubEnv = { HUB_REPLAY_DROP_GRACE_MS: '1500' };

const profiles: Profile[] = [
  {
    name: 'embedded',
    start: async () => {
      const hub = await startHub(hubEnv);
      return { hub, stop: () => hub.stop() };
    },
  },
  {
    name: 'distributed',
    start: async () => {
      const { postgresUrl, redisUrl } = testConfig();
      const id = randomBytes(4).toString('hex');
      const schema = `admin_${id}`;
      const isolatedRedis = redisDb(redisUrl, REDIS_DB);
      const redis = new Redis(isolatedRedis);
      await redis.flushdb();
      redis.disconnect();
      const port = await freePort();
      const env = {
        ...hubEnv,
        HUB_PROFILE: 'distributed',
        HUB_REDIS_URL: isolatedRedis,
        HUB_POSTGRES_URL: inSchema(postgresUrl, schema),
        HUB_KAFKA_PREFIX: `admin-${id}-`,
        HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-admin-')),
        HUB_PUBLIC_URL: `http://127.0.0.1:${port}`,
      };
      // The API in this process, the projector (the live runners, the mailer) in another.
      const hub = await startHub({ ...env, HUB_PORT: String(port) }, ['api']);
      let projector: RoleProcess | undefined;
      try {
        projector = await spawnRole('projector', { ...env, HUB_LOG_LEVEL: 'warn' });
      } catch (err) {
        await hub.stop();
        throw err;
      }
      return {
        hub,
        stop: async () => {
          await hub.stop();
          await endProcess(projector.child, 'SIGTERM');
          await dropSchema(postgresUrl, schema);
          await deleteTopics(testConfig().kafkaBrokers, `admin-${id}-`);
        },
      };
    },
  },
];

for (const profile of profiles) {
  describe(`/admin/projections on the ${profile.name} profile (e2e)`, function () {
    this.timeout(180_000);
    let running: { hub: TestHub; stop(): Promise<void> } | undefined;
    let hub: TestHub;
    let root: User;
    let alice: User;
    let device: Device;

    before(async () => {
      running = await profile.start();
      hub = running.hub;
      root = await signup(hub, 'root'); // HUB_ADMINS of the test hubs
      alice = await signup(hub, `alice${randomBytes(3).toString('hex')}`);
      device = await createDevice(hub, alice);
      // The admin's profile saved many times over: each event patches the account's record only.
      const accountId = root.prn.slice(root.prn.lastIndexOf('/') + 1);
      for (let i = 0; i < FILLER; i += 1000)
        await hub.node.store.append(
          `filler-${randomUUID()}`,
          Array.from({ length: 1000 }, (_, n) => ({
            id: randomUUID(),
            type: 'ProfileUpdated',
            data: { account_id: accountId, profile: { bio: `take ${i + n}` }, meta: {}, ovmode: null },
          })),
        );
      // The live runners caught up: a replay then starts from a settled model.
      const head = await hub.node.store.head();
      for (let i = 0; i < 600; i++) {
        const p = await hub.call('GET', '/admin/projections/devices', { token: root.token });
        if (p.body.checkpoint >= head) break;
        await new Promise((r) => setTimeout(r, 100));
      }
    });
    after(async () => {
      await running?.stop();
    });

    it('answers only admins: 401 without a token, 403 in the error shape for anyone else', async () => {
      for (const [method, path] of [
        ['GET', '/admin/projections'],
        ['GET', '/admin/projections/devices'],
        ['POST', '/admin/projections/devices/replay'],
      ] as const) {
        assert.equal((await hub.call(method, path)).status, 401, `${method} ${path} anonymous`);
        for (const token of [alice.token, device.token]) {
          const r = await hub.call(method, path, { token });
          assert.equal(r.status, 403, `${method} ${path}: ${JSON.stringify(r.body)}`);
          assert.equal(r.body.error, 'forbidden');
          assert.equal(r.body.code, 403);
          assert.match(r.body.message, /Only admins/);
          assert.ok(r.body.request_id);
        }
      }
      const unknown = await hub.call('GET', '/admin/projections/nope', { token: root.token });
      assert.equal(unknown.status, 404);
      assert.equal(unknown.body.error, 'not_found');
      const replayUnknown = await hub.call('POST', '/admin/projections/nope/replay', { token: root.token });
      assert.equal(replayUnknown.status, 404);
      assert.equal(replayUnknown.body.error, 'not_found');
    });

    it('lists every projection with its version, generation, checkpoint and lag', async () => {
      const r = await hub.call('GET', '/admin/projections', { token: root.token });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(
        r.body.items.map((p: { name: string }) => p.name),
        ['streams', 'accounts', 'apps', 'devices', 'webhooks'],
      );
      const devices = r.body.items.find((p: { name: string }) => p.name === 'devices');
      assert.equal(devices.version, 2);
      assert.match(devices.description, /\w/);
      assert.ok(devices.generation >= 1);
      assert.ok(devices.checkpoint > FILLER, 'caught up past the filler');
      assert.equal(devices.lag_events, devices.head - devices.checkpoint);
      assert.equal(typeof devices.lag_seconds, 'number');
      assert.equal(devices.replay, null);
    });

    it('replays in the background: reads answered throughout, progress to done, the generation switched; 409 meanwhile', async () => {
      const before = (await hub.call('GET', '/admin/projections/devices', { token: root.token })).body;
      // A reader of the devices read model (the listing) and of the device, all along.
      let reading = true;
      const reads: { status: number; listed: boolean; at: number }[] = [];
      const reader = (async () => {
        while (reading) {
          const list = await hub.call('GET', '/devices', { token: alice.token });
          const one = await hub.call('GET', `/devices/${device.id}`, { token: alice.token });
          reads.push({
            status: Math.max(list.status, one.status),
            listed: list.body.items?.some((d: { id: string }) => d.id === device.id) ?? false,
            at: Date.now(),
          });
          // Paced below the account's rate limit (HUB_RATE_LIMIT_PER_SECOND, 500 a second): a tight
          // loop on a fast hub spent its burst and met 429s, which say nothing of the replay.
          await new Promise((r) => setTimeout(r, 10));
        }
      })();

      const started = await hub.call('POST', '/admin/projections/devices/replay', { token: root.token });
      assert.equal(started.status, 202, JSON.stringify(started.body));
      assert.equal(started.headers.get('location'), '/admin/projections/devices');
      assert.equal(started.body.name, 'devices');
      assert.equal(started.body.generation, before.generation, 'reads stay on the active generation');
      assert.equal(started.body.replay.generation, before.generation + 1);
      assert.equal(started.body.replay.status, 'running');
      assert.ok(Date.parse(started.body.replay.started) > 0);
      assert.equal(started.body.replay.finished, null);

      const second = await hub.call('POST', '/admin/projections/devices/replay', { token: root.token });
      assert.equal(second.status, 409, JSON.stringify(second.body));
      assert.equal(second.body.error, 'conflict');
      assert.match(second.body.message, /already running/);

      const seen: { status: string; position: number; percent: number; at: number }[] = [];
      let last = started.body;
      for (let i = 0; i < 1200 && last.replay?.status !== 'done'; i++) {
        const p = await hub.call('GET', '/admin/projections/devices', { token: root.token });
        assert.equal(p.status, 200, JSON.stringify(p.body));
        last = p.body;
        seen.push({ ...last.replay, at: Date.now() });
        await new Promise((r) => setTimeout(r, 20));
      }
      reading = false;
      await reader;

      assert.equal(last.replay.status, 'done', JSON.stringify(last));
      assert.equal(last.replay.percent, 100);
      assert.ok(Date.parse(last.replay.finished) >= Date.parse(last.replay.started));
      assert.equal(last.generation, before.generation + 1, 'reads switched to the new generation');
      assert.ok(last.checkpoint >= before.checkpoint);
      // Progress was seen moving while it ran, and the position only grows.
      const runningPolls = seen.filter((s) => s.status === 'running');
      assert.ok(runningPolls.length >= 2, `polled while running: ${JSON.stringify(seen.slice(0, 5))}`);
      for (let i = 1; i < seen.length; i++)
        assert.ok(seen[i]!.position >= seen[i - 1]!.position, 'the position never goes back');
      // Every read answered, the device always listed; some of them while the replay ran.
      assert.ok(reads.length > 0);
      for (const r of reads) assert.deepEqual([r.status, r.listed], [200, true]);
      const lastRunning = runningPolls.at(-1)!.at;
      assert.ok(
        reads.some((r) => r.at > Date.parse(started.body.replay.started) && r.at < lastRunning),
        'a read answered while the replay ran',
      );
      // A new replay may start once the old generation is dropped.
      const after = await hub.call('GET', '/devices', { token: alice.token });
      assert.equal(after.status, 200);
      assert.equal(after.body.total, 1);
    });

    it('is published in /openapi.json with its responses and the admin scope', async () => {
      const doc = (await hub.call('GET', '/openapi.json')).body;
      const list = doc.paths['/admin/projections'].get;
      assert.deepEqual(list.security, [{ bearer: ['*'] }]);
      assert.ok(list.responses['200'].content['application/json'].schema.properties.items);
      assert.ok(list.responses['403']);
      const one = doc.paths['/admin/projections/{name}'].get;
      assert.ok(one.responses['404']);
      const replay = doc.paths['/admin/projections/{name}/replay'].post;
      assert.ok(replay.responses['202'].content['application/json'].schema.properties.replay);
      assert.ok(replay.responses['409']);
      assert.deepEqual(replay.security, [{ bearer: ['*'] }]);
    });
  });
}
