// The stream processor on the real Kafka broker, Redis and PostgreSQL (distributed profile):
// every event type from real API calls (one processor process: its relay hands it the changes in
// memory); two processor processes sharing the partitions, one SIGKILLed mid-stream (the changes
// go through the topic, then to the survivor in memory); the relay SIGKILLed and restarted. After
// each, the owner's event log holds exactly the events the changes derive, by id: none lost, none
// twice.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { KafkaBus } from '../../infra/bus/kafka.ts';
import { TOPICS } from '../../infra/bus/port.ts';
import { createLogger } from '../../infra/telemetry.ts';
import { eventId } from '../../processors/stream/derive.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { endProcess, signup, spawnRole, startHub, type TestHub, type User } from '../hub.ts';
import { assertDerived, assertJobs, everyEventType, jobsOf, logOf, subscribe } from './scenario.ts';

const BROKERS = (process.env.HUB_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');

/** `hub processor` in its own process, resolved once it serves (it has then joined the group). */
const processor = async (env: Record<string, string> = {}): Promise<ChildProcess> =>
  (await spawnRole('processor', { HUB_PROFILE: 'distributed', ...env })).child;
const kill = async (child: ChildProcess, signal: NodeJS.Signals = 'SIGKILL') => {
  await endProcess(child, signal);
};

const ENV = {
  HUB_PROFILE: 'distributed',
  HUB_WEBHOOK_ALLOW_HTTP: 'true',
  HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
};

describe('stream processor on Kafka (int)', function () {
  this.timeout(120_000);
  let hub: TestHub;
  const children: ChildProcess[] = [];
  const admin = new Kafka({ clientId: 'hub-test', brokers: BROKERS, logLevel: logLevel.NOTHING }).admin();

  before(async () => {
    hub = await startHub(ENV);
    await admin.connect();
  });
  afterEach(async () => {
    await Promise.all(children.splice(0).map((c) => kill(c, 'SIGTERM')));
  });
  after(async () => {
    await admin.disconnect();
    await hub?.stop();
  });

  /** Appends, for `devices` new devices of a fresh owner, a creation and `updates` metadata
   * changes each, in rounds spread over `ms`; returns the owner and the event ids to expect. */
  async function load(
    devices: number,
    updates: number,
    ms: number,
    during?: (round: number) => Promise<void>,
  ) {
    const owner = `prn:::accounts:/load-${randomBytes(4).toString('hex')}`;
    const ids = Array.from({ length: devices }, () => randomBytes(12).toString('hex'));
    const expected = new Set<string>();
    const append = async (id: string, type: string, data: Record<string, unknown>, derived: string) => {
      const source = crypto.randomUUID();
      const { nextRevision } = await hub.node.store.append(`device-${id}`, [{ id: source, type, data }]);
      // The stored time leads the id (from the cut-over on): read it back.
      const [stored] = await hub.node.store.readStream(`device-${id}`, nextRevision, 1);
      expected.add(eventId(source, derived, stored!.created));
    };
    await Promise.all(
      ids.map((id) =>
        append(
          id,
          'DeviceCreated',
          {
            device_id: id,
            prn: `prn:::devices:/${id}`,
            owner_id: 'o',
            owner_prn: owner,
            owner_nick: 'load',
            nick: `d-${id}`,
            secret_sealed: 's',
            challenge: 'c',
            user_meta: {},
            device_meta: {},
            certificate: null,
          },
          'device.created',
        ),
      ),
    );
    for (let round = 0; round < updates; round++) {
      await Promise.all(
        ids.map((id) =>
          append(
            id,
            'DeviceMetaUpdated',
            { device_id: id, owner_prn: owner, changed: { n: String(round) }, removed: [] },
            'device.device_meta.updated',
          ),
        ),
      );
      await during?.(round);
      await new Promise((r) => setTimeout(r, ms / updates));
    }
    return { owner, ids, expected };
  }

  /** Waits until the owner's log holds `expected.size` events, then checks it holds exactly them,
   * each device's in the order of its changes. */
  async function assertLogged(owner: string, ids: string[], expected: Set<string>, updates: number) {
    const log = hub.node.eventLog;
    const deadline = Date.now() + 60_000;
    let total = 0;
    while (Date.now() < deadline) {
      total = (await log.list(owner, { limit: 1, skip: 0 })).total;
      if (total >= expected.size) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const all = await log.list(owner, { limit: expected.size + 100, skip: 0 });
    const got = all.items.map((e) => e.id);
    assert.equal(all.total, expected.size, `logged ${all.total} of ${expected.size}`);
    assert.equal(new Set(got).size, got.length, 'an event id logged twice');
    assert.deepEqual(new Set(got), expected);
    for (const id of ids.slice(0, 20)) {
      const mine = all.items.filter((e) => e.resource_prn === `prn:::devices:/${id}`).reverse();
      assert.deepEqual(
        mine.map((e) => (e.type === 'device.created' ? 'created' : (e.data.changed as { n: string }).n)),
        ['created', ...Array.from({ length: updates }, (_, i) => String(i))],
      );
    }
  }

  it('derives every event type from real API calls, in order, into the owner’s log', async () => {
    const only = await spawnRole('processor', { HUB_PROFILE: 'distributed' });
    children.push(only.child);
    const alice: User = await signup(hub, `alice${randomBytes(3).toString('hex')}`);
    const subscription = await subscribe(hub, alice, {
      event_types: ['step.status.changed', 'device.device_meta.updated'],
      device_meta_keys: ['temp'],
    });
    const scenario = await everyEventType(hub, alice);
    const log = await logOf(hub, alice, scenario.device.prn, scenario.expected.length, 60_000);
    assertDerived(log, scenario, alice);
    // One job per matching subscription and event, keyed by subscription, on the deliveries topic.
    const bus = new KafkaBus({ brokers: BROKERS, clientId: 'hub-test', logger: createLogger('silent') });
    try {
      assertJobs(await jobsOf(bus, subscription, 3), log, subscription);
    } finally {
      await bus.close();
    }
    // The only processor, so its relay handed it the changes in memory (HUB_RELAY_HANDOFF auto).
    const metrics = await (await fetch(`${only.url}/metrics`)).text();
    const handed = Number(/^hub_relay_events_handed_off_total (\d+)/m.exec(metrics)?.[1] ?? 0);
    assert.ok(handed >= scenario.expected.length, `handed in memory: ${handed}`);
  });

  it('two processor processes share the partitions; one SIGKILLed mid-stream, every event is derived once by id', async () => {
    const [a, b] = await Promise.all([processor(), processor()]);
    children.push(a!, b!);
    let members = 0;
    for (let i = 0; i < 100 && members < 2; i++) {
      const { groups } = await admin.describeGroups(['hub-processor']);
      members = groups[0]?.state === 'Stable' ? groups[0].members.length : 0;
      if (members < 2) await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(members, 2, 'both processes joined the group');
    const updates = 20;
    const { owner, ids, expected } = await load(200, updates, 4000, async (round) => {
      if (round === 8) await kill(a!);
    });
    await assertLogged(owner, ids, expected, updates);
  });

  it('the relay SIGKILLed and restarted loses nothing; what it sends again carries the same ids', async () => {
    // Where the topic ends now: the audit below reads from here, not the topic's whole history.
    const start = await admin.fetchTopicOffsets(TOPICS.changes);
    // Every change through the topic, for the audit below: with the default (HUB_RELAY_HANDOFF
    // auto), the only processor would be handed the changes in memory by its relay.
    const viaTopic = { HUB_RELAY_HANDOFF: 'topic' };
    let p = await processor(viaTopic);
    children.push(p);
    const updates = 20;
    const { owner, ids, expected } = await load(200, updates, 4000, async (round) => {
      if (round === 10) {
        await kill(p);
        p = await processor(viaTopic);
        children.push(p);
      }
    });
    await assertLogged(owner, ids, expected, updates);

    // Read the changes topic back: every change of these devices is on it at least once, and
    // each change's copies are the same record.
    const registry = SchemaRegistry.load();
    const ours = new Set(ids);
    const seen = new Map<string, string>();
    let copies = 0;
    const consumer = new Kafka({
      clientId: 'hub-test',
      brokers: BROKERS,
      logLevel: logLevel.NOTHING,
    }).consumer({
      groupId: `audit-${randomBytes(4).toString('hex')}`,
    });
    await consumer.connect();
    await consumer.subscribe({ topic: TOPICS.changes, fromBeginning: true });
    const changes = ids.length * (updates + 1);
    await new Promise<void>((resolve) => {
      let count = 0;
      consumer.on(consumer.events.GROUP_JOIN, () => {
        for (const { partition, offset } of start)
          consumer.seek({ topic: TOPICS.changes, partition, offset });
      });
      void consumer.run({
        eachMessage: async ({ message }) => {
          if (!ours.has(message.key!.toString())) return;
          const r = registry.decode('ChangeRecord', 1, message.value!) as { id: string };
          const record = JSON.stringify(r);
          if (seen.has(r.id)) {
            copies++;
            assert.equal(record, seen.get(r.id), 'a change sent again differs');
          }
          seen.set(r.id, record);
          if (++count >= changes && seen.size >= changes) resolve();
        },
      });
    });
    await consumer.disconnect();
    assert.equal(seen.size, changes);
    if (copies > 0) console.log(`      (the restarted relay sent ${copies} changes again)`);
  });
});
