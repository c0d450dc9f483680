// Scheduled retries survive the death of every process: a hub (embedded) or a dispatcher
// (distributed, on Kafka and Redis) SIGKILLed between two attempts, restarted, carries on with
// the schedule; nothing is lost and the log shows every attempt.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { endProcess, remoteHub, signup, spawnRole, startHub, type TestHub } from '../hub.ts';
import { Receiver } from './receiver.ts';

const WEBHOOK_ENV = { HUB_WEBHOOK_ALLOW_HTTP: 'true', HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8' };
const spawnHub = (command: string, env: Record<string, string>) =>
  spawnRole(command, { ...WEBHOOK_ENV, ...env });
const kill9 = async (child: ChildProcess) => {
  await endProcess(child, 'SIGKILL');
};

describe('scheduled retries across process deaths (int)', function () {
  this.timeout(120_000);
  let rx: Receiver;
  const children: ChildProcess[] = [];

  before(async () => {
    rx = await new Receiver().start();
  });
  afterEach(async () => {
    await Promise.all(children.splice(0).map(kill9));
  });
  after(() => rx.stop());

  async function scheduleAndKill(hub: TestHub, path: string, kill: () => Promise<void>) {
    const alice = await signup(hub, `a${Date.now().toString(36)}`);
    const created = await hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: {
        nick: 'restart',
        url: `${rx.url}${path}`,
        event_types: ['device.created'],
        enabled: true,
        retry_policy: { max_attempts: 4, delays_s: [2] },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.equal(
      (await hub.call('POST', `/webhooks/${created.body.id}/test`, { token: alice.token })).status,
      202,
    );
    await rx.waitFor(path, 1);
    await deliveriesRecorded(hub, alice.token, created.body.id, 1);
    await kill(); // the retry is due in 2 s: only the durable schedule knows of it
    return { alice, id: created.body.id as string };
  }

  async function deliveriesRecorded(hub: TestHub, token: string, id: string, n: number) {
    let log = await hub.call('GET', `/webhooks/${id}/deliveries`, { token });
    for (let i = 0; i < 100 && log.body.total < n; i++) {
      await new Promise((r) => setTimeout(r, 100));
      log = await hub.call('GET', `/webhooks/${id}/deliveries`, { token });
    }
    assert.ok(log.body.total >= n, `${log.body.total} of ${n} attempts recorded`);
    return log;
  }

  /** The log shows the whole schedule: three failed attempts, then the dead letter. */
  async function assertRanOut(hub: TestHub, token: string, id: string) {
    const log = await deliveriesRecorded(hub, token, id, 4);
    assert.deepEqual(
      log.body.items.map((a: { attempt: number; status: string }) => [a.attempt, a.status]).reverse(),
      [
        [1, 'failed'],
        [2, 'failed'],
        [3, 'failed'],
        [4, 'dead_lettered'],
      ],
    );
  }

  it('embedded: the hub SIGKILLed between attempts, restarted, delivers every retry', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-restart-'));
    let { child, url } = await spawnHub('start', { HUB_DATA_DIR: dataDir });
    children.push(child);
    const path = '/status/500/embedded-restart';
    const { alice, id } = await scheduleAndKill(remoteHub(url, dataDir), path, () => kill9(child));
    ({ child, url } = await spawnHub('start', { HUB_DATA_DIR: dataDir }));
    children.push(child);
    await rx.waitFor(path, 4, 20_000);
    await assertRanOut(remoteHub(url, dataDir), alice.token, id);
  });

  it('distributed: the dispatcher SIGKILLed between attempts, another started, delivers every retry', async () => {
    const hub = await startHub({ HUB_PROFILE: 'distributed', ...WEBHOOK_ENV }, [
      'api',
      'projector',
      'processor',
    ]);
    try {
      let { child } = await spawnHub('dispatcher', { HUB_PROFILE: 'distributed' });
      children.push(child);
      const path = '/status/503/distributed-restart';
      const { alice, id } = await scheduleAndKill(hub, path, () => kill9(child));
      ({ child } = await spawnHub('dispatcher', { HUB_PROFILE: 'distributed' }));
      children.push(child);
      await rx.waitFor(path, 4, 30_000);
      await assertRanOut(hub, alice.token, id);
      assert.equal(rx.at(path).length, 4);
    } finally {
      await hub.stop();
    }
  });
});
