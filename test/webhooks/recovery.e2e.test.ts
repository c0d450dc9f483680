// Bulk recovery end to end on the embedded profile, with a real receiver: after an outage, the
// deliveries that failed in the window are sent again, each once, as attempts of kind `recover`;
// those outside the window or delivered since are not; asking again answers the same recovery and
// sends nothing more; bad windows are refused with the JSON error.
import assert from 'node:assert/strict';
import { signup, startHub, type TestHub, type User } from '../hub.ts';
import { assertKeepsRate, Receiver } from './receiver.ts';

const eventOf = (body: string) => (JSON.parse(body) as { id: string }).id;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('webhooks: bulk recovery (e2e)', function () {
  this.timeout(90_000);
  let hub: TestHub;
  let rx: Receiver;
  let alice: User;
  let bob: User;
  const PATH = '/ok/recovered';
  let sub: string;

  /** A test delivery, once its attempt is in the log: its event's id. */
  const deliver = async (): Promise<string> => {
    const before = rx.at(PATH).length;
    const r = await hub.call('POST', `/webhooks/${sub}/test`, { token: alice.token });
    assert.equal(r.status, 202, JSON.stringify(r.body));
    const [got] = (await rx.waitFor(PATH, before + 1)).slice(before);
    const job = r.body.jobs[0].job_id as string;
    for (let i = 0; i < 200; i++) {
      const log = await hub.call('GET', `/webhooks/${sub}/deliveries?limit=10`, { token: alice.token });
      if (log.body.items.some((a: { job_id: string }) => a.job_id === job)) return eventOf(got!.body);
      await sleep(25);
    }
    assert.fail(`the attempt of ${job} was not recorded`);
  };
  const recover = (body: Record<string, unknown>, user = alice, id = sub) =>
    hub.call('POST', `/webhooks/${id}/recover`, { token: user.token, body });
  const progress = async (rid: string) => {
    for (let i = 0; i < 400; i++) {
      const r = await hub.call('GET', `/webhooks/${sub}/recoveries/${rid}`, { token: alice.token });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      if (r.body.status === 'done') return r.body;
      await sleep(50);
    }
    assert.fail('the recovery did not finish');
  };

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({ HUB_WEBHOOK_ALLOW_HTTP: 'true', HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8' });
    alice = await signup(hub, 'alice');
    bob = await signup(hub, 'bob');
    const r = await hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: {
        nick: 'recovered',
        url: `${rx.url}${PATH}`,
        event_types: ['device.created'],
        enabled: true,
        retry_policy: { max_attempts: 1, delays_s: [] }, // a failure is dead-lettered at once
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    sub = r.body.id;
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  it('resends exactly the failed deliveries of the window, once, as attempts of kind recover', async () => {
    rx.behave(PATH, 'fail');
    const before = await deliver(); // failed before the window
    await sleep(20);
    const since = Date.now();
    const inWindow = [await deliver(), await deliver(), await deliver()];
    rx.behave(PATH, 'ok');
    const fine = await deliver(); // delivered in the window: not sent again
    const until = Math.ceil((Date.now() + 1) / 1000) * 1000; // a whole second: sent as Unix seconds
    await sleep(until + 20 - Date.now());
    rx.behave(PATH, 'fail');
    const after = await deliver(); // failed after the window
    rx.behave(PATH, 'ok');
    const sentBefore = rx.at(PATH).length;

    const window = { since: new Date(since).toISOString(), until: String(until / 1000) };
    const asked = await recover(window);
    assert.equal(asked.status, 202, JSON.stringify(asked.body));
    assert.match(asked.body.id, /^rcv_[a-f0-9]{24}$/);
    assert.equal(asked.headers.get('location'), `/webhooks/${sub}/recoveries/${asked.body.id}`);
    const done = await progress(asked.body.id);
    assert.deepEqual(
      [done.total, done.sent, done.succeeded, done.dead_lettered, done.pending],
      [3, 3, 3, 0, 0],
      JSON.stringify(done),
    );
    assert.equal(done.since, new Date(since).toISOString());

    // Asked again, by the same window (Unix seconds or RFC 3339 alike): the same recovery, nothing sent.
    const again = await recover({
      since: new Date(since).toISOString(),
      until: new Date(until).toISOString(),
    });
    assert.equal(again.status, 202);
    assert.equal(again.body.id, asked.body.id);
    await sleep(1500);
    const resent = rx
      .at(PATH)
      .slice(sentBefore)
      .map((r) => eventOf(r.body));
    assert.deepEqual(resent.sort(), [...inWindow].sort(), 'each failed delivery of the window, once');
    for (const e of [before, fine, after]) assert.ok(!resent.includes(e), e);
    const log = await hub.call('GET', `/webhooks/${sub}/deliveries?limit=100`, { token: alice.token });
    const recovered = log.body.items.filter((a: { kind: string }) => a.kind === 'recover');
    assert.equal(recovered.length, 3);
    assert.ok(recovered.every((a: { status: string }) => a.status === 'succeeded'));
    const metrics = String((await hub.call('GET', '/metrics')).body);
    assert.match(metrics, /^hub_webhook_recovery_jobs_queued_total 3$/m);
    assert.match(metrics, /^hub_webhook_recovery_jobs_sent_total 3$/m);
  });

  it("goes through the schedule: the subscription's rate limit holds for the deliveries it sends", async () => {
    await hub.call('PATCH', `/webhooks/${sub}`, { token: alice.token, body: { rate_limit: 4 } });
    rx.behave(PATH, 'fail');
    const since = Date.now();
    const failed = [];
    for (let i = 0; i < 6; i++) failed.push(await deliver());
    rx.behave(PATH, 'ok');
    const sentBefore = rx.at(PATH).length;
    const asked = await recover({ since: new Date(since).toISOString() });
    assert.equal(asked.status, 202, JSON.stringify(asked.body));
    const done = await progress(asked.body.id);
    assert.equal(done.succeeded, 6);
    const got = rx.at(PATH).slice(sentBefore);
    assert.deepEqual(got.map((r) => eventOf(r.body)).sort(), failed.sort());
    assertKeepsRate(
      got.map((r) => r.at),
      4,
    );
    await hub.call('PATCH', `/webhooks/${sub}`, { token: alice.token, body: { rate_limit: null } });
  });

  it('refuses a window it cannot take with a 422, and another account gets 404', async () => {
    const now = Date.now();
    const cases: [Record<string, unknown>, string][] = [
      [{}, 'since'],
      [{ since: 'yesterday' }, 'since'],
      [{ since: new Date(now).toISOString(), until: new Date(now - 60_000).toISOString() }, 'since'],
      [
        { since: new Date(now - 60_000).toISOString(), until: new Date(now + 3_600_000).toISOString() },
        'until',
      ],
      [{ since: new Date(now - 60_000).toISOString(), extra: 1 }, 'extra'],
    ];
    for (const [body, field] of cases) {
      const r = await recover(body);
      assert.equal(r.status, 422, `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error, 'validation_failed');
      assert.ok(
        r.body.details.some((d: { field: string }) => d.field.includes(field)),
        `${JSON.stringify(body)}: ${JSON.stringify(r.body)}`,
      );
    }
    const theirs = await recover({ since: new Date(now - 60_000).toISOString() }, bob);
    assert.equal(theirs.status, 404, JSON.stringify(theirs.body));
    const mine = await recover({ since: new Date(now - 60_000).toISOString() });
    assert.equal(mine.status, 202);
    const peek = await hub.call('GET', `/webhooks/${sub}/recoveries/${mine.body.id}`, { token: bob.token });
    assert.equal(peek.status, 404);
    const unknown = await hub.call('GET', `/webhooks/${sub}/recoveries/rcv_${'0'.repeat(24)}`, {
      token: alice.token,
    });
    assert.equal(unknown.status, 404);
    assert.equal(unknown.body.error, 'not_found');
  });
});
