// Tenancy: every operation of /openapi.json that names a resource is tried on the first user's
// resource by a second account, by a device of the first user (on another of her devices), and
// (for writes) by her token delegated with read-only scopes. Each is refused, leaks no secret, and
// changes nothing; her own token, on the same paths, is answered.
import assert from 'node:assert/strict';
import { delegated } from '../hub.ts';
import { buildWorld, documentedOperations, type Operation, saBasic, type World } from './world.ts';

describe('tenancy (e2e)', function () {
  this.timeout(120_000);
  let w: World;
  let operations: Operation[] = [];

  before(async () => {
    w = await buildWorld();
    // /admin/projections/{name} names a read model, no account's resource: admins only, whoever
    // asks otherwise (test/admin/projections.e2e.test.ts).
    operations = (await documentedOperations(w)).filter(
      (o) => o.bearer && o.path.includes('{') && !o.path.startsWith('/admin/'),
    );
  });
  after(() => w?.stop());

  /** The path of an operation aimed at Alice's resources. */
  const target = (o: Operation, webhook = w.ids.webhook) =>
    o.path
      .replace('{device}', w.d2.id)
      .replace('{rev}', w.ids.rev)
      .replace('{eid}', w.ids.event)
      .replace('{did}', w.ids.delivery)
      .replace('{rid}', w.ids.recovery)
      .replace(
        '{id}',
        o.path.startsWith('/apps') ? w.ids.app : o.path.startsWith('/webhooks') ? webhook : w.d2.id,
      );

  /** A body the operation would accept from someone allowed: refusals are then about who asks. */
  const body = (o: Operation): unknown =>
    (
      ({
        'PUT /apps/{id}': { nick: 'taken-app', name: 'Taken' },
        'PATCH /devices/{id}': { nick: 'taken-device' },
        'POST /devices/{id}/claim': { challenge: 'guess' },
        'PATCH /devices/{id}/device-meta': { taken: 'yes' },
        'PUT /devices/{id}/user-meta': { taken: 'yes' },
        'POST /trails/{device}/steps': { rev: 1, state: { taken: true } },
        'PUT /trails/{device}/steps/{rev}/progress': { progress: 50, status: 'DONE' },
        'PUT /webhooks/{id}': {
          nick: 'taken-hook',
          url: `${w.rx.url}/taken`,
          event_types: ['device.created'],
          enabled: true,
        },
        'PATCH /webhooks/{id}': { enabled: false },
        'POST /webhooks/{id}/recover': { since: '2026-01-01T00:00:00Z' },
      }) as Record<string, unknown>
    )[`${o.method} ${o.path}`];

  /** What Alice can see of her resources: must be the same after every refused attempt. */
  const snapshot = async () => {
    const paths = [
      `/devices/${w.d2.id}`,
      `/devices/${w.d1.id}`,
      `/apps/${w.ids.app}`,
      `/webhooks/${w.ids.webhook}`,
      `/trails/${w.d2.id}/steps`,
      `/webhooks/${w.ids.webhook}/deliveries`,
      '/webhooks/events',
      `/webhooks/events/${w.ids.event}/deliveries`,
    ];
    const out: Record<string, unknown> = {};
    for (const p of paths) {
      const r = await w.hub.call('GET', p, { token: w.alice.token });
      assert.equal(r.status, 200, `${p}: ${JSON.stringify(r.body)}`);
      out[p] = r.body;
    }
    return out;
  };

  const refusedBy = async (who: string, token: string, ops: Operation[], webhook?: string) => {
    const answers: string[] = [];
    for (const o of ops) {
      const path = target(o, webhook);
      const r = await w.hub.call(o.method, path, { token, body: body(o) });
      answers.push(`${o.method} ${path}`);
      assert.ok(
        [401, 403, 404].includes(r.status),
        `${who}: ${o.method} ${path} answered ${r.status} ${JSON.stringify(r.body)}`,
      );
      assert.equal(typeof r.body.error, 'string', `${who}: ${o.method} ${path} not in the error shape`);
      for (const secret of w.secrets)
        assert.ok(!JSON.stringify(r.body).includes(secret), `${who}: a secret leaked`);
    }
    return answers.length;
  };

  it('covers every operation on a resource, and the owner is answered on each read', async () => {
    assert.ok(operations.length >= 25, `only ${operations.length} operations`);
    for (const o of operations.filter((o) => o.method === 'GET')) {
      const r = await w.hub.call('GET', target(o), { token: w.alice.token });
      assert.equal(r.status, 200, `${o.path}: ${JSON.stringify(r.body)}`);
    }
  });

  it('a second account is refused every operation on the first one’s resources, and nothing changes', async () => {
    const before = await snapshot();
    assert.equal(await refusedBy('bob', w.bob.token, operations), operations.length);
    assert.deepEqual(await snapshot(), before);
  });

  it('a device of the first account is refused every operation on her other resources', async () => {
    const before = await snapshot();
    await refusedBy('device d1', w.d1.token, operations);
    assert.deepEqual(await snapshot(), before);
  });

  it('a token with read-only scopes is refused every write, and nothing changes', async () => {
    const before = await snapshot();
    await refusedBy(
      'read-only token',
      w.readOnly,
      operations.filter((o) => o.method !== 'GET'),
    );
    assert.deepEqual(await snapshot(), before);
  });

  it("the scopes /openapi.json publishes are the hub's: a token with one of them gets past the check, without any 403", async () => {
    const before = await snapshot();
    for (const scopes of ['api.readonly', 'trails.readonly webhooks.readonly']) {
      const token = await delegated(w.hub, w.alice, w.svc, scopes);
      const held = scopes.split(' ');
      for (const o of operations) {
        const granted = o.scopes.some((s) => held.includes(s));
        const r = await w.hub.call(o.method, target(o), { token, body: body(o) });
        const what = `${scopes}: ${o.method} ${o.path} (published ${o.scopes.join(' | ')}) answered ${r.status}`;
        if (granted) assert.notEqual(r.status, 403, what);
        else assert.equal(r.status, 403, what);
        if (granted && o.method === 'GET') assert.equal(r.status, 200, what);
      }
    }
    assert.deepEqual(await snapshot(), before);
  });

  it('ids guessed across accounts: her delivery through his subscription, her event log, replays and redelivery', async () => {
    const before = await snapshot();
    const viaBob = operations.filter((o) => o.path.includes('{did}'));
    assert.equal(viaBob.length, 2);
    await refusedBy('bob through his own webhook', w.bob.token, viaBob, w.ids.bobWebhook);
    const list = await w.hub.call('GET', '/webhooks/events', { token: w.bob.token });
    assert.equal(list.status, 200);
    assert.ok(!JSON.stringify(list.body).includes(w.ids.event), 'her event in his log');
    for (const path of ['/devices', '/apps', '/webhooks/', `/webhooks/${w.ids.bobWebhook}/deliveries`]) {
      const r = await w.hub.call('GET', path, { token: w.bob.token });
      assert.equal(r.status, 200);
      for (const id of [w.d1.id, w.d2.id, w.ids.app, w.ids.webhook, w.ids.delivery])
        assert.ok(!JSON.stringify(r.body).includes(id), `${path} shows her ${id}`);
    }
    assert.deepEqual(await snapshot(), before);
  });

  it('operator callbacks refuse bearer tokens and a wrong Basic password', async () => {
    for (const path of [`/callbacks/devices/${w.d2.id}`, `/callbacks/steps/${w.d2.id}-0`]) {
      for (const headers of [{ authorization: `Bearer ${w.root.token}` }, saBasic('wrong'), {}]) {
        const r = await w.hub.call('PUT', path, { headers });
        assert.equal(r.status, 401, `${path} ${JSON.stringify(headers)}: ${r.status}`);
      }
    }
  });
});
