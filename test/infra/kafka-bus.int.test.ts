// The Kafka bus's consumer groups on the real broker: a member commits what it finished at most
// once a second (not after every batch), by the time it has stopped (its successor starts past
// it), across a rebalance it resumes the partitions it keeps where it was, not from the last
// commit, and a member that crashed gives its partitions up after its session.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { KafkaBus, KafkaRequestQueue } from '../../infra/bus/kafka.ts';
import { createLogger } from '../../infra/telemetry.ts';
import { deleteTopics } from '../harness.ts';

const BROKERS = (process.env.HUB_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** A member in a process of its own, to be killed: it prints each assignment's partitions as a line
 * of JSON. Arguments: the bus's and telemetry's module URLs, brokers, prefix, group, topic, session (ms). */
const MEMBER_PROCESS = `
  const [busUrl, telemetryUrl, brokers, prefix, group, topic, session] = process.argv.slice(1);
  const { KafkaBus } = await import(busUrl);
  const { createLogger } = await import(telemetryUrl);
  const bus = new KafkaBus({
    brokers: brokers.split(','), clientId: 'bus-test', logger: createLogger('silent'), prefix,
    sessionTimeoutMs: Number(session),
  });
  await bus.consume({ group, topic, handle: async () => {}, onAssignment: (p) => console.log(JSON.stringify(p)) });
`;
/** Waits until `done()` holds, polling, at most `ms`. */
async function until(done: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  for (const end = Date.now() + ms; !(await done()) && Date.now() < end; ) await sleep(20);
}

describe('Kafka bus consumer groups (int)', function () {
  this.timeout(90_000);
  const prefix = `bus-${randomBytes(4).toString('hex')}-`;
  const logger = createLogger('warn');
  const bus = new KafkaBus({ brokers: BROKERS, clientId: 'bus-test', logger, prefix });
  /** Commits only a member's first chunk before a stop: what a stop or a join does is then plain. */
  const slowCommits = new KafkaBus({
    brokers: BROKERS,
    clientId: 'bus-test',
    logger,
    prefix,
    commitIntervalMs: 60_000,
  });
  const admin = new Kafka({ clientId: 'bus-test', brokers: BROKERS, logLevel: logLevel.NOTHING }).admin();

  before(async () => {
    await admin.connect();
    await bus.ensureTopics([
      { topic: 'one', partitions: 1 },
      { topic: 'two', partitions: 2 },
      { topic: 'later', partitions: 1 },
      { topic: 'failed', partitions: 1 },
      { topic: 'chunks', partitions: 1 },
    ]);
  });
  after(async () => {
    await Promise.all([bus.close(), slowCommits.close()]);
    await admin.disconnect();
    await deleteTopics(BROKERS, prefix);
  });

  /** The group's committed offsets of `topic`, by partition (-1: none). */
  const committed = async (group: string, topic = 'one') => {
    const [t] = await admin.fetchOffsets({ groupId: prefix + group, topics: [prefix + topic] });
    return new Map(t!.partitions.map((p) => [p.partition, Number(p.offset)]));
  };
  const end = async (topic = 'one') =>
    new Map((await admin.fetchTopicOffsets(prefix + topic)).map((p) => [p.partition, Number(p.offset)]));
  const send = (value: string, topic = 'one', key = 'k') =>
    bus.send(topic, [{ key, value: Buffer.from(value) }]);
  /** A member of `group` keeping what it is handed, in order, and its partitions. */
  const member = async (on: KafkaBus, group: string, topic = 'one') => {
    const seen: { value: string; partition: number }[] = [];
    const held: number[][] = [];
    /** The topic's partitions each assignment was told of. */
    const of: number[] = [];
    const consumer = await on.consume({
      group,
      topic,
      handle: async (messages) => {
        for (const m of messages) seen.push({ value: m.value.toString(), partition: m.partition });
      },
      onAssignment: (partitions, count) => {
        held.push(partitions);
        of.push(count);
      },
    });
    return { seen, held, of, consumer, values: () => seen.map((s) => s.value) };
  };
  const newGroup = () => `g-${randomBytes(4).toString('hex')}`;

  it('ping answers from the broker, and rejects within seconds for one that does not answer', async () => {
    await bus.ping();
    // Probes that come while one is out share its answer.
    assert.equal(bus.ping(), bus.ping());
    await bus.ping();
    const silent = createLogger('silent');
    const closed = new KafkaBus({ brokers: ['127.0.0.1:1'], clientId: 'bus-test', logger: silent, prefix });
    const started = Date.now();
    try {
      await assert.rejects(closed.ping());
      assert.ok(Date.now() - started < 5000, `refused in ${Date.now() - started} ms`);
    } finally {
      await closed.close();
    }
  });

  it('a connection whose requests are answered checks its queue no more (no 1-ms timer while idle)', async () => {
    await send('wake');
    await sleep(200); // the send's answers are in
    const proto = KafkaRequestQueue.prototype;
    const check = proto.checkPendingRequests;
    let checks = 0;
    proto.checkPendingRequests = function (this: typeof proto & { clientId?: string }) {
      if (this.clientId === 'bus-test') checks++; // this file's clients only (its bus and admin)
      return check.call(this);
    };
    try {
      await sleep(1000);
    } finally {
      proto.checkPendingRequests = check;
    }
    // kafkajs 2.2.4 as published: about 900 a second for the producer's connection alone. Now only
    // answers check, and none of this file's clients is waiting for one.
    assert.ok(checks < 50, `${checks} checks of the request queue in an idle second`);
  });

  it('commits what it finished at most once a second, not after every batch, and within a second when no more come', async () => {
    const group = newGroup();
    const { values, consumer } = await member(bus, group);
    const start = (await end()).get(0)!;
    // Twenty messages, each its own batch, over about 600 ms; the committed offset polled meanwhile.
    const offsets = new Set<number>();
    let polling = true;
    const poller = (async () => {
      while (polling) {
        offsets.add((await committed(group)).get(0)!);
        await sleep(10);
      }
    })();
    const began = Date.now();
    for (let i = 0; i < 20; i++) {
      await send(`a${i}`);
      await sleep(30);
    }
    await until(() => values().filter((v) => v.startsWith('a')).length >= 20);
    polling = false;
    await poller;
    const seconds = Math.ceil((Date.now() - began) / 1000);
    assert.equal(values().filter((v) => v.startsWith('a')).length, 20);
    // kafkajs's auto-commit commits after every batch: here about twenty offsets in turn.
    const moved = [...offsets].filter((o) => o > start);
    assert.ok(
      moved.length <= 1 + seconds,
      `committed offsets seen in ${seconds} s: ${[...offsets].join(', ')}`,
    );
    // No more messages: the last ones are committed within a second all the same.
    await until(async () => (await committed(group)).get(0) === start + 20, 3000);
    assert.equal((await committed(group)).get(0), start + 20);
    await consumer.stop();
  });

  it('a consumer’s maxBatch bounds each handle call, whatever a fetch brings', async () => {
    const group = newGroup();
    await bus.send(
      'chunks',
      Array.from({ length: 25 }, (_, i) => ({ key: 'k', value: Buffer.from(`m${i}`) })),
    );
    const sizes: number[] = [];
    const seen: string[] = [];
    const consumer = await bus.consume({
      group,
      topic: 'chunks',
      maxBatch: 7,
      handle: async (messages) => {
        sizes.push(messages.length);
        for (const m of messages) seen.push(m.value.toString());
      },
    });
    try {
      await until(() => seen.length >= 25);
      assert.deepEqual(
        seen,
        Array.from({ length: 25 }, (_, i) => `m${i}`),
      );
      assert.ok(Math.max(...sizes) <= 7, `handle calls of ${sizes.join(', ')} messages`);
      assert.ok(sizes.length >= 4);
    } finally {
      await consumer.stop();
    }
  });

  it('a stopped member has committed all it finished: the next one gets none of it again', async () => {
    const group = newGroup();
    const first = await member(slowCommits, group);
    await send('first');
    await until(async () => (await committed(group)).get(0) === (await end()).get(0));
    const before = (await committed(group)).get(0)!;
    for (let i = 0; i < 10; i++) await send(`b${i}`);
    await until(() => first.values().filter((v) => v.startsWith('b')).length >= 10);
    assert.equal(first.values().filter((v) => v.startsWith('b')).length, 10);
    // Finished, and not committed yet (the next commit is a minute away): the stop commits them.
    assert.equal((await committed(group)).get(0), before);
    await first.consumer.stop();
    assert.equal((await committed(group)).get(0), before + 10);

    const next = await member(slowCommits, group);
    await send('after');
    await until(() => next.values().includes('after'));
    await next.consumer.stop();
    assert.deepEqual(next.values(), ['after']);
  });

  it('a chunk handled now and durable later: the next chunks come at once, offsets commit only up to what is durable, in order', async () => {
    const group = newGroup();
    const start = (await end('later')).get(0)!;
    // Each chunk taken at once and made durable only when the test says: the first one last.
    const durable = new Map<string, () => void>();
    const seen: string[] = [];
    const consumer = await bus.consume({
      group,
      topic: 'later',
      handle: async (messages) => {
        for (const m of messages) seen.push(m.value.toString());
        const value = messages.at(-1)!.value.toString();
        return { durable: new Promise<void>((resolve) => durable.set(value, resolve)) };
      },
    });
    await send('e0', 'later');
    await until(() => seen.includes('e0'));
    await send('e1', 'later');
    await send('e2', 'later');
    await until(() => seen.includes('e2'));
    assert.deepEqual(seen, ['e0', 'e1', 'e2'], 'later chunks came while the first was not durable');
    durable.get('e2')!();
    if (durable.has('e1')) durable.get('e1')!();
    await sleep(1500); // past a commit interval
    assert.equal(
      (await committed(group, 'later')).get(0),
      -1,
      'nothing committed past a chunk not yet durable',
    );
    durable.get('e0')!();
    await until(async () => (await committed(group, 'later')).get(0) === start + 3, 3000);
    assert.equal((await committed(group, 'later')).get(0), start + 3);
    await consumer.stop();
  });

  it('a chunk whose durability fails is not committed, nor any after it: the member joins anew and has it again', async () => {
    const group = newGroup();
    await send('f-before', 'failed');
    const first = await member(bus, group, 'failed');
    await until(async () => (await committed(group, 'failed')).get(0) === (await end('failed')).get(0));
    const before = (await committed(group, 'failed')).get(0)!;
    assert.equal(before, (await end('failed')).get(0), 'the first member committed what it had');
    await first.consumer.stop();
    let failOnce = true;
    const handled: string[] = [];
    /** What was committed when f0 came again. */
    let committedAtRetry: number | undefined;
    const failing = await bus.consume({
      group,
      topic: 'failed',
      handle: async (messages) => {
        for (const m of messages) {
          const value = m.value.toString();
          if (value === 'f0' && handled.includes('f0'))
            committedAtRetry = (await committed(group, 'failed')).get(0);
          handled.push(value);
        }
        if (!failOnce) return;
        failOnce = false;
        return { durable: Promise.reject(new Error('not stored')) };
      },
    });
    await send('f0', 'failed');
    await until(() => !failOnce);
    // The next chunk finishes at once: its offset must not commit past the failed one.
    await send('f1', 'failed');
    // The member joined the group again and read from the last commit: f0 again, then f1.
    await until(
      () =>
        handled.filter((v) => v === 'f0').length === 2 &&
        handled.lastIndexOf('f1') > handled.lastIndexOf('f0'),
    );
    assert.equal(committedAtRetry, before, 'nothing committed past the failed chunk before it came again');
    await until(async () => (await committed(group, 'failed')).get(0) === (await end('failed')).get(0));
    await failing.stop();
  });

  /**
   * A member of `group` on topic `two` in a process of its own with a session of `session` ms,
   * joined by a member here; once they hold a partition each, the process is killed (no leave sent).
   * How long until the member here holds both.
   */
  const takeOverAfterKill = async (group: string, session: number): Promise<number> => {
    const moduleUrl = (path: string) => new URL(path, import.meta.url).href;
    const child = spawn(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        MEMBER_PROCESS,
        moduleUrl('../../infra/bus/kafka.ts'),
        moduleUrl('../../infra/telemetry.ts'),
        BROKERS.join(','),
        prefix,
        group,
        'two',
        String(session),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let killed = false;
    const ended = new Promise<never>((_, reject) =>
      child.once('exit', (code) => !killed && reject(new Error(`the member process ended (${code})`))),
    );
    /** Waits for `done`, failing at once if the member process ends unasked, or after `ms`. */
    const waitFor = (done: () => boolean, what: string, ms = 30_000) =>
      Promise.race([ended, until(done, ms).then(() => assert.ok(done(), `not within ${ms} ms: ${what}`))]);
    const killedHeld: number[][] = [];
    let partial = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      const lines = (partial + d).split('\n');
      partial = lines.pop()!;
      for (const line of lines) {
        try {
          killedHeld.push(JSON.parse(line));
        } catch {} // not an assignment
      }
    });
    try {
      await waitFor(() => killedHeld.at(-1)?.length === 2, 'the first member holds both partitions');
      const survivor = await member(bus, group, 'two');
      await waitFor(
        () => survivor.held.at(-1)?.length === 1 && killedHeld.at(-1)?.length === 1,
        'the two members hold a partition each',
      );
      killed = true;
      child.kill('SIGKILL');
      const at = Date.now();
      await waitFor(() => survivor.held.at(-1)?.length === 2, 'the survivor holds both partitions');
      const waited = Date.now() - at;
      await survivor.consumer.stop();
      return waited;
    } finally {
      killed = true;
      child.kill('SIGKILL');
    }
  };

  it('a member that crashed gives its partitions up after its session (HUB_KAFKA_SESSION_TIMEOUT_MS): 6 s sooner than 10 s', async () => {
    // Side by side, so that both meet the same machine: each waits out its session (the killed
    // member's last heartbeat up to about a second before the kill), then the group rebalances.
    const [short, long] = await Promise.all([
      takeOverAfterKill(newGroup(), 6000),
      takeOverAfterKill(newGroup(), 10_000),
    ]);
    assert.ok(
      short > 4000,
      `a 6-s session taken over ${short} ms after the kill: no leave was sent, the session is waited out`,
    );
    assert.ok(
      long - short > 2000,
      `taken over ${short} ms after the kill with a 6-s session, ${long} ms with 10 s`,
    );
  });

  it("a session the broker refuses fails the member's start with the broker's reason, rather than leaving a member that holds nothing", async () => {
    // The broker's least is 6 s by default (group.min.session.timeout.ms).
    const refused = new KafkaBus({
      brokers: BROKERS,
      clientId: 'bus-test',
      logger: createLogger('silent'),
      prefix,
      sessionTimeoutMs: 3000,
    });
    try {
      await assert.rejects(
        refused.consume({ group: newGroup(), topic: 'one', handle: async () => {} }),
        /could not join its group: .*session timeout/i,
      );
    } finally {
      await refused.close();
    }
  });

  it('across a rebalance, a member resumes the partition it keeps past what it finished, not from the last commit', async () => {
    const group = newGroup();
    const a = await member(slowCommits, group, 'two');
    await until(() => a.held.length > 0);
    // Alone in its group, the member is told it holds every partition of the topic.
    assert.deepEqual([a.held[0]!.length, a.of[0]], [2, 2]);
    // One message committed (a's first chunk), then twenty over both partitions, finished and not
    // committed when the second member joins.
    await send('x', 'two', 'x');
    await until(async () => {
      const [c, e] = await Promise.all([committed(group, 'two'), end('two')]);
      return [...e].every(([p, o]) => o === 0 || c.get(p) === o);
    });
    const keys = Array.from({ length: 20 }, (_, i) => `key-${i}`);
    for (const [i, key] of keys.entries()) await send(`c${i}`, 'two', key);
    await until(() => a.values().filter((v) => v.startsWith('c')).length >= 20);
    assert.deepEqual(new Set(a.seen.map((s) => s.partition)), new Set([0, 1]));

    const b = await member(slowCommits, group, 'two');
    await until(() => b.held.length > 0 && a.held.length > 1 && a.held.at(-1)!.length === 1, 40_000);
    const kept = a.held.at(-1)!;
    assert.equal(kept.length, 1);
    assert.equal(a.of.at(-1), 2, 'one partition of two');
    for (const [i, key] of keys.entries()) await send(`d${i}`, 'two', key);
    await until(() => [...a.values(), ...b.values()].filter((v) => v.startsWith('d')).length >= 20);
    await Promise.all([a.consumer.stop(), b.consumer.stop()]);
    const all = [...a.values(), ...b.values()].filter((v) => v.startsWith('d'));
    assert.equal(new Set(all).size, 20);
    // The kept partition's c messages were finished before the join: none is handed to a again.
    const onKept = a.seen.filter((s) => s.partition === kept[0]).map((s) => s.value);
    assert.equal(new Set(onKept).size, onKept.length, `handed again: ${onKept.join(' ')}`);
  });
});
