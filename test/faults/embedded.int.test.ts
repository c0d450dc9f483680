// The fault suite's embedded case: one `hub start` process whose derived state lives on disk
// (HUB_EMBEDDED_STATE=sqlite, the default), killed with -9 under a steady load of device-meta
// writes and started again on its data dir, twice. Then the audit of the distributed case (every
// accepted write in the event log once, delivered at least once with its logged id), the event log
// holding each derived event once, and every read model equal to a fresh replay of the store.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { SqliteReadStore } from '../../infra/readstore/sqlite.ts';
import { openDerivedDatabase } from '../../infra/sqlite.ts';
import { endProcess, type RoleProcess, remoteHub, signup, spawnRole } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { assertReadModelsEqualReplay, audit, fleet, freePort, steadyLoad, subscribe } from './cluster.ts';

const RATE = 100; // writes per second
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('faults under load, embedded profile: kill -9 and start again (int)', function () {
  this.timeout(300_000);
  let rx: Receiver;
  let hub: RoleProcess | undefined;

  before(async () => {
    rx = await new Receiver().start();
  });
  after(async () => {
    if (hub) await endProcess(hub.child, 'SIGKILL');
    await rx?.stop();
  });

  it('every accepted write logged once and delivered, read models equal a replay, after two kill -9', async () => {
    const port = await freePort();
    const env = {
      HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-faults-embedded-')),
      HUB_PORT: String(port),
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_LOGIN_LIMIT_PER_MINUTE: '100000',
      HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE: '100000',
      HUB_SHUTDOWN_TIMEOUT_MS: '5000',
    };
    hub = await spawnRole('start', env);
    const api = remoteHub(hub.url, env.HUB_DATA_DIR);
    const user = await signup(api, `crash${Date.now().toString(36)}`);
    const devices = await fleet(api, user, 8);
    await subscribe(api, user, `${rx.url}/ok/embedded`);
    const load = steadyLoad(hub.url, devices, RATE);
    for (let round = 0; round < 2; round++) {
      await sleep(2500);
      const since = load.accepted.size;
      await endProcess(hub.child, 'SIGKILL');
      hub = await spawnRole('start', env);
      await load.acceptingAgain(since, `kill -9 #${round + 1}`, 60_000);
    }
    await sleep(1500);
    await load.stop();
    assert.ok(load.accepted.size > RATE * 4, `${load.accepted.size} writes accepted of ${load.sent()}`);

    const figures = await audit(api, user, load.accepted, rx, ['/ok/embedded'], 120_000).catch((err) => {
      process.stderr.write(`--- hub\n${hub!.output().slice(-3000)}\n`);
      throw err;
    });
    // Each derived event once in the log: as many entries as distinct ids.
    const ids: string[] = [];
    for (let skip = 0; ; skip += 500) {
      const page = await api.call('GET', `/webhooks/events?limit=500&skip=${skip}`, { token: user.token });
      ids.push(...page.body.items.map((e: { id: string }) => e.id));
      if (page.body.items.length < 500) break;
    }
    assert.equal(new Set(ids).size, ids.length, 'no event twice in the log');
    process.stderr.write(`faults (embedded): ${JSON.stringify(figures)}\n`);

    // Stopped, its files are read here: every read model equal to a fresh replay of the store.
    await endProcess(hub.child, 'SIGTERM');
    hub = undefined;
    const store = new SqliteEventStore(join(env.HUB_DATA_DIR, 'events.sqlite'));
    const derived = openDerivedDatabase(join(env.HUB_DATA_DIR, 'derived.sqlite'));
    const kept = new SqliteReadStore(derived);
    try {
      await assertReadModelsEqualReplay(store, kept);
    } finally {
      await kept.close();
      await derived.close();
      await store.close();
    }
  });
});
