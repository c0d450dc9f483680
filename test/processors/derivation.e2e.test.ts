// Every webhook event type derived from real API calls, on the embedded profile: in order per
// device, in the account's event log, with the envelope of the specification.
import assert from 'node:assert/strict';
import { signup, startHub, type TestHub, type User } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { assertDerived, assertJobs, everyEventType, logOf, subscribe } from './scenario.ts';

// The derived state in memory (HUB_EMBEDDED_STATE=memory): a restart derives everything again,
// and the hand-off checkpoint keeps jobs from going out twice. On disk (the default), a restart
// resumes instead: resume.e2e.test.ts.
const MEMORY = { HUB_EMBEDDED_STATE: 'memory' };

describe('stream processor on the embedded profile (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let alice: User;
  let bob: User;

  let rx: Receiver;

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({
      ...MEMORY,
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
    });
    alice = await signup(hub, 'alice');
    bob = await signup(hub, 'bob');
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  it('derives all nine event types from real API calls, in order, into the owner’s log', async () => {
    const subscription = await subscribe(
      hub,
      alice,
      { event_types: ['step.status.changed', 'device.device_meta.updated'], device_meta_keys: ['temp'] },
      `${rx.url}/ok/derived`,
    );
    const { device, expected } = await everyEventType(hub, alice);
    const log = await logOf(hub, alice, device.prn, expected.length);
    assertDerived(log, { device, expected }, alice);
    // The in-process dispatcher took the jobs: one delivery per matching event, by job id.
    const received = (await rx.waitFor('/ok/derived', 3)).map((r) => JSON.parse(r.body));
    // Received is not yet recorded: the answer is still on its way back to the dispatcher.
    let attempts = await hub.node.deliveries.attempts(subscription, { limit: 10, skip: 0 });
    for (let waited = 0; attempts.total < 3 && waited < 10_000; waited += 20) {
      await new Promise((r) => setTimeout(r, 20));
      attempts = await hub.node.deliveries.attempts(subscription, { limit: 10, skip: 0 });
    }
    assertJobs(
      attempts.items.map((a) => ({
        job_id: a.job_id,
        subscription_id: a.subscription_id,
        kind: a.kind,
        attempt: a.attempt,
        event: { id: a.event_id, data: JSON.stringify(received.find((p) => p.id === a.event_id)!.data) },
      })),
      log,
      subscription,
    );
  });

  it('answers one event by id, 404 for an unknown id or another account’s', async () => {
    const r = await hub.call('GET', '/webhooks/events?limit=1', { token: alice.token });
    assert.equal(r.status, 200);
    const [newest] = r.body.items;
    const one = await hub.call('GET', `/webhooks/events/${newest.id}`, { token: alice.token });
    assert.equal(one.status, 200);
    assert.deepEqual(one.body, newest);
    const foreign = await hub.call('GET', `/webhooks/events/${newest.id}`, { token: bob.token });
    assert.equal(foreign.status, 404);
    assert.equal(foreign.body.error, 'not_found');
    assert.equal((await hub.call('GET', '/webhooks/events/evt_nope', { token: alice.token })).status, 404);
    const bobs = await hub.call('GET', '/webhooks/events', { token: bob.token });
    assert.deepEqual(bobs.body.items, []);
  });

  it('filters by type, device and time, pages with limit and skip, and refuses bad times', async () => {
    const all = await hub.call('GET', '/webhooks/events?limit=500', { token: alice.token });
    const total = all.body.total as number;
    assert.ok(total >= 11);
    const typed = await hub.call('GET', '/webhooks/events?type=step.status.changed', { token: alice.token });
    assert.equal(typed.body.total, 2);
    assert.ok(typed.body.items.every((e: { type: string }) => e.type === 'step.status.changed'));
    const page = await hub.call('GET', '/webhooks/events?limit=3&skip=2', { token: alice.token });
    assert.deepEqual(
      page.body.items.map((e: { id: string }) => e.id),
      all.body.items.slice(2, 5).map((e: { id: string }) => e.id),
    );
    assert.equal(page.body.total, total);
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const none = await hub.call('GET', `/webhooks/events?since=${encodeURIComponent(future)}`, {
      token: alice.token,
    });
    assert.equal(none.body.total, 0);
    const before = await hub.call('GET', `/webhooks/events?until=${Math.floor(Date.now() / 1000) + 60}`, {
      token: alice.token,
    });
    assert.equal(before.body.total, total);
    for (const [name, when] of [
      ['since', 'yesterday'],
      ['since', '2026-02-30T00:00:00Z'], // a day the month lacks is refused, not rolled over
      ['until', '2026-11-31T00:00:00Z'],
    ]) {
      const bad = await hub.call('GET', `/webhooks/events?${name}=${when}`, { token: alice.token });
      assert.equal(bad.status, 422, when);
      assert.equal(bad.body.details[0].field, name);
    }
    const offset = await hub.call(
      'GET',
      `/webhooks/events?until=${encodeURIComponent(future.replace('Z', '+00:00'))}`,
      {
        token: alice.token,
      },
    );
    assert.equal(offset.body.total, total);
    const badType = await hub.call('GET', '/webhooks/events?type=device.exploded', { token: alice.token });
    assert.equal(badType.status, 422);
    assert.equal((await hub.call('GET', '/webhooks/events')).status, 401);
  });

  it('after a restart, rebuilds the log with the same ids and hands off no job a second time', async () => {
    const before = await hub.call('GET', '/webhooks/events?limit=500', { token: alice.token });
    const subscription = (await hub.node.readStore.range('webhooks', 1, `webhooks-of:${alice.prn}`))[0]!;
    await hub.stop();
    hub = await startHub({
      ...MEMORY,
      HUB_DATA_DIR: hub.dataDir,
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
    });
    let after = before;
    for (let i = 0; i < 100; i++) {
      after = await hub.call('GET', '/webhooks/events?limit=500', { token: alice.token });
      if (after.body.total >= before.body.total) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(after.body.items, before.body.items);
    // Nothing delivered a second time (the hand-off checkpoint held the jobs back; the metrics
    // test below shows none was handed off).
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(rx.at('/ok/derived').length, 3);
    assert.equal((await hub.node.deliveries.attempts(subscription, { limit: 10, skip: 0 })).total, 3);
  });

  it('shows the pipeline in /metrics: relayed changes, derived events by type, jobs, actors', async () => {
    const r = await fetch(`${hub.url}/metrics`);
    const text = await r.text();
    const value = (line: RegExp) => Number(line.exec(text)?.[1] ?? Number.NaN);
    assert.ok(value(/^hub_relay_events_total (\d+)/m) > 10);
    assert.ok(value(/^hub_processor_changes_total (\d+)/m) > 10);
    assert.ok(value(/^hub_processor_events_derived_total\{type="step.status.changed"\} (\d+)/m) >= 2);
    // This hub was restarted above: it derived everything again and handed off no job.
    assert.equal(value(/^hub_processor_delivery_jobs_total (\d+)/m), 0);
    assert.ok(value(/^hub_processor_actors (\d+)/m) >= 1);
    assert.equal(value(/^hub_processor_consumer_lag\{partition="0"\} (\d+)/m), 0);
    assert.ok(value(/^hub_processor_batch_duration_seconds_count (\d+)/m) >= 1);
    assert.match(text, /^hub_processor_mailbox_depth \d+/m);
  });

  it('lists the nine event types with a description each', async () => {
    const r = await hub.call('GET', '/webhooks/event-types', { token: alice.token });
    assert.equal(r.status, 200);
    assert.equal(r.body.items.length, 9);
    assert.ok(r.body.items.every((t: { description: string }) => t.description.length > 10));
  });
});
