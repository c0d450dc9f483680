// The Kafka bus of the distributed profile (kafkajs). One idempotent producer per process (acks
// from all in-sync replicas, one request in flight, so a key's messages keep their order across
// retries); consumer groups whose offsets move only past batches their handler finished.
import { Kafka, type KafkaConfig, logLevel, Partitioners, type Producer } from 'kafkajs';
import type { Logger } from '../telemetry.ts';
import type { Bus, ConsumeOptions, Consumer, InMessage, OutMessage } from './port.ts';

export class KafkaBus implements Bus {
  readonly kind = 'kafka';
  private readonly kafka: Kafka;
  private producer: Promise<Producer> | undefined;
  private readonly consumers = new Set<Consumer>();

  constructor(o: { brokers: string[]; clientId: string; logger: Logger; config?: Partial<KafkaConfig> }) {
    const log = o.logger.child({ component: 'kafka' });
    this.kafka = new Kafka({
      clientId: o.clientId,
      brokers: o.brokers,
      logLevel: logLevel.WARN,
      retry: { retries: 8, initialRetryTime: 200, maxRetryTime: 5000 },
      logCreator:
        () =>
        ({ level, log: entry }) => {
          const { message, ...rest } = entry;
          if (level <= logLevel.ERROR) log.error(rest, message);
          else log.warn(rest, message);
        },
      ...o.config,
    });
  }

  async ensureTopics(topics: { topic: string; partitions: number }[]): Promise<void> {
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      const existing = new Set(await admin.listTopics());
      const missing = topics.filter((t) => !existing.has(t.topic));
      if (missing.length > 0) {
        await admin.createTopics({
          waitForLeaders: true,
          topics: missing.map((t) => ({
            topic: t.topic,
            numPartitions: t.partitions,
            replicationFactor: -1,
          })),
        });
      }
    } finally {
      await admin.disconnect();
    }
  }

  private connectedProducer(): Promise<Producer> {
    this.producer ??= (async () => {
      const producer = this.kafka.producer({
        idempotent: true,
        maxInFlightRequests: 1,
        createPartitioner: Partitioners.DefaultPartitioner,
      });
      await producer.connect();
      return producer;
    })().catch((err) => {
      this.producer = undefined;
      throw err;
    });
    return this.producer;
  }

  async send(topic: string, messages: OutMessage[]): Promise<void> {
    if (messages.length === 0) return;
    const producer = await this.connectedProducer();
    await producer.send({
      topic,
      acks: -1,
      messages: messages.map((m) => ({ key: m.key, value: m.value, headers: m.headers })),
    });
  }

  async consume(o: ConsumeOptions): Promise<Consumer> {
    const consumer = this.kafka.consumer({
      groupId: o.group,
      sessionTimeout: 10_000,
      heartbeatInterval: 1000,
      rebalanceTimeout: 20_000,
      maxWaitTimeInMs: 50,
      maxBytesPerPartition: 4 * 1024 * 1024,
    });
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      o.onAssignment?.(e.payload.memberAssignment[o.topic] ?? []);
    });
    await consumer.connect();
    await consumer.subscribe({ topic: o.topic, fromBeginning: true });
    await consumer.run({
      partitionsConsumedConcurrently: o.partitionsConcurrently ?? 1,
      eachBatchAutoResolve: true,
      eachBatch: async ({ batch, heartbeat, isStale }) => {
        if (batch.messages.length === 0 || isStale()) return;
        const messages: InMessage[] = batch.messages.map((m) => ({
          key: m.key?.toString() ?? '',
          value: m.value ?? Buffer.alloc(0),
          headers: Object.fromEntries(
            Object.entries(m.headers ?? {}).map(([k, v]) => [k, Array.isArray(v) ? String(v[0]) : String(v)]),
          ),
          partition: batch.partition,
          offset: m.offset,
        }));
        await o.handle(messages, { partition: batch.partition, lag: Number(batch.offsetLag()), heartbeat });
      },
    });
    const handle: Consumer = {
      stop: async () => {
        this.consumers.delete(handle);
        await consumer.disconnect(); // finishes the running batches and commits their offsets
      },
    };
    this.consumers.add(handle);
    return handle;
  }

  async close(): Promise<void> {
    await Promise.all([...this.consumers].map((c) => c.stop()));
    const producer = await this.producer?.catch(() => undefined);
    await producer?.disconnect();
  }
}
