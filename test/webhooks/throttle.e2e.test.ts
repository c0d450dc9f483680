// A subscription's rate limit end to end on the embedded profile, measured at a real receiver: a
// burst of deliveries arrives no faster than `rate_limit`, and one without a limit at once; the
// field's bounds are refused with the JSON error. (The distributed profile, two dispatchers
// sharing the budget: distributed.int.test.ts.)
import assert from 'node:assert/strict';
import { signup, startHub, type TestHub, type User } from '../hub.ts';
import { assertKeepsRate, Receiver } from './receiver.ts';

describe('webhooks: throttle (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let rx: Receiver;
  let alice: User;

  const create = async (path: string, extra: Record<string, unknown> = {}) => {
    const r = await hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: { nick: path, url: `${rx.url}${path}`, event_types: ['device.created'], enabled: true, ...extra },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; rate_limit: number | null };
  };
  /** `count` test deliveries queued at once. */
  const burst = async (id: string, count: number) => {
    const answers = await Promise.all(
      Array.from({ length: count }, () => hub.call('POST', `/webhooks/${id}/test`, { token: alice.token })),
    );
    for (const r of answers) assert.equal(r.status, 202, JSON.stringify(r.body));
  };

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_WEBHOOK_MAX_IN_FLIGHT: '4',
    });
    alice = await signup(hub, 'alice');
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  it('a burst to a subscription limited to 5/s arrives no faster than 5/s; one unlimited at once', async () => {
    const limited = await create('/ok/limited', { rate_limit: 5 });
    assert.equal(limited.rate_limit, 5);
    const free = await create('/ok/free');
    assert.equal(free.rate_limit, null);
    // The dispatcher's HTTP thread starts at its first attempt and holds the attempts of that
    // moment until it runs, whatever their times: started first, it measures the throttle alone.
    await burst(free.id, 1);
    await rx.waitFor('/ok/free', 1);
    const started = Date.now();
    await Promise.all([burst(limited.id, 12), burst(free.id, 12)]);
    const unlimited = (await rx.waitFor('/ok/free', 13)).slice(1);
    const throttled = await rx.waitFor('/ok/limited', 12, 20_000);
    assertKeepsRate(
      throttled.map((r) => r.at),
      5,
    );
    // 12 at 5/s: the last 2.2 s after the first, and not held up much longer than that.
    assert.ok(Date.now() - started < 8000, `took ${Date.now() - started} ms`);
    const spread = Math.max(...unlimited.map((r) => r.at)) - Math.min(...unlimited.map((r) => r.at));
    assert.ok(spread < 1500, `the unlimited subscription's burst spread over ${spread} ms`);
    // Each delivered once, as its own attempt: waiting for a slot is no attempt.
    const log = await hub.call('GET', `/webhooks/${limited.id}/deliveries?limit=100`, { token: alice.token });
    assert.equal(log.body.total, 12);
    assert.equal(new Set(throttled.map((r) => r.headers['webhook-id'])).size, 12);
    const metrics = await hub.call('GET', '/metrics');
    assert.match(String(metrics.body), /^hub_webhook_throttled_total [1-9]\d*$/m);
  });

  it('PATCH sets and lifts the limit; out-of-bounds values are refused with a 422 naming the field', async () => {
    const sub = await create('/ok/patched');
    const set = await hub.call('PATCH', `/webhooks/${sub.id}`, {
      token: alice.token,
      body: { rate_limit: 2 },
    });
    assert.equal(set.status, 200, JSON.stringify(set.body));
    assert.equal(set.body.rate_limit, 2);
    const read = await hub.call('GET', `/webhooks/${sub.id}`, { token: alice.token });
    assert.equal(read.body.rate_limit, 2);
    for (const bad of [0, -1, 10_001, 1.5, '5', true]) {
      for (const [method, path] of [
        ['PATCH', `/webhooks/${sub.id}`],
        ['POST', '/webhooks/'],
      ] as const) {
        const body =
          method === 'POST'
            ? {
                nick: 'x',
                url: `${rx.url}/ok/x`,
                event_types: ['device.created'],
                enabled: true,
                rate_limit: bad,
              }
            : { rate_limit: bad };
        const r = await hub.call(method, path, { token: alice.token, body });
        assert.equal(r.status, 422, `${method} rate_limit ${JSON.stringify(bad)}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error, 'validation_failed', JSON.stringify(r.body));
        assert.ok(
          r.body.details.some((d: { field: string }) => d.field === 'rate_limit'),
          JSON.stringify(r.body),
        );
      }
    }
    assert.equal((await hub.call('GET', `/webhooks/${sub.id}`, { token: alice.token })).body.rate_limit, 2);
    const lifted = await hub.call('PATCH', `/webhooks/${sub.id}`, {
      token: alice.token,
      body: { rate_limit: null },
    });
    assert.equal(lifted.body.rate_limit, null);
    const doc = (await hub.call('GET', '/openapi.json')).body;
    const field =
      doc.paths['/webhooks/{id}'].patch.requestBody.content['application/json'].schema.properties.rate_limit;
    assert.deepEqual([field.type, field.minimum, field.maximum], [['integer', 'null'], 1, 10_000]);
  });
});
