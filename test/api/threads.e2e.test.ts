// The embedded hub with its API on two threads (HUB_API_THREADS=2): what the threads share through
// the main thread. Every connection here is a new one, so the kernel spreads them over both
// threads. (CI also runs the whole e2e suite a second time this way.)
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { forRoles, type Role } from '../../hub/node.ts';
import { type JsonResponse, testConfig } from '../harness.ts';
import { createDevice, type Device, signup, startHub, type TestHub, type User } from '../hub.ts';

/** One request on a connection of its own. */
function fresh(
  url: string,
  method: string,
  path: string,
  o: { token?: string; body?: unknown } = {},
): Promise<{ status: number; body: JsonResponse['body']; text: string }> {
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
          resolve({ status: res.statusCode!, body: json, text });
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

  /** A hundred reports at once for one device, each on a connection of its own: every one is
   * answered 200 and kept. */
  async function hundredReports(on: TestHub, owner: User, d: Device): Promise<void> {
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

  it('a hundred concurrent reports for one device on many connections all succeed and lose nothing (each append checks the revision; a thread that loses a race gets the turn)', async () => {
    await hundredReports(hub, alice, device);
  });

  it('so they do on four threads, where several threads lose at once and wait in line for the turn', async () => {
    await onHub({ HUB_API_THREADS: '4', ...BURSTS }, async (four) => {
      const bob = await signup(four, 'bob');
      await hundredReports(four, bob, await createDevice(four, bob));
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
    // The rule startNode and the CLI share: threads for the API role of an embedded process only.
    const two = testConfig({ HUB_API_THREADS: '2' });
    assert.equal(forRoles(two, ['api', 'projector']).apiThreads, 2);
    assert.equal(forRoles(two, []).apiThreads, 0);
    assert.equal(
      forRoles(testConfig({ HUB_API_THREADS: '2', HUB_PROFILE: 'distributed' }), ['api']).apiThreads,
      0,
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
