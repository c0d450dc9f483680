// The Kafka bus's consumer groups on the real broker: how often a member commits, and that what it
// finished is committed by the time it has stopped, so the group's next member starts past it.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';
import { KafkaBus } from '../../infra/bus/kafka.ts';
import type { InMessage } from '../../infra/bus/port.ts';
import { createLogger } from '../../infra/telemetry.ts';

const BROKERS = (process.env.HUB_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');
const TOPIC = 'events';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('Kafka bus consumer groups (int)', function () {
  this.timeout(60_000);
  const prefix = `bus-${randomBytes(4).toString('hex')}-`;
  const bus = new KafkaBus({ brokers: BROKERS, clientId: 'bus-test', logger: createLogger('warn'), prefix });
  const admin = new Kafka({ clientId: 'bus-test', brokers: BROKERS, logLevel: logLevel.NOTHING }).admin();

  before(async () => {
    await admin.connect();
    await bus.ensureTopics([{ topic: TOPIC, partitions: 1 }]);
  });
  after(async () => {
    await bus.close();
    await admin.disconnect();
  });

  /** The group's committed offset of the topic's one partition (-1: none). */
  const committed = async (group: string) => {
    const [topic] = await admin.fetchOffsets({ groupId: prefix + group, topics: [prefix + TOPIC] });
    return Number(topic!.partitions[0]!.offset);
  };
  const send = (n: string) => bus.send(TOPIC, [{ key: 'k', value: Buffer.from(n) }]);
  /** A member of `group` keeping the values it is handed, in order. */
  const member = async (group: string) => {
    const seen: string[] = [];
    const consumer = await bus.consume({
      group,
      topic: TOPIC,
      handle: async (messages: InMessage[]) => {
        for (const m of messages) seen.push(m.value.toString());
      },
    });
    return { seen, consumer };
  };

  it('commits what it finished at most once a second, not after every batch, and within a second when no more come', async () => {
    const group = `g-${randomBytes(4).toString('hex')}`;
    const { seen, consumer } = await member(group);
    const start = Number((await admin.fetchTopicOffsets(prefix + TOPIC))[0]!.offset);
    // Twenty messages, each its own batch, over about 600 ms; the committed offset polled meanwhile.
    const offsets = new Set<number>();
    let polling = true;
    const poller = (async () => {
      while (polling) {
        offsets.add(await committed(group));
        await sleep(10);
      }
    })();
    for (let i = 0; i < 20; i++) {
      await send(`a${i}`);
      await sleep(30);
    }
    await sleep(100);
    polling = false;
    await poller;
    assert.equal(seen.filter((v) => v.startsWith('a')).length, 20);
    // kafkajs's auto-commit commits after every batch: here about twenty offsets in turn.
    const moved = [...offsets].filter((o) => o > start);
    assert.ok(moved.length <= 2, `committed offsets seen: ${[...offsets].join(', ')}`);
    // No more messages: the last ones are committed within a second all the same.
    await sleep(1200);
    assert.equal(await committed(group), start + 20);
    await consumer.stop();
  });

  it('a stopped member has committed all it finished: the next one gets none of it again', async () => {
    const group = `g-${randomBytes(4).toString('hex')}`;
    const { seen: first, consumer } = await member(group);
    // The first member commits at its first chunk's end; these come within the second after it.
    for (let i = 0; i < 10; i++) await send(`b${i}`);
    for (let waited = 0; first.filter((v) => v.startsWith('b')).length < 10 && waited < 10_000; waited += 20)
      await sleep(20);
    assert.equal(first.filter((v) => v.startsWith('b')).length, 10);
    await consumer.stop();

    const { seen: second, consumer: next } = await member(group);
    await send('after');
    for (let waited = 0; !second.includes('after') && waited < 20_000; waited += 50) await sleep(50);
    await next.stop();
    assert.deepEqual(second, ['after']);
  });
});
