// The webhooks service end to end on the embedded profile, with real HTTP receivers: signatures
// checked independently of the signing code, rotation, every status class, a retry schedule run to
// dead-letter, replay, redeliver and test in the logs, paused, deleted and filtered subscriptions,
// and a hanging receiver that does not slow another subscription.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:net';
import { verifyWebhook, WebhookVerificationError } from '../../processors/delivery/signing.ts';
import { delegated, serviceAccount, signup, startHub, type TestHub, type User } from '../hub.ts';
import { Receiver } from './receiver.ts';

/** The signature as a receiver computes it from the specification alone. */
const hmac = (secret: string, id: string, ts: string, body: string) =>
  createHmac('sha256', secret).update(`${id}.${ts}.${body}`).digest('hex');

describe('webhooks (e2e)', function () {
  this.timeout(90_000);
  let hub: TestHub;
  let rx: Receiver;
  let alice: User;
  let bob: User;

  const create = async (path: string, extra: Record<string, unknown> = {}, user = alice) => {
    const r = await hub.call('POST', '/webhooks/', {
      token: user.token,
      body: {
        nick: path,
        url: `${rx.url}${path}`,
        event_types: ['device.device_meta.updated'],
        enabled: true,
        ...extra,
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; secret: string };
  };
  const test = async (id: string) => {
    const r = await hub.call('POST', `/webhooks/${id}/test`, { token: alice.token });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    return r.body.jobs[0].job_id as string;
  };
  const attempts = async (id: string, count: number, query = '') => {
    const deadline = Date.now() + 20_000;
    for (;;) {
      const r = await hub.call('GET', `/webhooks/${id}/deliveries?limit=100${query}`, { token: alice.token });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      if (r.body.items.length >= count || Date.now() > deadline) return r.body.items.reverse();
      await new Promise((r) => setTimeout(r, 50));
    }
  };

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_WEBHOOK_TIMEOUT_MS: '1500',
      HUB_WEBHOOK_MAX_IN_FLIGHT: '4',
      HUB_WEBHOOK_ROTATION_WINDOW_S: '3',
    });
    alice = await signup(hub, 'alice');
    bob = await signup(hub, 'bob');
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  describe('subscriptions', () => {
    it('creates with the secret shown once; reads, lists, patches and replaces without it', async () => {
      const s = await create('/ok/crud', { description: 'first', custom_headers: { 'X-Team': 'ops' } });
      assert.match(s.secret, /^whsec_/);
      const one = await hub.call('GET', `/webhooks/${s.id}`, { token: alice.token });
      assert.equal(one.status, 200);
      assert.equal(one.body.secret, undefined);
      assert.deepEqual(one.body.custom_headers, { 'X-Team': 'ops' });
      const list = await hub.call('GET', '/webhooks/?limit=100', { token: alice.token });
      assert.ok(list.body.items.some((w: { id: string }) => w.id === s.id));
      assert.ok(list.body.items.every((w: { secret?: string }) => w.secret === undefined));
      const patched = await hub.call('PATCH', `/webhooks/${s.id}`, {
        token: alice.token,
        body: { enabled: false },
      });
      assert.equal(patched.status, 200);
      assert.equal(patched.body.enabled, false);
      assert.equal(patched.body.description, 'first');
      const replaced = await hub.call('PUT', `/webhooks/${s.id}`, {
        token: alice.token,
        body: { nick: 'n2', url: `${rx.url}/ok/crud`, event_types: ['step.created'], enabled: true },
      });
      assert.equal(replaced.status, 200);
      assert.equal(replaced.body.description, '');
      assert.deepEqual(replaced.body.custom_headers, {});
      assert.equal(JSON.stringify(hub.answers).includes(s.secret), true); // only in the creation answer
      assert.equal(hub.answers.filter((a) => a.includes(s.secret)).length, 1);
    });

    it('refuses reserved headers, unsafe URLs and out-of-bounds retry policies with 422, storing nothing', async () => {
      const bad = async (body: Record<string, unknown>, field: string) => {
        const r = await hub.call('POST', '/webhooks/', {
          token: alice.token,
          body: { nick: 'x', url: `${rx.url}/ok`, event_types: ['device.created'], enabled: true, ...body },
        });
        assert.equal(r.status, 422, JSON.stringify(r.body));
        assert.ok(
          r.body.details.some((d: { field: string }) => d.field.includes(field)),
          JSON.stringify(r.body),
        );
      };
      const before = (await hub.call('GET', '/webhooks/', { token: alice.token })).body.total;
      await bad({ custom_headers: { 'Webhook-Id': 'x' } }, 'custom_headers');
      await bad({ custom_headers: { 'user-agent': 'x' } }, 'custom_headers');
      await bad({ custom_headers: { 'X-Team': '日本' } }, 'custom_headers'); // not sendable in HTTP/1.1
      await bad({ custom_headers: { 'X-Team': 'a\u0000b' } }, 'custom_headers');
      await bad({ custom_headers: JSON.parse('{"__proto__":"x"}') }, 'custom_headers.__proto__');
      await bad({ url: 'http://10.1.2.3/hook' }, 'url');
      await bad({ url: 'http://169.254.169.254/latest/meta-data' }, 'url');
      await bad({ url: 'ftp://example.com/' }, 'url');
      await bad({ retry_policy: { max_attempts: 50, delays_s: [1] } }, 'retry_policy');
      await bad({ retry_policy: { max_attempts: 3, delays_s: [0] } }, 'retry_policy');
      await bad({ event_types: ['device.exploded'] }, 'event_types');
      await bad({ event_types: ['device.created', 'device.created'] }, 'event_types');
      await bad({ retry_policy: { max_attempts: 3, delays_s: [] } }, 'retry_policy.delays_s');
      assert.equal((await hub.call('GET', '/webhooks/', { token: alice.token })).body.total, before);
      // The two are in the published schema too, so that a client can check them before sending.
      const doc = (await hub.call('GET', '/openapi.json')).body;
      const fields = doc.paths['/webhooks/'].post.requestBody.content['application/json'].schema.properties;
      assert.equal(fields.event_types.uniqueItems, true);
      assert.deepEqual(fields.retry_policy.then, { properties: { delays_s: { minItems: 1 } } });
      const single = await hub.call('POST', '/webhooks/', {
        token: alice.token,
        body: {
          nick: 'one-try',
          url: `${rx.url}/ok`,
          event_types: ['device.created'],
          enabled: true,
          retry_policy: { max_attempts: 1, delays_s: [] },
        },
      });
      assert.equal(single.status, 201, 'one attempt needs no delay');
      await hub.call('DELETE', `/webhooks/${single.body.id}`, { token: alice.token });
    });

    it('concurrent PATCHes of different fields both hold: none writes back what it read before the other', async () => {
      const s = await create('/ok/concurrent', { description: 'before' });
      for (let round = 0; round < 10; round++) {
        const [paused, described] = await Promise.all([
          hub.call('PATCH', `/webhooks/${s.id}`, { token: alice.token, body: { enabled: round % 2 === 1 } }),
          hub.call('PATCH', `/webhooks/${s.id}`, { token: alice.token, body: { description: `d${round}` } }),
        ]);
        assert.equal(paused.status, 200, JSON.stringify(paused.body));
        assert.equal(described.status, 200, JSON.stringify(described.body));
        const now = (await hub.call('GET', `/webhooks/${s.id}`, { token: alice.token })).body;
        assert.deepEqual([now.enabled, now.description], [round % 2 === 1, `d${round}`], `round ${round}`);
      }
    });

    it('a subscription whose URL no longer passes the checks can still be paused and edited; a new URL is checked', async () => {
      // Made where plain HTTP to the loopback is allowed, then the same data served by a hub with
      // the default rules: as when a receiver's name stops resolving or now points inside.
      const first = await startHub({
        HUB_WEBHOOK_ALLOW_HTTP: 'true',
        HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      });
      let second: TestHub | undefined;
      try {
        const carol = await signup(first, 'carol');
        const made = await first.call('POST', '/webhooks/', {
          token: carol.token,
          body: { nick: 'old', url: `${rx.url}/ok/old`, event_types: ['device.created'], enabled: true },
        });
        assert.equal(made.status, 201, JSON.stringify(made.body));
        await first.stop();
        second = await startHub({ HUB_DATA_DIR: first.dataDir });
        const patch = (body: Record<string, unknown>) =>
          second!.call('PATCH', `/webhooks/${made.body.id}`, { token: carol.token, body });
        const paused = await patch({ enabled: false });
        assert.equal(paused.status, 200, JSON.stringify(paused.body));
        assert.equal(paused.body.enabled, false);
        assert.equal((await patch({ description: 'kept', url: `${rx.url}/ok/old` })).status, 200);
        const moved = await patch({ url: `${rx.url}/ok/new` });
        assert.equal(moved.status, 422, JSON.stringify(moved.body));
        assert.equal(moved.body.details[0].field, 'url');
        const now = await second.call('GET', `/webhooks/${made.body.id}`, { token: carol.token });
        assert.deepEqual(
          [now.body.url, now.body.enabled, now.body.description],
          [`${rx.url}/ok/old`, false, 'kept'],
        );
      } finally {
        await first.stop().catch(() => {});
        await second?.stop();
      }
    });

    it('a page query out of bounds, or a query parameter it does not take, is a 422', async () => {
      const s = await create('/ok/pages');
      for (const path of [
        `/webhooks/${s.id}/deliveries?skip=1e21`,
        `/webhooks/${s.id}/deliveries?skip=10000000000000000000`,
        '/webhooks/?skip=1e21',
        '/webhooks/events?skip=9223372036854775808',
        `/webhooks/${s.id}/deliveries?limit=0`,
        // A misspelt filter is refused, not ignored (it would list everything).
        `/webhooks/${s.id}/deliveries?state=failed`,
        '/webhooks/events?typ=device.created',
        '/webhooks/?page=2',
      ]) {
        const r = await hub.call('GET', path, { token: alice.token });
        assert.equal(r.status, 422, `${path}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error, 'validation_failed');
      }
      const max = await hub.call('GET', `/webhooks/${s.id}/deliveries?skip=1000000000`, {
        token: alice.token,
      });
      assert.deepEqual([max.status, max.body.items], [200, []]);
    });

    it('another account gets 404 for every operation on a subscription; no token gets 401', async () => {
      const s = await create('/ok/tenancy');
      assert.equal((await hub.call('GET', `/webhooks/${s.id}`, { token: bob.token })).status, 404);
      assert.equal((await hub.call('DELETE', `/webhooks/${s.id}`, { token: bob.token })).status, 404);
      assert.equal((await hub.call('POST', `/webhooks/${s.id}/test`, { token: bob.token })).status, 404);
      assert.equal((await hub.call('GET', `/webhooks/${s.id}/deliveries`, { token: bob.token })).status, 404);
      assert.equal((await hub.call('GET', '/webhooks/')).status, 401);
    });
  });

  describe('delivery', () => {
    it('signs as the specification says: verified by a plain HMAC and by verifyWebhook', async () => {
      const s = await create('/ok/signed', { custom_headers: { 'X-Team': 'ops' } });
      await test(s.id);
      const [r] = await rx.waitFor('/ok/signed', 1);
      const h = r!.headers as Record<string, string>;
      assert.equal(h['content-type'], 'application/json');
      assert.match(h['user-agent']!, /^Hub-Webhooks\/\d+\.\d+\.\d+$/);
      assert.equal(h['x-team'], 'ops');
      assert.match(h['webhook-id']!, /^del_/);
      const payload = JSON.parse(r!.body);
      assert.equal(payload.request_id, h['webhook-id']);
      assert.equal(payload.livemode, false);
      assert.deepEqual(Object.keys(payload).sort(), [
        'api_version',
        'created',
        'data',
        'id',
        'livemode',
        'owner',
        'request_id',
        'type',
      ]);
      assert.equal(
        h['webhook-signature'],
        `v1,${hmac(s.secret, h['webhook-id']!, h['webhook-timestamp']!, r!.body)}`,
      );
      assert.deepEqual(verifyWebhook({ body: r!.body, headers: h, secrets: s.secret }), payload);
      assert.throws(
        () => verifyWebhook({ body: `${r!.body} `, headers: h, secrets: s.secret }),
        WebhookVerificationError,
      );
      assert.throws(
        () => verifyWebhook({ body: r!.body, headers: h, secrets: 'whsec_wrong' }),
        WebhookVerificationError,
      );
      assert.throws(
        () => verifyWebhook({ body: r!.body, headers: { ...h, 'webhook-signature': '' }, secrets: s.secret }),
        /missing/,
      );
      assert.throws(
        () =>
          verifyWebhook({
            body: r!.body,
            headers: h,
            secrets: s.secret,
            now: Number(h['webhook-timestamp']) + 301,
          }),
        /stale/,
      );
    });

    it('custom header values are masked for a read-only token, in the subscription and the recorded request', async () => {
      const s = await create('/ok/masked', {
        custom_headers: { Authorization: 'Bearer receiver-secret-123' },
      });
      await test(s.id);
      const [a] = await attempts(s.id, 1);
      const root = await signup(hub, 'root');
      const reader = await delegated(
        hub,
        alice,
        await serviceAccount(hub, root.token, 'reader'),
        'webhooks.readonly',
      );
      const seen: string[] = [];
      for (const path of [`/webhooks/${s.id}`, '/webhooks/', `/webhooks/${s.id}/deliveries/${a.id}`]) {
        const r = await hub.call('GET', path, { token: reader });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        seen.push(JSON.stringify(r.body));
      }
      assert.ok(!seen.join().includes('receiver-secret-123'), 'a read-only token saw the value');
      assert.deepEqual(JSON.parse(seen[0]!).custom_headers, { Authorization: '[redacted]' });
      const detail = JSON.parse(seen[2]!);
      assert.equal(
        detail.request.headers.authorization ?? detail.request.headers.Authorization,
        '[redacted]',
      );
      assert.match(detail.request.headers['webhook-id'] ?? detail.request.headers['Webhook-Id'], /^del_/);
      // Its owner's own token (a write scope) sees the values it set.
      const own = await hub.call('GET', `/webhooks/${s.id}/deliveries/${a.id}`, { token: alice.token });
      assert.ok(JSON.stringify(own.body).includes('receiver-secret-123'));
      assert.deepEqual(
        (await hub.call('GET', `/webhooks/${s.id}`, { token: alice.token })).body.custom_headers,
        {
          Authorization: 'Bearer receiver-secret-123',
        },
      );
    });

    it('after rotate-secret signs with the new and the previous secret, then with the new one only', async () => {
      const s = await create('/ok/rotated');
      const rotated = await hub.call('POST', `/webhooks/${s.id}/rotate-secret`, { token: alice.token });
      assert.equal(rotated.status, 200);
      const fresh = rotated.body.secret as string;
      assert.notEqual(fresh, s.secret);
      await test(s.id);
      const [during] = await rx.waitFor('/ok/rotated', 1);
      const h = during!.headers as Record<string, string>;
      assert.deepEqual(h['webhook-signature']!.split(' '), [
        `v1,${hmac(fresh, h['webhook-id']!, h['webhook-timestamp']!, during!.body)}`,
        `v1,${hmac(s.secret, h['webhook-id']!, h['webhook-timestamp']!, during!.body)}`,
      ]);
      await new Promise((r) => setTimeout(r, 3100)); // the window of HUB_WEBHOOK_ROTATION_WINDOW_S
      await test(s.id);
      const after = (await rx.waitFor('/ok/rotated', 2))[1]!;
      const h2 = after.headers as Record<string, string>;
      assert.equal(
        h2['webhook-signature'],
        `v1,${hmac(fresh, h2['webhook-id']!, h2['webhook-timestamp']!, after.body)}`,
      );
    });

    it('each status class leads to its documented outcome', async () => {
      const closed = await new Promise<number>((resolve) => {
        const s = createServer().listen(0, '127.0.0.1', () => {
          const port = (s.address() as { port: number }).port;
          s.close(() => resolve(port));
        });
      });
      const cases: [string, string, string, string][] = [
        // path, expected status, outcome, retried?
        ['/status/200', 'succeeded', '2xx', 'no'],
        ['/redirect', 'dead_lettered', '3xx', 'no'],
        ['/status/404', 'dead_lettered', '4xx', 'no'],
        ['/status/410', 'dead_lettered', '4xx', 'no'],
        ['/status/408', 'failed', '4xx', 'yes'],
        ['/status/425', 'failed', '4xx', 'yes'],
        ['/status/429?retry-after=120', 'failed', '4xx', 'yes'],
        ['/status/500', 'failed', '5xx', 'yes'],
        ['/status/503', 'failed', '5xx', 'yes'],
        ['/hang/timeout', 'failed', 'timeout', 'yes'],
        [`refused:${closed}`, 'failed', 'network', 'yes'],
        ['/status/200?size=10000&proto', 'succeeded', '2xx', 'no'], // an answer longer than is kept
      ];
      const subs = await Promise.all(
        cases.map(async ([path]) => {
          const url = path.startsWith('refused:')
            ? `http://127.0.0.1:${path.slice(8)}/x`
            : `${rx.url}${path}`;
          const r = await hub.call('POST', '/webhooks/', {
            token: alice.token,
            body: { nick: path, url, event_types: ['device.created'], enabled: true },
          });
          assert.equal(r.status, 201, JSON.stringify(r.body));
          await test(r.body.id);
          return r.body.id as string;
        }),
      );
      for (const [i, [path, status, outcome, retried]] of cases.entries()) {
        const [a] = await attempts(subs[i]!, 1);
        assert.ok(a, `${path}: no attempt`);
        assert.equal(a.status, status, `${path}: ${JSON.stringify(a)}`);
        assert.equal(a.outcome, outcome, path);
        assert.equal(a.next_attempt_at !== null, retried === 'yes', path);
        if (retried === 'yes' && !path.includes('retry-after')) {
          // The default schedule: the first retry after 60 s.
          const delay = Date.parse(a.next_attempt_at) - Date.parse(a.finished_at);
          assert.ok(Math.abs(delay - 60_000) < 1000, `${path}: retry in ${delay} ms`);
        }
      }
      const limited = (await attempts(subs[6]!, 1))[0];
      const delay = Date.parse(limited.next_attempt_at) - Date.parse(limited.finished_at);
      assert.ok(Math.abs(delay - 120_000) < 1000, `Retry-After honoured: ${delay} ms`);
      assert.equal(rx.at('/ok/redirected').length, 0, 'a redirect is not followed');
      const one = await hub.call(
        'GET',
        `/webhooks/${subs[2]}/deliveries/${(await attempts(subs[2]!, 1))[0].id}`,
        {
          token: alice.token,
        },
      );
      assert.equal(one.body.response.status, 404);
      assert.equal(one.body.response.body, 'answer xx');
      assert.equal(one.body.response.truncated, false);
      assert.equal(one.body.request.headers['webhook-id'], one.body.id);
      // A long answer is kept up to 4,096 bytes (docs/webhooks.md), and marked cut.
      const longSub = subs[cases.length - 1]!;
      const long = await hub.call(
        'GET',
        `/webhooks/${longSub}/deliveries/${(await attempts(longSub, 1))[0].id}`,
        { token: alice.token },
      );
      assert.equal(long.body.response.status, 200);
      assert.equal(long.body.response.body, `answer ${'x'.repeat(4089)}`);
      assert.equal(long.body.response.truncated, true);
      assert.equal(long.body.response.headers['content-type'], 'text/plain');
      // A header may be named like anything: __proto__ is kept as an own property, as any other.
      assert.equal(
        Object.getOwnPropertyDescriptor(long.body.response.headers, '__proto__')?.value,
        'a header like any other',
      );
    });

    it('a shortened retry schedule runs to dead-letter; failed and dead_lettered filter the log', async () => {
      const s = await create('/status/500/schedule', { retry_policy: { max_attempts: 3, delays_s: [1] } });
      await test(s.id);
      await rx.waitFor('/status/500/schedule', 3, 10_000);
      const all = await attempts(s.id, 3);
      assert.deepEqual(
        all.map((a: { attempt: number; status: string }) => [a.attempt, a.status]),
        [
          [1, 'failed'],
          [2, 'failed'],
          [3, 'dead_lettered'],
        ],
      );
      assert.equal(new Set(all.map((a: { id: string }) => a.id)).size, 3, 'a new Webhook-Id per attempt');
      assert.equal((await attempts(s.id, 3, '&status=failed')).length, 3);
      assert.equal((await attempts(s.id, 1, '&status=dead_lettered')).length, 1);
      assert.equal((await attempts(s.id, 0, '&status=succeeded')).length, 0);
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(rx.at('/status/500/schedule').length, 3, 'nothing after the dead letter');
    });

    it('replay, redeliver and test appear in the logs', async () => {
      const s = await create('/ok/ops');
      const device = await hub.call('POST', '/devices', { token: alice.token, body: {} });
      const login = await hub.call('POST', '/auth/login', {
        body: { username: device.body.prn, password: device.body.secret },
      });
      await hub.call('PATCH', `/devices/${device.body.id}/device-meta`, {
        token: login.body.token,
        body: { temp: '20' },
      });
      const [first] = await rx.waitFor('/ok/ops', 1);
      const eid = JSON.parse(first!.body).id as string;
      const [a] = await attempts(s.id, 1);
      assert.equal(
        (await hub.call('POST', `/webhooks/${s.id}/deliveries/${a.id}/replay`, { token: alice.token }))
          .status,
        202,
      );
      assert.equal(
        (await hub.call('POST', `/webhooks/events/${eid}/redeliver`, { token: alice.token })).status,
        202,
      );
      await test(s.id);
      const all = await attempts(s.id, 4);
      assert.deepEqual(all.map((x: { kind: string }) => x.kind).sort(), [
        'event',
        'redeliver',
        'replay',
        'test',
      ]);
      const received = (await rx.waitFor('/ok/ops', 4)).map((r) => JSON.parse(r.body).id);
      assert.equal(received.filter((id) => id === eid).length, 3, 'the same event id, three times');
      // Across every subscription of the account that the event matched.
      const ofEvent = await hub.call('GET', `/webhooks/events/${eid}/deliveries`, { token: alice.token });
      assert.ok(ofEvent.body.items.every((x: { event_id: string }) => x.event_id === eid));
      assert.deepEqual(
        ofEvent.body.items
          .filter((x: { subscription_id: string }) => x.subscription_id === s.id)
          .map((x: { kind: string }) => x.kind)
          .sort(),
        ['event', 'redeliver', 'replay'],
      );
      // Paged in the one list envelope: the second page starts where the first ended.
      const { total } = ofEvent.body;
      assert.ok(
        total >= 3 && ofEvent.body.limit === 50 && ofEvent.body.skip === 0,
        JSON.stringify(ofEvent.body),
      );
      const page = async (skip: number) =>
        (
          await hub.call('GET', `/webhooks/events/${eid}/deliveries?limit=2&skip=${skip}`, {
            token: alice.token,
          })
        ).body;
      const [p1, p2] = [await page(0), await page(2)];
      assert.deepEqual([p1.items.length, p1.total, p2.skip], [2, total, 2]);
      assert.deepEqual(
        [...p1.items, ...p2.items].map((x: { id: string }) => x.id),
        ofEvent.body.items.slice(0, 2 + p2.items.length).map((x: { id: string }) => x.id),
      );
      assert.equal(
        (await hub.call('GET', `/webhooks/events/${eid}/deliveries`, { token: bob.token })).status,
        404,
      );
      assert.equal(
        (await hub.call('POST', `/webhooks/events/${eid}/redeliver`, { token: bob.token })).status,
        404,
      );
    });

    it('a test sent right after the URL changed goes to the new URL', async () => {
      const s = await create('/ok/before-move');
      await test(s.id);
      await rx.waitFor('/ok/before-move', 1); // the dispatcher has the subscription in hand
      for (const n of [1, 2, 3]) {
        const moved = await hub.call('PATCH', `/webhooks/${s.id}`, {
          token: alice.token,
          body: { url: `${rx.url}/ok/moved-${n}` },
        });
        assert.equal(moved.status, 200, JSON.stringify(moved.body));
        await test(s.id);
        await rx.waitFor(`/ok/moved-${n}`, 1);
      }
      assert.equal(rx.at('/ok/before-move').length, 1, 'nothing more went to the old URL');
    });

    it('a paused, a deleted and a filtered subscription receive nothing; resumed, it receives again', async () => {
      await create('/ok/active');
      const paused = await create('/ok/paused', { enabled: false });
      const deleted = await create('/ok/deleted');
      await create('/ok/filtered', { device_meta_keys: ['humidity'] });
      assert.equal((await hub.call('DELETE', `/webhooks/${deleted.id}`, { token: alice.token })).status, 204);
      assert.equal((await hub.call('GET', `/webhooks/${deleted.id}`, { token: alice.token })).status, 404);
      const device = await hub.call('POST', '/devices', { token: alice.token, body: {} });
      const login = await hub.call('POST', '/auth/login', {
        body: { username: device.body.prn, password: device.body.secret },
      });
      const patch = (body: Record<string, string>) =>
        hub.call('PATCH', `/devices/${device.body.id}/device-meta`, { token: login.body.token, body });
      await patch({ temp: '1' });
      await rx.waitFor('/ok/active', 1);
      await new Promise((r) => setTimeout(r, 500));
      for (const path of ['/ok/paused', '/ok/deleted', '/ok/filtered'])
        assert.equal(rx.at(path).length, 0, path);
      await hub.call('PATCH', `/webhooks/${paused.id}`, { token: alice.token, body: { enabled: true } });
      await patch({ temp: '2', humidity: '40' });
      await rx.waitFor('/ok/paused', 1);
      await rx.waitFor('/ok/filtered', 1);
      assert.equal(rx.at('/ok/deleted').length, 0);
    });

    it('shows deliveries in /metrics: attempts by outcome, durations, latency, retries, dead letters, backlog', async () => {
      const text = await (await fetch(`${hub.url}/metrics`)).text();
      const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? Number.NaN);
      for (const outcome of ['2xx', '3xx', '4xx', '5xx', 'timeout', 'network'])
        assert.ok(
          value(new RegExp(`^hub_webhook_attempts_total\\{outcome="${outcome}"\\} (\\d+)`, 'm')) >= 1,
          outcome,
        );
      assert.ok(value(/^hub_webhook_attempt_duration_seconds_count (\d+)/m) >= 20);
      assert.ok(value(/^hub_webhook_delivery_latency_seconds_count (\d+)/m) >= 1);
      assert.ok(value(/^hub_webhook_retries_scheduled_total (\d+)/m) >= 8);
      assert.ok(value(/^hub_webhook_dead_lettered_total (\d+)/m) >= 4);
      // The 60-second retries of the status-class test are still pending.
      assert.ok(value(/^hub_webhook_retry_backlog (\d+)/m) >= 7);
      assert.ok(value(/^hub_webhook_retry_backlog_oldest_due_age_seconds (\S+)/m) >= 0);
      assert.match(text, /^hub_webhook_attempts_in_flight \d+/m);
      assert.doesNotMatch(text, /hub_webhook_\w+\{[^}]*(url|subscription|event)=/);
    });

    it('a receiver that hangs does not slow deliveries to another subscription', async () => {
      const slow = await create('/hang/slow');
      const fast = await create('/ok/fast');
      await Promise.all(Array.from({ length: 20 }, () => test(slow.id)));
      await new Promise((r) => setTimeout(r, 100));
      const sent = Date.now();
      await test(fast.id);
      const [got] = await rx.waitFor('/ok/fast', 1);
      assert.ok(got!.at - sent < 1000, `the fast subscription waited ${got!.at - sent} ms`);
    });
  });
});
