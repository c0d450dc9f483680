// The real local services started by infra/local.sh answer: Kafka, Redis, PostgreSQL.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { testConfig } from '../harness.ts';

describe('local infrastructure (int)', () => {
  const config = testConfig();

  it('Kafka: produces and consumes one message through kafkajs', async () => {
    const kafka = new Kafka({
      clientId: 'hub-test',
      brokers: config.kafkaBrokers,
      logLevel: logLevel.NOTHING,
    });
    const topic = `test-roundtrip-${randomUUID()}`;
    const admin = kafka.admin();
    await admin.connect();
    await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], waitForLeaders: true });
    await admin.disconnect();
    const producer = kafka.producer();
    await producer.connect();
    const value = `hello ${randomUUID()}`;
    await producer.send({ topic, messages: [{ key: 'k', value }] });
    await producer.disconnect();
    const consumer = kafka.consumer({ groupId: `test-${randomUUID()}` });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    const received = await new Promise<string>((resolve) => {
      void consumer.run({ eachMessage: async ({ message }) => resolve(String(message.value)) });
    });
    await consumer.disconnect();
    await admin.connect();
    await admin.deleteTopics({ topics: [topic] });
    await admin.disconnect();
    assert.equal(received, value);
  });

  it('Redis: writes and reads a key', async () => {
    const redis = new Redis(config.redisUrl, { lazyConnect: true });
    await redis.connect();
    const key = `test:${randomUUID()}`;
    await redis.set(key, 'value', 'EX', 60);
    assert.equal(await redis.get(key), 'value');
    await redis.del(key);
    await redis.quit();
  });

  it('PostgreSQL: a SQL round trip', async () => {
    const client = new pg.Client({ connectionString: config.postgresUrl });
    await client.connect();
    const { rows } = await client.query('SELECT $1::text AS echo, 40 + 2 AS answer', ['héllo']);
    await client.end();
    assert.deepEqual(rows, [{ echo: 'héllo', answer: 42 }]);
  });
});
