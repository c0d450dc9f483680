// How the processor writes a batch's outputs. The embedded hand-off checkpoint: the dispatcher may
// deliver jobs before it stores them, so the checkpoint moves past a batch only once its jobs are
// durable, in order, and never past jobs that could not be made so. The log and the hand-off go at
// once, the states after both; on Kafka the next batch does not wait for the states, whose batch
// is committed once they are saved, and with jobs durable later (taken by the dispatcher of the
// process) the states wait for them. The relay's changes taken in memory (HUB_RELAY_HANDOFF): only
// while every partition is held and the topic handled; dropped at a join or when not made durable,
// and then read again by the relay before anything later goes either way. The in-process bus or
// the real broker, a stub dispatcher, with real derivation (a real relay on SQLite for the last).
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { Registry } from 'prom-client';
import { KafkaBus } from '../../infra/bus/kafka.ts';
import { MemoryBus } from '../../infra/bus/memory.ts';
import { SCHEMA_HEADER, TOPICS } from '../../infra/bus/port.ts';
import { MemoryCheckpoints } from '../../infra/checkpoints.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { createLogger } from '../../infra/telemetry.ts';
import type { Job } from '../../processors/delivery/port.ts';
import { relay } from '../../processors/followers/relay.ts';
import { MemoryActorStates, type StatesCheckpoint } from '../../processors/stream/actors.ts';
import type { Change, DeviceActor, WebhookEvent } from '../../processors/stream/derive.ts';
import { type EventLog, MemoryEventLog } from '../../processors/stream/eventlog.ts';
import {
  ProcessorMetrics,
  type ProcessorOptions,
  StreamProcessor,
} from '../../processors/stream/processor.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { deleteTopics, memoryLogger } from '../harness.ts';

const OWNER = 'prn:::accounts:/handoff';
const BROKERS = (process.env.HUB_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const registry = SchemaRegistry.load();
const subscriptions = {
  of: async () => [
    {
      id: 'whk_handoff',
      owner: OWNER,
      enabled: true,
      event_types: ['device.created'],
      devices: [],
      user_meta_keys: [],
      device_meta_keys: [],
    },
  ],
};
/** A change of device d<device> at store position `position` (its stream's `revision`th), as the
 * relay puts it on the changes topic. */
const change = (device: number, position: number, type: string, revision: number, data: object) => {
  const stored = {
    id: `00000000-0000-4000-8000-${String(position).padStart(12, '0')}`,
    type,
    stream: `device-d${device}`,
    position,
    created: Date.now(),
  };
  return {
    key: `d${device}`,
    value: registry.encode('ChangeRecord', {
      ...stored,
      revision,
      schema_version: 1,
      data: JSON.stringify(data),
    }),
    headers: { [SCHEMA_HEADER]: `ChangeRecord.v${registry.currentVersion('ChangeRecord')}` },
    /** The same change as the relay hands it to the processor of its process (take). */
    taken: { ...stored, data } as Change,
  };
};
/** Device d<position>'s creation. */
const created = (position: number) =>
  change(position, position, 'DeviceCreated', 0, {
    prn: `prn:::devices:/d${position}`,
    owner_prn: OWNER,
    nick: 'n',
  });
/** A device-meta change of device d<device>, its first. */
const updated = (device: number, position: number) =>
  change(device, position, 'DeviceMetaUpdated', 1, {
    device_id: `d${device}`,
    owner_prn: OWNER,
    changed: { n: String(position) },
    removed: [],
  });
/** Waits until `what()` holds, polling, at most `ms`; fails with `why()` when it does not. */
const until = async (
  what: () => boolean | Promise<boolean>,
  o: { ms?: number; why?: () => string | Promise<string> } = {},
) => {
  for (const end = Date.now() + (o.ms ?? 2000); !(await what()) && Date.now() < end; )
    await new Promise((r) => setTimeout(r, 10));
  assert.ok(await what(), await o.why?.());
};

/** An event log whose appends wait until `release` is called. */
function logHeldUntilReleased() {
  let release!: () => void;
  const held = new Promise<void>((r) => {
    release = r;
  });
  class HeldLog extends MemoryEventLog {
    override async append(events: WebhookEvent[]): Promise<void> {
      await held;
      return super.append(events);
    }
  }
  return { log: new HeldLog({ retentionMs: 86_400_000 }), release };
}

/** A processor that hands its jobs off as onto the deliveries topic (durable once the call
 * resolves), each hand-off recorded in `handed`. */
function recordingProcessor(o: Pick<ProcessorOptions, 'bus' | 'states' | 'log' | 'logger'>) {
  const handed: Job[][] = [];
  const processor = new StreamProcessor({
    ...o,
    registry,
    subscriptions,
    metrics: new ProcessorMetrics(new Registry()),
    partitionsConcurrently: 1,
    handOff: async (jobs) => {
      handed.push(jobs);
      return undefined;
    },
  });
  return { processor, handed };
}

/** A hand-off as the dispatcher's answers (taken now, durable later): each recorded in `handed`
 * with what settles its durability. */
function durableLater() {
  const handed: { jobs: Job[]; settle: (err?: Error) => void }[] = [];
  const handOff = async (jobs: Job[]) => {
    let settle!: (err?: Error) => void;
    const durable = new Promise<void>((resolve, reject) => {
      settle = (err) => (err ? reject(err) : resolve());
    });
    handed.push({ jobs, settle });
    return { durable };
  };
  return { handed, handOff };
}

/** A Kafka bus on names of its own with a changes topic of `partitions`, the processor group's
 * committed offset of a partition (-1: none), a send to a partition of choice, and what ends it all. */
async function onKafka(level: 'warn' | 'error', partitions = 1) {
  const prefix = `handoff-${randomBytes(4).toString('hex')}-`;
  const bus = new KafkaBus({
    brokers: BROKERS,
    clientId: 'handoff-test',
    logger: createLogger(level),
    prefix,
  });
  const kafka = new Kafka({ clientId: 'handoff-test', brokers: BROKERS, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  const producer = kafka.producer();
  await Promise.all([admin.connect(), producer.connect()]);
  await bus.ensureTopics([{ topic: TOPICS.changes, partitions }]);
  const topic = prefix + TOPICS.changes;
  const committed = async (partition = 0) => {
    const [t] = await admin.fetchOffsets({ groupId: `${prefix}hub-processor`, topics: [topic] });
    return Number(t!.partitions.find((p) => p.partition === partition)!.offset);
  };
  const sendTo = async (partition: number, m: ReturnType<typeof created>) => {
    await producer.send({ topic, acks: -1, messages: [{ ...m, partition }] });
  };
  const close = async () => {
    await bus.close();
    await Promise.all([admin.disconnect(), producer.disconnect()]);
    await deleteTopics(BROKERS, prefix);
  };
  return { bus, committed, sendTo, close };
}

describe('processor hand-off checkpoint (int)', () => {
  it('moves past a batch once its jobs are durable, in order; stays before jobs that could not be', async () => {
    const { logger, lines } = memoryLogger();
    const bus = new MemoryBus({ logger });
    await bus.ensureTopics([{ topic: TOPICS.changes, partitions: 1 }]);
    const checkpoints = new MemoryCheckpoints();
    const { handed, handOff } = durableLater();
    const processor = new StreamProcessor({
      bus,
      registry,
      states: new MemoryActorStates<DeviceActor>(),
      log: new MemoryEventLog({ retentionMs: 86_400_000 }),
      subscriptions,
      logger,
      metrics: new ProcessorMetrics(new Registry()),
      partitionsConcurrently: 1,
      handOff,
      handOffCheckpoint: { checkpoints, name: 'processor-handoff' },
    });
    const checkpoint = () => checkpoints.get('processor-handoff');
    await processor.start();
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await until(() => handed.length === 1);
      await bus.send(TOPICS.changes, [created(2)]);
      await until(() => handed.length === 2); // the next batch was not held up by the first's durability
      assert.equal(handed[0]!.jobs.length, 1);
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(await checkpoint(), 0, 'nothing durable yet');
      handed[1]!.settle();
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(await checkpoint(), 0, 'the second batch is durable, the first is not: it waits');
      handed[0]!.settle();
      await until(async () => (await checkpoint()) === 2);
      // Jobs that could not be made durable: the checkpoint stays before them from then on.
      await bus.send(TOPICS.changes, [created(3)]);
      await until(() => handed.length === 3);
      await bus.send(TOPICS.changes, [created(4)]);
      await until(() => handed.length === 4);
      handed[2]!.settle(new Error('the disk is full'));
      handed[3]!.settle();
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(await checkpoint(), 2);
      assert.ok(lines().some((l) => /hand-off checkpoint stays before them/.test(l)));
    } finally {
      await processor.stop();
      await bus.close();
    }
  });

  it("hands a chunk's jobs off while its event log is written, and saves its states once both are done", async () => {
    // The log's write held: with the two in turn, nothing would be handed off until it is done.
    const { log, release: releaseLog } = logHeldUntilReleased();
    class CountedStates extends MemoryActorStates<DeviceActor> {
      saves = 0;
      override async save(states: Map<string, DeviceActor>, checkpoint?: StatesCheckpoint): Promise<void> {
        this.saves++;
        return super.save(states, checkpoint);
      }
    }
    const { logger } = memoryLogger();
    const bus = new MemoryBus({ logger });
    await bus.ensureTopics([{ topic: TOPICS.changes, partitions: 1 }]);
    const states = new CountedStates();
    const { processor, handed } = recordingProcessor({ bus, states, log, logger });
    await processor.start();
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await until(() => handed.length === 1);
      assert.equal(handed[0]!.length, 1);
      assert.equal(
        (await log.list(OWNER, { limit: 10, skip: 0 })).total,
        0,
        'the log is still being written',
      );
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(states.saves, 0, 'the states wait for the log');
      releaseLog();
      await until(() => states.saves === 1);
      assert.equal((await log.list(OWNER, { limit: 10, skip: 0 })).items[0]?.id, handed[0]![0]!.event.id);
    } finally {
      releaseLog();
      await processor.stop();
      await bus.close();
    }
  });
});

describe('processor on Kafka: a batch saved behind it (int)', function () {
  this.timeout(60_000);

  it("hands the next batch off while the last one's actor states are being saved; commits a batch once they are", async () => {
    const { bus, committed, close } = await onKafka('warn');
    /** Saves held until released, in the order asked. */
    class HeldStates extends MemoryActorStates<DeviceActor> {
      readonly held: (() => void)[] = [];
      override async save(states: Map<string, DeviceActor>, checkpoint?: StatesCheckpoint): Promise<void> {
        await new Promise<void>((r) => this.held.push(r));
        return super.save(states, checkpoint);
      }
    }
    const states = new HeldStates();
    const { processor, handed } = recordingProcessor({
      bus,
      states,
      log: new MemoryEventLog({ retentionMs: 86_400_000 }),
      logger: createLogger('warn'),
    });
    const waitFor = (what: () => boolean | Promise<boolean>, label: string) =>
      until(what, {
        ms: 20_000,
        why: async () =>
          `${label}: held ${states.held.length}, handed ${handed.length}, committed ${await committed()}`,
      });
    await processor.start();
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await waitFor(() => states.held.length === 1, 'first save');
      assert.equal(handed.length, 1);
      // The first batch's states not saved yet: the second batch is handed off all the same.
      await bus.send(TOPICS.changes, [created(2)]);
      await waitFor(() => handed.length === 2, 'second hand-off');
      await waitFor(() => states.held.length === 2, 'second save');
      await new Promise((r) => setTimeout(r, 1500)); // past the bus's commit interval (1 s)
      assert.ok((await committed()) < 1, 'nothing committed while the first states wait');
      // Saved in order, each batch committed once its own states are.
      states.held.shift()!();
      await waitFor(async () => (await committed()) === 1, 'first commit');
      states.held.shift()!();
      await waitFor(async () => (await committed()) === 2, 'second commit');
    } finally {
      for (const release of states.held.splice(0)) release();
      await processor.stop();
      await close();
    }
  });

  it("hands the next batch off while the last one's event log is being written; commits a batch once its log is written", async () => {
    // The log's appends need not hold the derivation up: at a steady rate they then gather in
    // fewer statements (HUB_POSTGRES_LOG_LINGER_MS) without adding to a delivery's latency.
    const { bus, committed, close } = await onKafka('warn');
    class HeldLog extends MemoryEventLog {
      readonly held: (() => void)[] = [];
      override async append(events: WebhookEvent[]): Promise<void> {
        await new Promise<void>((r) => this.held.push(r));
        return super.append(events);
      }
    }
    const log = new HeldLog({ retentionMs: 86_400_000 });
    const { processor, handed } = recordingProcessor({
      bus,
      states: new MemoryActorStates<DeviceActor>(),
      log,
      logger: createLogger('warn'),
    });
    const waitFor = (what: () => boolean | Promise<boolean>, label: string) =>
      until(what, {
        ms: 20_000,
        why: async () =>
          `${label}: logs held ${log.held.length}, handed ${handed.length}, committed ${await committed()}`,
      });
    await processor.start();
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await waitFor(() => log.held.length === 1 && handed.length === 1, 'first batch');
      await bus.send(TOPICS.changes, [created(2)]);
      await waitFor(() => handed.length === 2, 'second hand-off, the first log not written');
      await new Promise((r) => setTimeout(r, 1500)); // past the bus's commit interval (1 s)
      assert.ok((await committed()) < 1, 'nothing committed while the first log waits');
      log.held.shift()!();
      await waitFor(async () => (await committed()) === 1, 'first commit');
      await waitFor(() => log.held.length === 1, 'second log');
      log.held.shift()!();
      await waitFor(async () => (await committed()) === 2, 'second commit');
      assert.equal((await log.list(OWNER, { limit: 10, skip: 0 })).items.length, 2);
    } finally {
      for (const release of log.held.splice(0)) release();
      await processor.stop();
      await close();
    }
  });

  /** A processor on Kafka whose hand-offs answer as the dispatcher of its process does (taken now,
   * durable later), or, while `viaTopic` is set, as the deliveries topic does (durable at once);
   * its states' saves recorded as device@position. */
  async function handingToItsDispatcher(partitions = 1, o: { takesChanges?: boolean; log?: EventLog } = {}) {
    const kafka = await onKafka('error', partitions);
    class SavedStates extends MemoryActorStates<DeviceActor> {
      readonly saved: string[][] = [];
      override async save(states: Map<string, DeviceActor>, checkpoint?: StatesCheckpoint): Promise<void> {
        this.saved.push([...states].map(([k, s]) => `${k}@${s.position}`));
        return super.save(states, checkpoint);
      }
    }
    const states = new SavedStates();
    const later = durableLater();
    const mode = { viaTopic: false };
    const processor = new StreamProcessor({
      bus: kafka.bus,
      registry,
      states,
      log: o.log ?? new MemoryEventLog({ retentionMs: 86_400_000 }),
      subscriptions,
      logger: createLogger('silent'),
      metrics: new ProcessorMetrics(new Registry()),
      partitionsConcurrently: 1,
      takesChanges: o.takesChanges,
      handOff: async (jobs) => {
        if (!mode.viaTopic) return later.handOff(jobs);
        later.handed.push({ jobs, settle: () => {} });
        return undefined;
      },
    });
    const { handed } = later;
    const waitFor = (what: () => boolean | Promise<boolean>, label: string) =>
      until(what, {
        ms: 20_000,
        why: async () =>
          `${label}: handed ${handed.length}, saved ${JSON.stringify(states.saved)}, committed ${await kafka.committed()}`,
      });
    await processor.start();
    const close = async () => {
      for (const h of handed) h.settle();
      await processor.stop();
      await kafka.close();
    };
    return { ...kafka, processor, states, handed, mode, waitFor, close };
  }

  it("with its jobs taken by this process's dispatcher, saves states and commits once they are durable, in order, a topic batch's after them; reads a failed batch again", async () => {
    const { bus, committed, states, handed, mode, waitFor, close } = await handingToItsDispatcher();
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await waitFor(() => handed.length === 1, 'first hand-off');
      // The next batch, of the same device, goes by the topic (as once the dispatcher drains or a
      // second one joins): its states are derived from the first's, and saved after them.
      mode.viaTopic = true;
      await bus.send(TOPICS.changes, [updated(1, 2)]);
      await waitFor(() => handed.length === 2, 'second hand-off'); // not held up by the first
      mode.viaTopic = false;
      await new Promise((r) => setTimeout(r, 1500)); // past the bus's commit interval (1 s)
      assert.deepEqual(states.saved, [], "no states saved while the first batch's jobs are not durable");
      assert.ok((await committed()) < 1, 'nothing committed');
      handed[0]!.settle();
      await waitFor(async () => (await committed()) === 2, 'both committed');
      assert.deepEqual(states.saved, [['d1@1'], ['d1@2']], 'saved in order');

      // Jobs that could not be made durable: not saved, not committed, the batch read again.
      await bus.send(TOPICS.changes, [created(3)]);
      await waitFor(() => handed.length === 3, 'third hand-off');
      handed[2]!.settle(new Error('the schedule did not answer'));
      await waitFor(() => handed.length === 4, 'the third batch handed off again');
      assert.equal(handed[3]!.jobs[0]!.job_id, handed[2]!.jobs[0]!.job_id, 'into the same job');
      assert.equal(states.saved.length, 2);
      handed[3]!.settle();
      await waitFor(async () => (await committed()) === 3, 'third committed');
      assert.deepEqual(states.saved.at(-1), ['d3@3']);
    } finally {
      await close();
    }
  });

  it('after a join, a batch whose jobs were not durable is derived again from the states saved, its first save dropped', async () => {
    const { committed, sendTo, states, handed, waitFor, close } = await handingToItsDispatcher(2);
    const jobsHanded = () => handed.flatMap((h) => h.jobs.map((j) => j.job_id));
    try {
      await sendTo(0, created(1));
      await waitFor(() => handed.length === 1, "the first partition's hand-off");
      const first = handed[0]!.jobs[0]!.job_id;
      // The other partition's batch fails: the member joins again, and each partition is read
      // again from its last commit, the first one's batch too, its jobs not durable yet.
      await sendTo(1, created(2));
      await waitFor(() => handed.length === 2, "the second partition's hand-off");
      const second = handed[1]!.jobs[0]!.job_id;
      handed[1]!.settle(new Error('the schedule did not answer'));
      await waitFor(
        () => jobsHanded().filter((id) => id === first).length === 2,
        'the first batch derived again into its job',
      );
      await waitFor(() => jobsHanded().filter((id) => id === second).length === 2, 'the second too');
      handed[0]!.settle(); // the first hand-off's jobs durable at last: its save was dropped at the join
      for (const h of handed.slice(2)) h.settle();
      await waitFor(async () => (await committed(0)) === 1 && (await committed(1)) === 1, 'both committed');
      assert.deepEqual(states.saved.flat().sort(), ['d1@1', 'd2@2'], 'each state saved once');
    } finally {
      await close();
    }
  });

  /** A second processor of the group on `bus`: the partitions are then shared. */
  const secondMember = (bus: KafkaBus, o: Partial<ProcessorOptions> = {}) =>
    new StreamProcessor({
      bus,
      registry,
      states: new MemoryActorStates<DeviceActor>(),
      log: new MemoryEventLog({ retentionMs: 86_400_000 }),
      subscriptions,
      logger: createLogger('silent'),
      metrics: new ProcessorMetrics(new Registry()),
      partitionsConcurrently: 1,
      takesChanges: true,
      handOff: async () => undefined,
      ...o,
    });

  it("takes the relay's changes in memory only while it holds every partition and has handled all the topic holds; saves them after the topic's", async () => {
    const { bus, processor, committed, states, handed, waitFor, close } = await handingToItsDispatcher(2, {
      takesChanges: true,
    });
    try {
      await bus.send(TOPICS.changes, [created(1)]);
      await waitFor(() => handed.length === 1, 'the topic batch handed off');
      // Its jobs not durable: not committed, so a change handed in memory could overtake it.
      assert.equal(await processor.takesChanges(300), false, 'not while the topic has a batch not durable');
      await assert.rejects(processor.take([updated(1, 2).taken]), /no longer all this processor's/);
      handed[0]!.settle();
      assert.equal(await processor.takesChanges(10_000), true, 'once it is committed');
      assert.equal(Math.max(await committed(0), await committed(1)), 1, 'the topic batch committed');
      const taken = await processor.take([updated(1, 2).taken, created(3).taken]);
      await waitFor(() => handed.length === 2, 'the changes taken handed their jobs on');
      assert.deepEqual(
        handed[1]!.jobs.map((j) => j.event.type),
        ['device.created'],
        "the update derives no job here (the subscription takes creations): d3's creation does",
      );
      assert.deepEqual(states.saved, [['d1@1']], 'the topic batch saved, the taken ones wait for their jobs');
      handed[1]!.settle();
      await taken.durable;
      assert.deepEqual(
        states.saved,
        [['d1@1'], ['d1@2', 'd3@3']],
        'derived from the saved state, saved after it',
      );
      // Taken again (the relay read them again after a failure): nothing derived twice.
      const again = await processor.take([updated(1, 2).taken, created(3).taken]);
      await waitFor(() => handed.length === 3, 'handed on again');
      assert.deepEqual(handed[2]!.jobs, [], 'no job twice');
      handed[2]!.settle();
      await again.durable;
    } finally {
      await close();
    }
  });

  it('drops the changes taken and not durable when another member joins: the relay sends them again through the topic', async () => {
    const first = await handingToItsDispatcher(2, { takesChanges: true });
    let second: StreamProcessor | undefined;
    try {
      assert.equal(await first.processor.takesChanges(10_000), true, 'alone, with an empty topic');
      const taken = await first.processor.take([created(1).taken]);
      await first.waitFor(() => first.handed.length === 1, 'handed on');
      const dropped = taken.durable.then(
        () => 'saved',
        (err: Error) => err.message,
      );
      // A second processor of the group: the partitions are shared, the first holds half.
      second = secondMember(first.bus);
      await second.start();
      await first.waitFor(
        async () => !(await first.processor.takesChanges(0)),
        'the first no longer takes changes',
      );
      first.handed[0]!.settle(); // its jobs durable only now: its states are not saved
      assert.match(await dropped, /assigned again/);
      assert.deepEqual(first.states.saved, [], 'nothing saved of what was dropped');
      assert.equal(await second.takesChanges(0), false, 'nor does the second');
    } finally {
      await second?.stop();
      await first.close();
    }
  });

  it('a batch taken in memory and not made durable: takes nothing more until the relay reads it again, then derives it again', async () => {
    const { processor, states, handed, waitFor, close } = await handingToItsDispatcher(2, {
      takesChanges: true,
    });
    try {
      assert.equal(await processor.takesChanges(10_000), true);
      const d1 = created(1).taken;
      const first = await processor.take([d1]);
      await waitFor(() => handed.length === 1, 'handed on');
      handed[0]!.settle(new Error('the schedule did not answer'));
      await assert.rejects(first.durable);
      assert.equal(processor.takesDropped, true);
      await assert.rejects(processor.take([created(2).taken]), /read them again first/);
      processor.rereading(); // as the relay does when it reads again from its last durable batch
      assert.equal(await processor.takesChanges(10_000), true);
      const again = await processor.take([d1, created(2).taken]);
      await waitFor(() => handed.length === 2, 'handed on again');
      assert.deepEqual(
        handed[1]!.jobs.map((j) => j.job_id),
        [handed[0]!.jobs[0]!.job_id, handed[1]!.jobs[1]!.job_id],
        "the first batch's job again, derived anew (not skipped as applied)",
      );
      handed[1]!.settle();
      await again.durable;
      assert.deepEqual(states.saved, [['d1@1', 'd2@2']]);
    } finally {
      await close();
    }
  });

  it('a batch being taken in memory when another member joins is neither saved nor kept', async () => {
    const { log: heldLog, release: releaseLog } = logHeldUntilReleased();
    const first = await handingToItsDispatcher(2, {
      takesChanges: true,
      log: heldLog,
    });
    const second = secondMember(first.bus);
    try {
      assert.equal(await first.processor.takesChanges(10_000), true);
      const taking = first.processor.take([created(1).taken]);
      await first.waitFor(() => first.handed.length === 1, 'handed on, the log still being written');
      await second.start();
      await first.waitFor(() => first.processor.takesDropped, 'dropped at the join');
      releaseLog();
      const taken = await taking;
      first.handed[0]!.settle();
      await assert.rejects(taken.durable, /assigned again/);
      assert.deepEqual(first.states.saved, [], 'derived before the join: not saved');
    } finally {
      releaseLog();
      await second.stop();
      await first.close();
    }
  });

  it('the relay: after a join drops a batch taken in memory, reads it again before anything later, so none is overtaken', async () => {
    const log = new MemoryEventLog({ retentionMs: 86_400_000 });
    const first = await handingToItsDispatcher(2, { takesChanges: true, log });
    // The second member shares the stores, as processes of one hub do (Redis, PostgreSQL).
    const second = secondMember(first.bus, { states: first.states, log });
    const store = new SqliteEventStore(join(mkdtempSync(join(tmpdir(), 'hub-relay-')), 'events.sqlite'));
    const changeRelay = relay({
      store,
      bus: first.bus,
      registry,
      checkpoints: new MemoryCheckpoints(),
      logger: createLogger('silent'),
      metrics: new Registry(),
      handOff: first.processor,
    });
    const logged = async () =>
      (await log.list(OWNER, { limit: 10, skip: 0 })).items.map((e) => e.type).sort();
    try {
      await store.append('device-d1', [
        {
          id: randomUUID(),
          type: 'DeviceCreated',
          data: { prn: 'prn:::devices:/d1', owner_prn: OWNER, nick: 'n' },
        },
      ]);
      changeRelay.start();
      await first.waitFor(() => first.handed.length === 1, 'the creation taken in memory, its job held');
      await second.start();
      await first.waitFor(() => first.processor.takesDropped, 'dropped at the join');
      // A later change of the device, read while the creation is still to be read again.
      await store.append('device-d1', [
        {
          id: randomUUID(),
          type: 'DeviceMetaUpdated',
          data: { device_id: 'd1', owner_prn: OWNER, changed: { temp: '20' }, removed: [] },
        },
      ]);
      await new Promise((r) => setTimeout(r, 500));
      first.handed[0]!.settle(); // the dropped batch's jobs durable at last (its states not saved)
      await first.waitFor(
        async () => (await logged()).includes('device.device_meta.updated'),
        'the update derived from the creation',
      );
      assert.deepEqual(await logged(), ['device.created', 'device.device_meta.updated']);
    } finally {
      await changeRelay.stop();
      await second.stop();
      await first.close();
      store.close?.();
    }
  });
});
