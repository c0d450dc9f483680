// The message bus port: partitioned topics, keyed messages, consumer groups that commit only
// what their handler finished. Adapters: kafka.ts (kafkajs; the distributed profile) and
// memory.ts (in this process; the embedded profile). The relay, the stream processor and the
// dispatcher run unchanged on both.

export interface OutMessage {
  /** Messages with one key go to one partition, in the order sent. */
  key: string;
  value: Buffer;
  headers?: Record<string, string>;
}

export interface InMessage {
  key: string;
  value: Buffer;
  headers: Record<string, string>;
  partition: number;
  offset: string;
}

export interface BatchInfo {
  partition: number;
  /** Messages of this partition not yet handed to the group, after this batch. */
  lag: number;
  /** Keeps the group membership alive during a long batch (no-op in memory). */
  heartbeat(): Promise<void>;
}

/** What a handler may answer: its batch is taken, and durable once `durable` resolves. */
export interface Handled {
  durable: Promise<void>;
}

export interface ConsumeOptions {
  group: string;
  topic: string;
  /** Handles one partition's batch, in order. Its offsets are committed only when it resolves,
   * or, when it resolves to `{ durable }`, once that resolves too (the next batch comes at once:
   * a handler may take a batch in and make it durable later); when it throws, the batch comes
   * again. A batch whose `durable` rejects is never committed, nor any later one of its partition:
   * the batch comes again (Kafka: the member joins the group anew and reads the partition from
   * its committed offset; in memory: the next batch waits for `durable`, and the batch is retried). */
  // biome-ignore lint/suspicious/noConfusingVoidType: most handlers answer nothing (their batch is done)
  handle(messages: InMessage[], info: BatchInfo): Promise<void | Handled>;
  /** Partitions handled at once by this member. */
  partitionsConcurrently?: number;
  /** Most messages a `handle` call gets (default: the bus's own, 1,000). */
  maxBatch?: number;
  /** Called when this member's partitions may have changed (a rebalance): caches keyed by
   * partition are no longer this member's alone. `of`: the topic's partitions (as the member
   * found them at its start), so a member can tell whether it holds them all. Called with none
   * (and `of` 0) once a member has left to join again (Kafka: after a crash or a failed chunk). */
  onAssignment?: (partitions: number[], of: number) => void;
}

export interface Consumer {
  /** Stops fetching, lets the running batches finish and commits their offsets. */
  stop(): Promise<void>;
  /** Whether every message now on the topic is handled, durable and committed by this group: a
   * sender that has stopped sending to the topic may then hand its messages on some other way
   * without overtaking any (the relay's hand-off). False when the bus cannot tell now. */
  caughtUp(): Promise<boolean>;
}

export interface Bus {
  readonly kind: string;
  /** Creates the topics that are missing (existing ones keep their partitions). */
  ensureTopics(topics: { topic: string; partitions: number }[]): Promise<void>;
  /**
   * Resolves once every message is durably accepted (Kafka: by all in-sync replicas). `ordered`
   * (the default) keeps each key's messages in the order sent even across retries; without it a
   * sender may have several requests in flight (for messages whose order does not matter).
   */
  send(topic: string, messages: OutMessage[], options?: { ordered?: boolean }): Promise<void>;
  consume(options: ConsumeOptions): Promise<Consumer>;
  /** Rejects when the bus does not answer now (a process's /readyz asks it). */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/** Topics of the pipeline. */
export const TOPICS = {
  /** Every stored event, keyed by aggregate (device) id: the relay's output. */
  changes: 'changes',
  /** One delivery job per matching subscription, keyed by subscription id. */
  deliveries: 'deliveries',
} as const;

/** Header naming the Avro schema (and version) of a message's value. */
export const SCHEMA_HEADER = 'hub-schema';
