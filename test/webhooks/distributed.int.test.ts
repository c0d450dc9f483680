// Webhook delivery features on the distributed profile, every role its own process on the real
// Redis, PostgreSQL and Kafka, with two dispatcher processes: a subscription's rate limit is one
// budget shared by both, measured at a real receiver; a bulk recovery asked for while no projector
// runs (its follower queues recoveries) is queued once one is started again, and sends each failed
// delivery once. (That the budget is one in Redis, and not one
// per process, is shown alone by the rate slots' test with two connections: rate-slots.int.test.ts.)
import assert from 'node:assert/strict';
import { type Cluster, startCluster } from '../faults/cluster.ts';
import { endProcess, type RoleProcess, signup, spawnRole, type User } from '../hub.ts';
import { assertKeepsRate, Receiver } from './receiver.ts';

/** The Redis database of this suite's cluster (flushed at its start): the other clusters use 12 and 13. */
const REDIS_DB = 14;

/** The process an attempt was made in: its id's prefix (processors/delivery/attempt.ts). */
const processOf = (webhookId: string | string[] | undefined) => String(webhookId).slice(4, 18);

describe('webhooks: distributed, two dispatchers (int)', function () {
  this.timeout(180_000);
  let cluster: Cluster;
  let second: RoleProcess;
  let rx: Receiver;
  let alice: User;

  const create = async (path: string, extra: Record<string, unknown> = {}) => {
    const r = await cluster.hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: { nick: path, url: `${rx.url}${path}`, event_types: ['device.created'], enabled: true, ...extra },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body.id as string;
  };
  /** `count` test deliveries queued at once. */
  const burst = async (id: string, count: number) => {
    const answers = await Promise.all(
      Array.from({ length: count }, () =>
        cluster.hub.call('POST', `/webhooks/${id}/test`, { token: alice.token }),
      ),
    );
    for (const r of answers) assert.equal(r.status, 202, JSON.stringify(r.body));
  };

  before(async () => {
    rx = await new Receiver().start();
    // One attempt in flight per subscription, so at most 8 of its jobs per claim: each dispatcher
    // claims a share of a burst, and both take slots at the same time.
    cluster = await startCluster('webhooks', REDIS_DB, { HUB_WEBHOOK_MAX_IN_FLIGHT: '1' });
    second = await spawnRole('dispatcher', { ...cluster.env, HUB_PORT: '0' });
    alice = await signup(cluster.hub, 'alice');
  });
  after(async () => {
    if (second) await endProcess(second.child, 'SIGKILL');
    await cluster?.stop();
    await rx?.stop();
  });

  it('a subscription at 8/s is delivered no faster than 8/s by the two dispatchers together', async () => {
    // Each dispatcher's HTTP thread starts at its first attempt (and holds that moment's attempts
    // until it runs): both are warmed up first, by unlimited deliveries until each has made one.
    const warm = await create('/ok/warm');
    for (let sent = 0; new Set(rx.at('/ok/warm').map((r) => processOf(r.headers['webhook-id']))).size < 2; ) {
      assert.ok(sent < 60, 'both dispatchers deliver');
      await burst(warm, 4);
      sent += 4;
      await rx.waitFor('/ok/warm', sent);
    }
    const limited = await create('/ok/limited', { rate_limit: 8 });
    // Bursts of 32, each kept to 8/s, until both dispatchers took part in one, at most eight (which
    // one claims the due jobs is a race: on a loaded machine one may win every claim of a burst;
    // during the whole suite three bursts were once not enough, and five once on 2026-11-29).
    const byProcess = new Map<string, number>();
    for (let round = 1; round <= 8 && byProcess.size < 2; round++) {
      byProcess.clear();
      await burst(limited, 32);
      const got = (await rx.waitFor('/ok/limited', 32 * round, 30_000)).slice(32 * (round - 1));
      assert.equal(got.length, 32);
      assertKeepsRate(
        got.map((r) => r.at),
        8,
      );
      for (const r of got) {
        const p = processOf(r.headers['webhook-id']);
        byProcess.set(p, (byProcess.get(p) ?? 0) + 1);
      }
    }
    assert.equal(byProcess.size, 2, `deliveries by process: ${JSON.stringify([...byProcess])}`);
  });

  it('a recovery asked for while the projector is down is queued when it is back, each failed delivery sent once', async () => {
    const path = '/ok/recovered';
    const id = await create(path, { retry_policy: { max_attempts: 1, delays_s: [] } });
    rx.behave(path, 'fail');
    const since = Date.now();
    await burst(id, 3);
    await rx.waitFor(path, 3);
    const failed = async () =>
      (
        await cluster.hub.call('GET', `/webhooks/${id}/deliveries?status=dead_lettered`, {
          token: alice.token,
        })
      ).body.total;
    for (let i = 0; (await failed()) < 3; i++) {
      assert.ok(i < 200, 'the failures are recorded');
      await new Promise((r) => setTimeout(r, 50));
    }
    rx.behave(path, 'ok');
    await endProcess(cluster.roles.get('projector')!.child, 'SIGKILL');
    const asked = await cluster.hub.call('POST', `/webhooks/${id}/recover`, {
      token: alice.token,
      body: { since: new Date(since).toISOString() },
    });
    assert.equal(asked.status, 202, JSON.stringify(asked.body));
    assert.equal(asked.body.status, 'selecting');
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(rx.at(path).length, 3, 'nothing is sent while no projector runs');
    await cluster.restart('projector');
    const again = await cluster.hub.call('POST', `/webhooks/${id}/recover`, {
      token: alice.token,
      body: { since: new Date(since).toISOString() },
    });
    assert.equal(again.body.id, asked.body.id, 'the same window without until: the same recovery');
    let progress: Record<string, unknown> = {};
    for (let i = 0; progress.status !== 'done'; i++) {
      assert.ok(i < 600, `the recovery finishes: ${JSON.stringify(progress)}`);
      await new Promise((r) => setTimeout(r, 100));
      progress = (
        await cluster.hub.call('GET', `/webhooks/${id}/recoveries/${asked.body.id}`, { token: alice.token })
      ).body;
    }
    assert.deepEqual([progress.total, progress.sent, progress.succeeded], [3, 3, 3]);
    await new Promise((r) => setTimeout(r, 1000));
    const events = rx.at(path).map((r) => (JSON.parse(r.body) as { id: string }).id);
    assert.equal(events.length, 6);
    assert.deepEqual(events.slice(3).sort(), events.slice(0, 3).sort(), 'each failed event, once more');
  });
});
