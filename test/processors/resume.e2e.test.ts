// The embedded profile with its derived state on disk (the default): a restart resumes the read
// models, the event log and the device actors from their checkpoints. Nothing is rebuilt or derived
// again, nothing delivered twice, and the first change after the restart is derived from the
// state the actor had before it.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { signup, startHub, type TestHub, type User } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { assertDerived, everyEventType, logOf, subscribe } from './scenario.ts';

const ENV = { HUB_WEBHOOK_ALLOW_HTTP: 'true', HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8' };

describe('embedded derived state on disk: a restart resumes (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let alice: User;
  let rx: Receiver;

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub(ENV);
    alice = await signup(hub, 'alice');
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  const metric = async (line: RegExp) => {
    const text = await (await fetch(`${hub.url}/metrics`)).text();
    return Number(line.exec(text)?.[1] ?? 0);
  };

  it('rebuilds nothing, derives nothing again, delivers nothing twice; the next change continues the state', async () => {
    const subscription = await subscribe(
      hub,
      alice,
      { event_types: ['device.device_meta.updated'] },
      `${rx.url}/ok/resume`,
    );
    const scenario = await everyEventType(hub, alice);
    const device = await hub.call('POST', '/devices', {
      token: alice.token,
      body: { 'device-meta': { a: '1' } },
    });
    const login = await hub.call('POST', '/auth/login', {
      body: { username: device.body.prn, password: device.body.secret },
    });
    const deviceToken = login.body.token as string;
    const patch = (body: Record<string, string>) =>
      hub.call('PATCH', `/devices/${device.body.id}/device-meta`, { token: deviceToken, body });
    assert.equal((await patch({ a: '2', b: '1' })).status, 200);
    await logOf(hub, alice, device.body.prn, 2);
    await rx.waitFor('/ok/resume', 2);
    const before = await hub.call('GET', '/webhooks/events?limit=500', { token: alice.token });
    const listed = await hub.call('GET', '/devices', { token: alice.token });

    await hub.stop();
    hub = await startHub({ ...ENV, HUB_DATA_DIR: hub.dataDir });
    const ready = await fetch(`${hub.url}/readyz`);
    assert.equal(ready.status, 200, 'ready at once: nothing to catch up');
    // The read models answer as before, without a projection applying anything.
    assert.deepEqual((await hub.call('GET', '/devices', { token: alice.token })).body, listed.body);
    assert.deepEqual(
      (await hub.call('GET', '/webhooks/events?limit=500', { token: alice.token })).body,
      before.body,
    );
    assert.equal(
      await metric(/^hub_projection_events_applied_total\{[^}]*projection="devices"[^}]*\} (\d+)/m),
      0,
    );
    assert.equal(await metric(/^hub_relay_events_total (\d+)/m), 0, 'nothing relayed again');
    assert.equal(await metric(/^hub_processor_changes_total (\d+)/m), 0, 'nothing derived again');

    // The actor kept its state: the map an event carries is the whole map, the key set before too.
    assert.equal((await patch({ b: '2' })).status, 200);
    const log = await logOf(hub, alice, device.body.prn, 3);
    assert.deepEqual(log.at(-1)!.data.device_meta, { a: '2', b: '2' });
    assert.deepEqual(log.at(-1)!.data.keys, ['b']);
    await rx.waitFor('/ok/resume', 3);
    await new Promise((r) => setTimeout(r, 500));
    const delivered = rx.at('/ok/resume').map((r) => JSON.parse(r.body).id as string);
    const all = await hub.call('GET', '/webhooks/events?type=device.device_meta.updated&limit=500', {
      token: alice.token,
    });
    assert.deepEqual(
      delivered.sort(),
      all.body.items.map((e: { id: string }) => e.id).sort(),
      'each event delivered once',
    );
    assert.equal((await hub.node.deliveries.attempts(subscription, { limit: 10, skip: 0 })).total, 3);
    // The scenario's device is unchanged in the log after the restart.
    assertDerived(await logOf(hub, alice, scenario.device.prn, scenario.expected.length), scenario, alice);
  });

  it('upgrades a data dir written without derived.sqlite: built once, nothing delivered twice', async () => {
    await hub.stop();
    // The version before kept its derived state in memory: that is what this data dir holds.
    hub = await startHub({ ...ENV, HUB_EMBEDDED_STATE: 'memory' });
    const bob = await signup(hub, 'bob');
    await subscribe(
      hub,
      bob,
      { event_types: ['device.created', 'device.device_meta.updated'] },
      `${rx.url}/ok/upgrade`,
    );
    const scenario = await everyEventType(hub, bob);
    await logOf(hub, bob, scenario.device.prn, scenario.expected.length);
    await rx.waitFor('/ok/upgrade', 2);
    const before = await hub.call('GET', '/webhooks/events?limit=500', { token: bob.token });
    const listed = await hub.call('GET', '/auth/accounts', { token: bob.token });
    await hub.stop();
    assert.ok(!existsSync(join(hub.dataDir, 'derived.sqlite')));

    hub = await startHub({ ...ENV, HUB_DATA_DIR: hub.dataDir });
    for (let i = 0; i < 100 && (await fetch(`${hub.url}/readyz`)).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 50));
    assert.equal((await fetch(`${hub.url}/readyz`)).status, 200);
    assert.ok(existsSync(join(hub.dataDir, 'derived.sqlite')));
    assert.deepEqual((await hub.call('GET', '/auth/accounts', { token: bob.token })).body, listed.body);
    let after = before;
    for (let i = 0; i < 100; i++) {
      after = await hub.call('GET', '/webhooks/events?limit=500', { token: bob.token });
      if (after.body.total >= before.body.total) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(after.body, before.body, 'the log derived again: the same events, the same ids');
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(rx.at('/ok/upgrade').length, 2, 'nothing delivered a second time');
    assert.equal(await metric(/^hub_processor_delivery_jobs_total (\d+)/m), 0);

    // Built once: the next start resumes.
    await hub.stop();
    hub = await startHub({ ...ENV, HUB_DATA_DIR: hub.dataDir });
    assert.equal(await metric(/^hub_relay_events_total (\d+)/m), 0, 'nothing relayed again');
    assert.deepEqual(
      (await hub.call('GET', '/webhooks/events?limit=500', { token: bob.token })).body,
      before.body,
    );
  });

  it('a long backlog to build does not hold the start: it listens, and /readyz says how far the build is', async () => {
    await hub.stop();
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-backlog-'));
    hub = await startHub({ ...ENV, HUB_DATA_DIR: dataDir }); // its keys, as any data dir has
    await hub.stop();
    const store = new SqliteEventStore(join(dataDir, 'events.sqlite'));
    for (let batch = 0; batch < 20; batch++)
      await Promise.all(
        Array.from({ length: 100 }, (_, s) =>
          store.append(
            `probe-${s}`,
            Array.from({ length: 100 }, (_, i) => ({ id: randomUUID(), type: 'Probed', data: { i } })),
          ),
        ),
      );
    await store.close();
    hub = await startHub({ ...ENV, HUB_DATA_DIR: dataDir });
    assert.ok(
      hub.node.runners.some((r) => !r.hasCaughtUp),
      'the start resolved while the read models were still being built',
    );
    const building = await fetch(`${hub.url}/readyz`);
    assert.equal(building.status, 503);
    const { details } = (await building.json()) as { details: { field: string; problem: string }[] };
    assert.match(
      details.find((d) => d.field === 'projections')!.problem,
      /^catching up: .* at \d+ of 2000\d\d/,
    );
    for (let i = 0; i < 600 && (await fetch(`${hub.url}/readyz`)).status !== 200; i++)
      await new Promise((r) => setTimeout(r, 100));
    assert.equal((await fetch(`${hub.url}/readyz`)).status, 200);
  });
});
