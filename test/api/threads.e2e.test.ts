// A hub with its API on two threads (HUB_API_THREADS=2): what the threads share through the main
// thread, in the embedded profile and in a distributed API process beside another. Every
// connection here is a new one, so the kernel spreads them over both threads. (CI also runs the
// whole e2e suite a second time this way.)
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { randomBytes, webcrypto } from 'node:crypto';
import { once } from 'node:events';
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { Worker } from 'node:worker_threads';
import * as x509 from '@peculiar/x509';
import { Redis } from 'ioredis';
import { forRoles, type Role } from '../../hub/node.ts';
import { autoApiThreads } from '../../infra/config.ts';
import { deleteTopics, dropSchema, inSchema, type JsonResponse, redisDb, testConfig } from '../harness.ts';
import { createDevice, type Device, signup, startHub, type TestHub, type User } from '../hub.ts';

/** One request on a connection of its own. */
function fresh(
  url: string,
  method: string,
  path: string,
  o: { token?: string; body?: unknown } = {},
): Promise<{ status: number; body: JsonResponse['body']; text: string; headers: IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const body = o.body === undefined ? undefined : JSON.stringify(o.body);
    const req = httpRequest(
      `${url}${path}`,
      {
        method,
        agent: false,
        headers: {
          ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => (text += c));
        res.on('end', () => {
          const json =
            (res.headers['content-type'] ?? '').includes('json') && text ? JSON.parse(text) : undefined;
          resolve({ status: res.statusCode!, body: json, text, headers: res.headers });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** Room for a hundred requests at once from one caller. */
const BURSTS = { HUB_RATE_LIMIT_PER_SECOND: '5', HUB_RATE_LIMIT_BURST: '2000' };

/** A hub of the test's own (the API and projector roles unless told), stopped when `run` is done. */
async function onHub(
  env: Record<string, string>,
  run: (hub: TestHub) => Promise<void>,
  roles?: Role[],
): Promise<void> {
  const hub = await startHub(env, roles);
  try {
    await run(hub);
  } finally {
    await hub.stop();
  }
}

/** A hundred reports at once for one device, each on a connection of its own: every one is
 * answered 200 and kept. */
async function hundredReportsOn(on: TestHub, owner: User, d: Device): Promise<void> {
  const reports = await Promise.all(
    Array.from({ length: 100 }, (_, i) =>
      fresh(on.url, 'PATCH', `/devices/${d.id}/device-meta`, {
        token: d.token,
        body: { [`k${i}`]: String(i) },
      }),
    ),
  );
  assert.deepEqual(
    reports.map((r) => r.status),
    reports.map(() => 200),
  );
  const read = await fresh(on.url, 'GET', `/devices/${d.id}`, { token: owner.token });
  assert.deepEqual(
    read.body['device-meta'],
    Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, String(i)])),
  );
}

describe('API threads (e2e)', () => {
  let hub: TestHub;
  let alice: User;
  let device: Device;

  before(async () => {
    hub = await startHub({ HUB_API_THREADS: '2', ...BURSTS });
    alice = await signup(hub, 'alice');
    device = await createDevice(hub, alice);
  });
  after(() => hub.stop());

  it('a hundred concurrent reports for one device on many connections all succeed and lose nothing (each append checks the revision; a thread that loses a race gets the turn)', async () => {
    await hundredReportsOn(hub, alice, device);
  });

  it('so they do on four threads, where several threads lose at once and wait in line for the turn', async () => {
    await onHub({ HUB_API_THREADS: '4', ...BURSTS }, async (four) => {
      const bob = await signup(four, 'bob');
      await hundredReportsOn(four, bob, await createDevice(four, bob));
    });
  });

  it("a device's reports are answered while the main thread is busy: appends go straight to the event store's writer thread, a report that changes nothing is checked against the heads it shares, and each thread hears of the other's appends", async () => {
    await onHub({ HUB_API_THREADS: '2', HUB_RATE_LIMIT_PER_SECOND: '0' }, async (two) => {
      const bob = await signup(two, 'bob');
      const d = await createDevice(two, bob);
      // Reports from a thread of their own, each on a connection of its own (either API thread
      // takes it), 50 ms apart: the news of an append reaches the other thread within 20 ms. Every
      // other report repeats the one before: it changes nothing.
      const reports = (n: number, answeredAt: Float64Array) =>
        new Worker(
          `const { workerData: { url, token, n, answeredAt } } = require('node:worker_threads');
          (async () => {
            for (let i = 0; i < n; i++) {
              const res = await fetch(url, { method: 'PATCH', body: JSON.stringify({ n: String(Math.floor(i / 2)) }),
                headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json', connection: 'close' } });
              answeredAt[i] = res.status === 200 ? Date.now() : -res.status;
              await new Promise((r) => setTimeout(r, 50));
            }
          })();`,
          {
            eval: true,
            workerData: { url: `${two.url}/devices/${d.id}/device-meta`, token: d.token, n, answeredAt },
          },
        );
      const conflicts = async () =>
        Number(
          /^hub_eventstore_append_duration_seconds_count\{outcome="conflict"\} (\d+)/m.exec(
            (await fresh(two.url, 'GET', '/metrics')).text,
          )?.[1] ?? 0,
        );
      // Both threads have met the device and its caller (20 connections, each to either thread).
      const warm = new Float64Array(new SharedArrayBuffer(8 * 20));
      await once(reports(20, warm), 'exit');
      assert.ok(warm.every((at) => at > 0));

      const answeredAt = new Float64Array(new SharedArrayBuffer(8 * 5));
      const worker = reports(5, answeredAt);
      const busyUntil = Date.now() + 1500;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500); // the main thread stands still
      assert.deepEqual(
        [...answeredAt].map((at) => at > 0 && at < busyUntil),
        [true, true, true, true, true],
      );
      await once(worker, 'exit');
      assert.equal(await conflicts(), 0);
      const read = await fresh(two.url, 'GET', `/devices/${d.id}`, { token: bob.token });
      assert.deepEqual(read.body['device-meta'], { n: '2' });
    });
  });

  it("should the event store's writer thread end, the threads' writes go through the main thread, which starts a writer again", async () => {
    await onHub({ HUB_API_THREADS: '2', HUB_RATE_LIMIT_PER_SECOND: '0' }, async (two) => {
      const carol = await signup(two, 'carol');
      const d = await createDevice(two, carol);
      const report = (n: number) =>
        fresh(two.url, 'PATCH', `/devices/${d.id}/device-meta`, { token: d.token, body: { n: String(n) } });
      for (let i = 0; i < 10; i++) assert.equal((await report(i)).status, 200);
      // As a crash would (the store keeps its thread to itself): the threads' ports to it close.
      const store = (two.node.store as unknown as { inner: { thread: Worker } }).inner;
      await store.thread.terminate();
      await new Promise((r) => setTimeout(r, 100));
      for (let i = 10; i < 30; i++) assert.equal((await report(i)).status, 200);
      assert.notEqual(store.thread, undefined, 'a new writer thread');
      const read = await fresh(two.url, 'GET', `/devices/${d.id}`, { token: carol.token });
      assert.deepEqual(read.body['device-meta'], { n: '29' });
    });
  });

  it('a write answered on one connection is read on the next, whichever thread takes it', async () => {
    for (let i = 0; i < 10; i++) {
      const put = await fresh(hub.url, 'PUT', `/devices/${device.id}/user-meta`, {
        token: alice.token,
        body: { round: String(i) },
      });
      assert.equal(put.status, 200);
      const list = await fresh(hub.url, 'GET', '/devices', { token: alice.token });
      assert.equal(list.status, 200);
      assert.deepEqual(list.body.items[0]['user-meta'], { round: String(i) });
    }
  });

  it('/metrics counts the requests of every thread, and the process metrics once', async () => {
    const before = await fresh(hub.url, 'GET', '/metrics');
    const count = (text: string) =>
      Number(
        /hub_http_request_duration_seconds_count\{[^}]*route="\/healthz"[^}]*\} (\d+)/.exec(text)?.[1] ?? 0,
      );
    for (let i = 0; i < 40; i++) assert.equal((await fresh(hub.url, 'GET', '/healthz')).status, 200);
    const after = await fresh(hub.url, 'GET', '/metrics');
    assert.equal(count(after.text) - count(before.text), 40);
    assert.equal(after.text.match(/^# TYPE hub_process_cpu_seconds_total /gm)?.length, 1);
    assert.match(after.text, /^hub_eventstore_append_duration_seconds_count/m);
  });

  it('the rate limit is one budget per caller for the whole process', async () => {
    await onHub(
      { HUB_API_THREADS: '2', HUB_RATE_LIMIT_PER_SECOND: '1', HUB_RATE_LIMIT_BURST: '10' },
      async (limited) => {
        const statuses = await Promise.all(
          Array.from({ length: 30 }, () => fresh(limited.url, 'GET', '/openapi.json').then((r) => r.status)),
        );
        // 10 tokens, and perhaps one more refilled meanwhile: two threads on their own would allow 20.
        const allowed = statuses.filter((s) => s === 200).length;
        assert.ok(allowed >= 10 && allowed <= 11, `allowed ${allowed}`);
        assert.equal(statuses.filter((s) => s === 429).length, 30 - allowed);
      },
    );
  });

  it("the threads' log lines reach the process's logger, secrets redacted", async () => {
    await fresh(hub.url, 'POST', '/auth/login', {
      body: { username: 'alice', password: 'wrong-password-here' },
    });
    const lines = hub.logs().filter((l) => l.includes('"msg":"request"'));
    assert.ok(lines.some((l) => l.includes('"route":"/auth/login"')));
    assert.ok(!hub.logs().some((l) => l.includes('wrong-password-here')));
  });

  it('a process without the API role starts no threads: its event store stays its own', async () => {
    assert.equal(hub.node.store.exclusiveWriter, false); // the hub above: threads append too
    // The rule startNode and the CLI share: threads for a process with the API role only.
    const two = testConfig({ HUB_API_THREADS: '2' });
    assert.equal(forRoles(two, ['api', 'projector']).apiThreads, 2);
    assert.equal(forRoles(two, []).apiThreads, 0);
    assert.equal(
      forRoles(testConfig({ HUB_API_THREADS: '2', HUB_PROFILE: 'distributed' }), ['processor']).apiThreads,
      0,
    );
    // auto: a distributed process with other roles leaves a core to its main thread; `hub api` not.
    const auto = testConfig({ HUB_API_THREADS: 'auto', HUB_PROFILE: 'distributed' });
    assert.equal(forRoles(auto, ['api']).apiThreads, autoApiThreads('distributed', ['api']));
    assert.equal(
      forRoles(auto, ['api', 'projector', 'processor', 'dispatcher']).apiThreads,
      autoApiThreads('distributed', ['api', 'processor']),
    );
    await onHub(
      { HUB_API_THREADS: '2' },
      async (projector) => {
        assert.equal(projector.node.store.exclusiveWriter, true);
        assert.equal((await fresh(projector.url, 'GET', '/healthz')).status, 200);
      },
      ['projector'],
    );
  });

  it('readiness asks the main thread', async () => {
    const ready = await fresh(hub.url, 'GET', '/readyz');
    assert.equal(ready.status, 200);
    assert.deepEqual(Object.keys(ready.body.checks).sort(), ['eventstore', 'projections', 'schedule']);
  });
});

x509.cryptoProvider.set(webcrypto as never);
const CSR_ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
/** A Redis database no other test file uses: emptied, then shared by the two API processes. */
const REDIS_DB = 7;

describe('a distributed API process on two threads, beside another on its main thread (e2e)', function () {
  this.timeout(120_000);
  const { postgresUrl, redisUrl, kafkaBrokers } = testConfig();
  const id = randomBytes(4).toString('hex');
  const schema = `threads_${id}`;
  const redis = new Redis(redisDb(redisUrl, REDIS_DB));
  let threaded: TestHub;
  let plain: TestHub;
  let alice: User;

  before(async () => {
    await redis.flushdb();
    const env = {
      HUB_PROFILE: 'distributed',
      HUB_REDIS_URL: redisDb(redisUrl, REDIS_DB),
      HUB_POSTGRES_URL: inSchema(postgresUrl, schema),
      HUB_KAFKA_PREFIX: `threads-${id}-`,
      ...BURSTS,
    };
    // The API on two threads and the projector (the mailer) in one process; the API alone on its
    // main thread in the other. No HUB_JWT_PRIVATE_KEY: the key is the one shared through Redis.
    threaded = await startHub({ ...env, HUB_API_THREADS: '2' }, ['api', 'projector']);
    plain = await startHub({ ...env, HUB_API_THREADS: '0' }, ['api']);
    alice = await signup(threaded, 'alice'); // the emailed link, signed by the mailer, verified on a thread
  });
  after(async () => {
    await plain?.stop();
    await threaded?.stop();
    redis.disconnect();
    await dropSchema(postgresUrl, schema);
    await deleteTopics(kafkaBrokers, `threads-${id}-`);
  });

  it('the threads sign and seal with the key the processes share: tokens and device secrets work in either process', async () => {
    assert.equal(threaded.node.store.exclusiveWriter, false);
    const device = await createDevice(threaded, alice); // its secret sealed on a thread
    const login = await fresh(plain.url, 'POST', '/auth/login', {
      body: { username: device.prn, password: device.secret },
    });
    assert.equal(login.status, 200, login.text);
    const fromPlain = await fresh(threaded.url, 'GET', `/devices/${device.id}`, { token: login.body.token });
    assert.equal(fromPlain.status, 200, fromPlain.text);
    assert.equal((await fresh(plain.url, 'GET', '/devices', { token: alice.token })).status, 200);
  });

  it('a thread issues device certificates with the CA the processes share (Redis), not one of its own', async () => {
    const keys = (await webcrypto.subtle.generateKey(CSR_ALG, true, [
      'sign',
      'verify',
    ])) as webcrypto.CryptoKeyPair;
    const csr = await x509.Pkcs10CertificateRequestGenerator.create({
      name: 'CN=sensor',
      keys: keys as never,
      signingAlgorithm: CSR_ALG,
    });
    const r = await fresh(threaded.url, 'POST', '/devices/register', {
      token: alice.token,
      body: { csr: csr.toString('pem'), 'device-name': 'sensor' },
    });
    assert.equal(r.status, 200, r.text);
    const shared = JSON.parse((await redis.get('hub:keys:device-ca'))!) as { cert: string };
    const ca = new x509.X509Certificate(shared.cert);
    const cert = new x509.X509Certificate(r.body.certificate);
    assert.ok(await cert.verify({ publicKey: await ca.publicKey.export() }));
  });

  it('a write answered on a thread is remembered where every API process reads it (read-your-writes)', async () => {
    const device = await createDevice(threaded, alice);
    for (let i = 0; i < 5; i++) {
      const put = await fresh(threaded.url, 'PATCH', `/devices/${device.id}/device-meta`, {
        token: device.token,
        body: { round: String(i) },
      });
      assert.equal(put.status, 200, put.text);
      const recorded = await redis.keys('hub:rw:*');
      const own = recorded.find((k) => k.includes(device.id));
      assert.ok(own, `no last write of the device among ${recorded.join(', ')}`);
      const position = Number(put.headers['x-hub-position']);
      assert.ok(position > 0 && Number(await redis.get(own)) >= position);
      const read = await fresh(plain.url, 'GET', `/devices/${device.id}`, { token: device.token });
      assert.deepEqual(read.body['device-meta'], { round: String(i) });
    }
  });

  it('a hundred concurrent reports for one device on many connections all succeed and lose nothing', async () => {
    await hundredReportsOn(threaded, alice, await createDevice(threaded, alice));
  });
});
