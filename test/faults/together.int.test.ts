// The distributed profile with every role in one process (`hub start`), on the real PostgreSQL,
// Redis and Kafka, under a steady load of device-meta writes. While its dispatcher is the only one,
// its processor hands the delivery jobs straight to it (HUB_PROCESSOR_HANDOFF=auto): the deliveries
// topic carries none. The process killed -9 twice under load and started again: every accepted
// write is delivered, at least once, with its logged event id (the actor states are saved only once
// the jobs are finished or stored). A second dispatcher started beside it: the jobs go through the
// topic again, and are delivered too.
import assert from 'node:assert/strict';
import { Kafka, logLevel } from 'kafkajs';
import { testConfig } from '../harness.ts';
import { type RoleProcess, signup, spawnRole } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { audit, type Cluster, endProcess, fleet, startCluster, steadyLoad, subscribe } from './cluster.ts';

const RATE = 50; // writes per second
const REDIS_DB = 5; // no other test or bench uses it
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('distributed, every role in one process: jobs handed to its dispatcher (int)', function () {
  this.timeout(300_000);
  let rx: Receiver;
  let cluster: Cluster;
  let second: RoleProcess | undefined;
  const admin = new Kafka({
    clientId: 'together-test',
    brokers: testConfig().kafkaBrokers,
    logLevel: logLevel.NOTHING,
  }).admin();

  before(async () => {
    rx = await new Receiver().start();
    cluster = await startCluster(
      'together',
      REDIS_DB,
      { HUB_WEBHOOK_TIMEOUT_MS: '1500', HUB_SHUTDOWN_TIMEOUT_MS: '5000' },
      'together',
    );
    await admin.connect();
  });
  after(async () => {
    if (second) await endProcess(second.child, 'SIGKILL');
    await admin.disconnect();
    await cluster?.stop();
    await rx?.stop();
  });

  const prefix = () => cluster.env.HUB_KAFKA_PREFIX!;
  /** Messages ever put on the deliveries topic. */
  const jobsOnTopic = async () =>
    (await admin.fetchTopicOffsets(`${prefix()}deliveries`)).reduce((n, p) => n + Number(p.high), 0);
  /** Waits until the dispatchers' group is stable with `n` members. */
  const dispatchers = async (n: number) => {
    let members = -1;
    for (let i = 0; i < 300 && members !== n; i++) {
      const { groups } = await admin.describeGroups([`${prefix()}hub-dispatcher`]);
      members = groups[0]?.state === 'Stable' ? groups[0].members.length : -1;
      if (members !== n) await sleep(200);
    }
    assert.equal(members, n, `${n} dispatchers in a stable group`);
  };

  it('puts no job on the topic while its dispatcher is the only one; killed -9 twice under load, loses none; with a second dispatcher, the topic again', async () => {
    const { hub } = cluster;
    const user = await signup(hub, `together${Date.now().toString(36)}`);
    const devices = await fleet(hub, user, 8);
    await subscribe(hub, user, `${rx.url}/ok/together`);
    await dispatchers(1);
    await sleep(2000); // the processor reads an owner's subscriptions at most once a second
    const load = steadyLoad(cluster.api, devices, RATE);
    try {
      await sleep(4000);
      assert.ok(rx.at('/ok/together').length > RATE, `${rx.at('/ok/together').length} delivered`);
      assert.equal(await jobsOnTopic(), 0, 'the jobs went straight to the dispatcher of the process');

      for (let kill = 0; kill < 2; kill++) {
        const since = load.accepted.size;
        await endProcess(cluster.roles.get('api')!.child, 'SIGKILL');
        await cluster.restart('api');
        await load.acceptingAgain(since, `kill -9 ${kill + 1}`, 60_000);
        await sleep(2500);
      }

      // A second dispatcher: each holds some of the topic's partitions, and the jobs go through it.
      second = await spawnRole('dispatcher', { ...cluster.env, HUB_PORT: '0' });
      await dispatchers(2);
      const before = await jobsOnTopic();
      await sleep(3000);
      assert.ok((await jobsOnTopic()) > before, 'jobs on the topic once a second dispatcher runs');
    } finally {
      await load.stop();
    }
    const figures = await audit(hub, user, load.accepted, rx, ['/ok/together'], 120_000).catch((err) => {
      for (const p of new Set([...cluster.roles.values(), ...(second ? [second] : [])]))
        process.stderr.write(`--- ${p.output().slice(-3000)}\n`);
      throw err;
    });
    assert.equal(figures.lost, 0);
    process.stderr.write(`together: ${JSON.stringify(figures)}\n`);
  });
});
