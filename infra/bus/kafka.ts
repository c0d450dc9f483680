// The Kafka bus of the distributed profile (kafkajs). Two producers per process, acks from all
// in-sync replicas: an idempotent one (one request in flight, so a key's messages keep their order
// across retries) and a plain one for messages whose order is free, each sending what waits for it
// in one request; consumer groups whose offsets move only past batches their handler finished.

import { createRequire } from 'node:module';
import {
  type Admin,
  Kafka,
  type KafkaConfig,
  type Consumer as KafkaConsumer,
  type KafkaMessage,
  logLevel,
  Partitioners,
  type Producer,
} from 'kafkajs';
import type { Logger } from '../telemetry.ts';
import type { Bus, ConsumeOptions, Consumer, InMessage, OutMessage } from './port.ts';

/** What stopIdleRequestQueueLoop reads and sets of kafkajs's per-connection request queue. */
interface RequestQueueState {
  pending: unknown[];
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  checkPendingRequests(): void;
  scheduleCheckPendingRequests(): void;
}

/**
 * kafkajs 2.2.4 re-arms a check of its pending requests after every answer and after every check,
 * whether or not anything is pending or throttled: each broker connection that has had an answer
 * runs a 1-ms timer for as long as it lives (tulios/kafkajs#1704 and #1751, the
 * TimeoutNegativeWarning; unreleased upstream). Measured: an idle producer took 4.9 % of a core
 * with 886 wake-ups a second (0.3 % and 10 with this); an idle distributed hub's processor and
 * dispatcher 7.0 % each (5.9 with this, most of it their fetches). This is the fix
 * proposed upstream: a check is scheduled only while requests are pending (their own interval) or
 * while the broker throttles us (until it ends). A request that cannot go at once is pending, and
 * each answer checks the queue, so nothing waits on the dropped timer.
 */
function stopIdleRequestQueueLoop(RequestQueue: { prototype: RequestQueueState }): void {
  RequestQueue.prototype.scheduleCheckPendingRequests = function (this: RequestQueueState) {
    if (this.throttleCheckTimeoutId) return;
    const throttledForMs = this.throttledUntil - Date.now();
    let delayMs: number;
    if (this.pending.length > 0) delayMs = throttledForMs > 0 ? throttledForMs : PENDING_CHECK_MS;
    else if (throttledForMs > 0) delayMs = throttledForMs;
    else return;
    this.throttleCheckTimeoutId = setTimeout(() => {
      this.throttleCheckTimeoutId = null;
      this.checkPendingRequests();
    }, delayMs);
  };
}
/** The longest a consumer's caughtUp takes (a commit, two admin requests) before it answers false. */
const CAUGHT_UP_MS = 1000;
/** kafkajs's CHECK_PENDING_REQUESTS_INTERVAL. */
const PENDING_CHECK_MS = 10;
/** kafkajs's request queue class, one per broker connection (exported for its tests). */
export const KafkaRequestQueue = createRequire(import.meta.url)(
  'kafkajs/src/network/requestQueue/index.js',
) as { prototype: RequestQueueState } & (new (o: Record<string, unknown>) => RequestQueueState);
stopIdleRequestQueueLoop(KafkaRequestQueue);

/** Most bytes of message values merged into one request (see `send`). */
const MERGED_BYTES = 1 << 20;
/** How long a stop waits for its commit: kafkajs retries a failing one for about 20 s. */
const STOP_COMMIT_MS = 5000;

interface WaitingSend {
  topic: string;
  messages: OutMessage[];
  resolve: () => void;
  reject: (err: Error) => void;
}

/**
 * A producer and its sends: one request in flight, the sends waiting for it. Ordered: idempotent,
 * so a key's messages keep their order across retries (the relay). Unordered: for messages whose
 * order is free, whose sends then do not wait behind the ordered ones (the delivery jobs).
 */
interface Lane {
  ordered: boolean;
  producer: Promise<Producer> | undefined;
  busy: boolean;
  waiting: WaitingSend[];
}

/**
 * A group member's finished offsets, committed at most once per interval (a second), within it of
 * a chunk's end, and at a stop. kafkajs's own auto-commit sends a commit after every batch,
 * whatever its interval: at 1,000 changes/s the processor's partitions sent 80 a second, and the
 * broker spent more than half of its CPU on them. A crash, or a partition moving to another
 * member, hands at most a second of finished chunks to its next holder again, which the handlers
 * accept (they are idempotent); a stop commits first.
 */
export class OffsetCommits {
  /** Partition → the next offset to read, for chunks finished since the last commit. */
  private readonly finished = new Map<number, string>();
  /** The partitions this member holds (from its last join; undefined before the first). */
  private held: Set<number> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private last = 0;
  private stopped = false;
  private committing: Promise<void> = Promise.resolve();
  private readonly topic: string;
  private readonly intervalMs: number;
  private readonly commit: (offsets: { topic: string; partition: number; offset: string }[]) => Promise<void>;
  private readonly log: Logger;
  /** Partition → its chunks waiting to be durable, chained in order (see finishWhen). */
  private readonly durables = new Map<number, Promise<void>>();
  /** Partitions with a chunk that was not made durable: nothing more of them is committed until
   * the next join (a later chunk's offset would commit past the failed one, which is then lost). */
  private readonly failed = new Set<number>();
  private readonly pending = new Set<Promise<void>>();
  /** Counts joins: a chunk durable after one is not finished from here. */
  private generation = 0;

  /** Told of a partition whose chunk was not made durable (the member then joins again). */
  private readonly failedOne: (partition: number) => void;

  constructor(o: {
    topic: string;
    intervalMs: number;
    commit: (offsets: { topic: string; partition: number; offset: string }[]) => Promise<void>;
    log: Logger;
    failed?: (partition: number) => void;
  }) {
    this.topic = o.topic;
    this.intervalMs = o.intervalMs;
    this.commit = o.commit;
    this.log = o.log;
    this.failedOne = o.failed ?? (() => {});
  }

  /** `offset`: the chunk's last message. Behind a partition's chunks still waiting to be durable,
   * it waits for them: its offset covers theirs. */
  finish(partition: number, offset: string): void {
    if (this.failed.has(partition)) return;
    if (this.durables.has(partition)) this.finishWhen(partition, offset, Promise.resolve());
    else this.done(partition, offset);
  }

  private done(partition: number, offset: string): void {
    this.finished.set(partition, (BigInt(offset) + 1n).toString());
    this.arm();
  }

  /**
   * A chunk handled and made durable later (`durable`): finished once it and every earlier such
   * chunk of its partition are durable, in order. One that never is holds its partition's commits
   * back until the next join (which the bus then asks for at once: `failed`), whose holder reads
   * from the last committed offset again (at least once). A chunk durable only after a join is
   * left to the partition's holder, which has it again.
   */
  finishWhen(partition: number, offset: string, durable: Promise<void>): void {
    if (this.failed.has(partition)) {
      // Read again after the join: nothing waits for it, and its failure is not news.
      durable.catch(() => {});
      return;
    }
    const generation = this.generation;
    const before = this.durables.get(partition) ?? Promise.resolve();
    const chained = before.then(() => durable);
    this.durables.set(partition, chained);
    this.pending.add(chained);
    chained.then(
      () => {
        if (this.generation === generation && !this.failed.has(partition)) this.done(partition, offset);
      },
      (err: Error) => {
        if (this.generation !== generation || this.failed.has(partition)) return;
        this.failed.add(partition);
        this.log.error(
          { topic: this.topic, partition, offset, err: err.message },
          'a handled chunk was not made durable; its partition commits nothing more until the next join',
        );
        this.failedOne(partition);
      },
    );
    void chained
      .catch(() => {})
      .finally(() => {
        this.pending.delete(chained);
        if (this.durables.get(partition) === chained) this.durables.delete(partition);
      });
  }

  /** No chunk waits to be durable, and none failed to be. */
  get idle(): boolean {
    return this.pending.size === 0 && this.failed.size === 0;
  }

  /** Resolves once every chunk waiting to be durable is, or failed, or after `ms`. */
  async settled(ms: number): Promise<void> {
    let bounded: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.pending]),
      new Promise((r) => (bounded = setTimeout(r, ms))),
    ]);
    clearTimeout(bounded);
  }

  private arm(): void {
    if (this.stopped || this.finished.size === 0) return;
    this.timer ??= setTimeout(
      () => {
        this.timer = undefined;
        void this.flush();
      },
      Math.max(0, this.last + this.intervalMs - Date.now()),
    );
  }

  /**
   * After a join: the partitions now held. A partition now another member's is not committed from
   * here (that would move its new holder's offset back). Returns the finished offsets of those
   * kept, for the consumer to resume from: kafkajs resumes from the committed ones, and would hand
   * the member the chunks it finished since the last commit again.
   */
  keep(partitions: number[]): [number, string][] {
    this.generation++;
    this.durables.clear();
    this.failed.clear();
    this.held = new Set(partitions);
    for (const p of this.finished.keys()) if (!this.held.has(p)) this.finished.delete(p);
    return [...this.finished];
  }

  /** One commit at a time, in order, so an older offset never lands after a newer one. */
  flush(): Promise<void> {
    this.committing = this.committing.then(async () => {
      if (this.stopped || this.finished.size === 0) return;
      const offsets = [...this.finished].map(([partition, offset]) => ({
        topic: this.topic,
        partition,
        offset,
      }));
      this.finished.clear();
      this.last = Date.now();
      try {
        await this.commit(offsets);
      } catch (err) {
        // Tried again in an interval, unless a later chunk of the partition is there by then or
        // the partition went to another member meanwhile.
        for (const o of offsets)
          if (!this.finished.has(o.partition) && (!this.held || this.held.has(o.partition)))
            this.finished.set(o.partition, o.offset);
        this.log.warn({ topic: this.topic, err: (err as Error).message }, 'offset commit failed; retrying');
        this.arm();
      }
    });
    return this.committing;
  }

  /** Nothing is committed from here on (a crashed consumer can no longer commit). */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** One kafkajs consumer of a group, started anew after a crash. */
interface GroupMember {
  consumer: KafkaConsumer;
  commits: OffsetCommits;
  /** Lets the running chunks finish, commits their offsets and leaves the group. */
  stop(): Promise<void>;
}

export class KafkaBus implements Bus {
  readonly kind = 'kafka';
  private readonly kafka: Kafka;
  private readonly pingKafka: Kafka;
  /** The admin clients pings and consumers' caughtUp ask through, apart (kafkajs's admin mixed up
   * the answers of requests asked at once): one connection each, kept while it answers. */
  private readonly admins: Record<'ping' | 'offsets', Promise<Admin> | undefined> = {
    ping: undefined,
    offsets: undefined,
  };
  private pinging: Promise<void> | undefined;
  private readonly orderedLane: Lane = { ordered: true, producer: undefined, busy: false, waiting: [] };
  private readonly unorderedLane: Lane = { ordered: false, producer: undefined, busy: false, waiting: [] };
  private readonly consumers = new Set<Consumer>();
  /** Each topic's partitions (its name with the prefix), as ensureTopics or a consumer's start found them. */
  private readonly partitions = new Map<string, number>();
  /** Put before every topic and group name (HUB_KAFKA_PREFIX). */
  private readonly prefix: string;
  private readonly maxBatch: number;
  private readonly fetchWaitMs: number;
  private readonly fetchMinBytes: number;
  private readonly commitIntervalMs: number;
  private readonly sessionTimeoutMs: number;
  private readonly log: Logger;

  constructor(o: {
    brokers: string[];
    clientId: string;
    logger: Logger;
    prefix?: string;
    /** Most messages per handler call. */
    maxBatch?: number;
    /** HUB_KAFKA_FETCH_WAIT_MS (default 500). */
    fetchWaitMs?: number;
    /** HUB_KAFKA_FETCH_MIN_BYTES (default 1). */
    fetchMinBytes?: number;
    /** A group member commits its finished offsets at most this often, and at a stop (default
     * 1000; see OffsetCommits). */
    commitIntervalMs?: number;
    /** HUB_KAFKA_SESSION_TIMEOUT_MS (default 10,000): how long the group waits for a member that
     * stopped heartbeating (a crash) before it hands its partitions to the others. */
    sessionTimeoutMs?: number;
    config?: Partial<KafkaConfig>;
  }) {
    this.prefix = o.prefix ?? '';
    this.maxBatch = o.maxBatch ?? 1000;
    this.fetchWaitMs = o.fetchWaitMs ?? 500;
    this.fetchMinBytes = o.fetchMinBytes ?? 1;
    this.commitIntervalMs = o.commitIntervalMs ?? 1000;
    this.sessionTimeoutMs = o.sessionTimeoutMs ?? 10_000;
    const log = o.logger.child({ component: 'kafka' });
    this.log = log;
    const config: KafkaConfig = {
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
    };
    this.kafka = new Kafka(config);
    // Pings go without retries, their connection too (a client's retries cover its connects).
    this.pingKafka = new Kafka({ ...config, retry: { retries: 0 } });
  }

  async ensureTopics(topics: { topic: string; partitions: number }[]): Promise<void> {
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      const existing = new Set(await admin.listTopics());
      const missing = topics
        .map((t) => ({ ...t, topic: this.prefix + t.topic }))
        .filter((t) => !existing.has(t.topic));
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
      // What each has (existing ones keep theirs), for the consumers' onAssignment.
      const { topics: found } = await admin.fetchTopicMetadata({
        topics: topics.map((t) => this.prefix + t.topic),
      });
      for (const t of found) this.partitions.set(t.name, t.partitions.length);
    } finally {
      await admin.disconnect();
    }
  }

  private connectedProducer(lane: Lane): Promise<Producer> {
    const make = async () => {
      const producer = this.kafka.producer(
        lane.ordered
          ? { idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner }
          : { createPartitioner: Partitioners.DefaultPartitioner },
      );
      await producer.connect();
      return producer;
    };
    lane.producer ??= make().catch((err) => {
      lane.producer = undefined;
      throw err;
    });
    return lane.producer;
  }

  /**
   * Sends that arrive while their producer's request is in flight go out together in the next
   * one: the processor's partitions each hand off a few jobs at a time, and at 1,000 changes/s a
   * request per hand-off cost more than its messages, here, in the broker and in the consumers'
   * fetches. The order of sends is kept, so an ordered send stays in order.
   */
  send(topic: string, messages: OutMessage[], options: { ordered?: boolean } = {}): Promise<void> {
    if (messages.length === 0) return Promise.resolve();
    const lane = (options.ordered ?? true) ? this.orderedLane : this.unorderedLane;
    return new Promise((resolve, reject) => {
      lane.waiting.push({ topic: this.prefix + topic, messages, resolve, reject });
      this.pump(lane);
    });
  }

  private pump(lane: Lane): void {
    if (lane.busy || lane.waiting.length === 0) return;
    // Whole sends, up to about a megabyte (the broker's default limit on one partition's batch).
    let bytes = 0;
    let n = 0;
    while (n < lane.waiting.length && (n === 0 || bytes < MERGED_BYTES)) {
      for (const m of lane.waiting[n]!.messages) bytes += m.value.length;
      n++;
    }
    const sends = lane.waiting.splice(0, n);
    lane.busy = true;
    this.sendNow(lane, sends)
      .then(
        () => {
          for (const w of sends) w.resolve();
        },
        (err: Error) => {
          for (const w of sends) w.reject(err);
        },
      )
      .finally(() => {
        lane.busy = false;
        this.pump(lane);
      });
  }

  private async sendNow(lane: Lane, sends: WaitingSend[]): Promise<void> {
    const connected = this.connectedProducer(lane);
    const producer = await connected;
    const byTopic = new Map<string, { key: string; value: Buffer; headers?: Record<string, string> }[]>();
    for (const w of sends) {
      const list = byTopic.get(w.topic) ?? [];
      for (const m of w.messages) list.push({ key: m.key, value: m.value, headers: m.headers });
      byTopic.set(w.topic, list);
    }
    try {
      await producer.sendBatch({
        acks: -1,
        topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })),
      });
    } catch (err) {
      // A producer that failed past its retries (a broker restart, say) may stay broken: an
      // idempotent one keeps a producer id and sequence numbers the restarted broker may refuse.
      // The callers send their batches again (at least once), through a new producer.
      if (lane.producer === connected) lane.producer = undefined;
      void producer.disconnect().catch(() => {});
      throw err;
    }
  }

  async consume(o: ConsumeOptions): Promise<Consumer> {
    let current: GroupMember | undefined;
    let stopped = false;
    /** The replacement under way (its timer, then its start), for stop() to end or wait for. */
    let timer: NodeJS.Timeout | undefined;
    let replacing: Promise<void> = Promise.resolve();
    /** Replacements in a row of members that lived less than a minute: each waits twice as long
     * as the last (1 s to 30 s), so a store that keeps failing does not rebalance the group
     * every second. */
    let inARow = 0;
    let startedAt = 0;
    /** A member that crashed, or whose chunk was not made durable, is replaced by a new one
     * (after `leave`), which joins the group and reads each partition from its committed offset. */
    const replace = (member: GroupMember, leave: () => Promise<void>) => {
      inARow = Date.now() - startedAt < 60_000 ? inARow + 1 : 1;
      timer = setTimeout(
        () => {
          timer = undefined;
          replacing = (async () => {
            if (stopped || current !== member) return;
            await leave().catch(() => {});
            // Until the next member joins, this process holds none of the topic's partitions.
            o.onAssignment?.([], 0);
            while (!stopped && current === member) {
              try {
                await start();
              } catch (err) {
                this.log.warn(
                  { group: o.group, err: (err as Error).message },
                  'consumer restart failed; retrying',
                );
                await new Promise((r) => setTimeout(r, 2000));
              }
            }
          })();
        },
        Math.min(30_000, 1000 * 2 ** (inARow - 1)),
      );
    };
    const start = async (): Promise<void> => {
      let self: GroupMember | undefined;
      let leaving = false;
      const member = await this.startMember(o, () => {
        // A partition's chunk was not made durable: its later chunks are not committed, and its
        // next holder reads it again from the committed offset. That holder is this process's
        // next member, soon, rather than whoever holds the partition after the next rebalance.
        if (!self || leaving || stopped) return;
        leaving = true;
        this.log.warn({ group: o.group }, 'a chunk was not made durable; joining the group again');
        replace(self, () => self!.stop());
      });
      self = member;
      if (stopped) {
        // Stopped while this restart was connecting: stop() stopped the crashed one only.
        await member.stop();
        return;
      }
      current = member;
      startedAt = Date.now();
      const { consumer } = member;
      // kafkajs restarts a consumer after retriable failures only. After any other crash (seen
      // after a broker restart) it would sit idle while the process looks healthy: start it anew.
      consumer.on(consumer.events.CRASH, (e) => {
        if (e.payload.restart || stopped || current !== member || leaving) return;
        leaving = true;
        this.log.error(
          { group: o.group, err: e.payload.error?.message },
          'consumer crashed; starting it again',
        );
        replace(member, async () => {
          member.commits.stop(); // a crashed consumer commits nothing more
          await consumer.disconnect();
        });
      });
    };
    await start();
    const topic = this.prefix + o.topic;
    const groupId = this.prefix + o.group;
    let checking: Promise<boolean> | undefined;
    const handle: Consumer = {
      // One look at a time, bounded: a commit or a broker that does not answer makes it false.
      caughtUp: () => {
        checking ??= (async () => {
          let bounded: NodeJS.Timeout | undefined;
          try {
            return await Promise.race([
              this.committedToEnd(current, topic, groupId),
              new Promise<boolean>((r) => (bounded = setTimeout(() => r(false), CAUGHT_UP_MS))),
            ]);
          } finally {
            clearTimeout(bounded);
          }
        })().finally(() => {
          checking = undefined;
        });
        return checking;
      },
      stop: async () => {
        stopped = true;
        this.consumers.delete(handle);
        clearTimeout(timer);
        // A replacement under way ends with the member it started stopped (see start); a broker
        // that does not answer bounds the wait.
        let bounded: NodeJS.Timeout | undefined;
        await Promise.race([replacing, new Promise((r) => (bounded = setTimeout(r, STOP_COMMIT_MS)))]);
        clearTimeout(bounded);
        await current?.stop();
      },
    };
    this.consumers.add(handle);
    return handle;
  }

  private async startMember(o: ConsumeOptions, failed: () => void): Promise<GroupMember> {
    const topic = this.prefix + o.topic;
    const consumer = this.kafka.consumer({
      groupId: this.prefix + o.group,
      sessionTimeout: this.sessionTimeoutMs,
      heartbeatInterval: 1000,
      rebalanceTimeout: 20_000,
      // The broker answers a fetch once its minimum bytes are there or the wait is over. By
      // default a lone message is answered at once (the fetch waits only while there is nothing),
      // and batches form while the handler works: kafkajs fetches again only once every batch of
      // the last fetch is handled (see HUB_KAFKA_FETCH_MIN_BYTES and HUB_KAFKA_FETCH_WAIT_MS).
      minBytes: this.fetchMinBytes,
      maxWaitTimeInMs: this.fetchWaitMs,
      maxBytesPerPartition: 4 * 1024 * 1024,
    });
    const commits = new OffsetCommits({
      topic,
      intervalMs: this.commitIntervalMs,
      commit: (offsets) => consumer.commitOffsets(offsets),
      log: this.log,
      failed,
    });
    /** Chunks being handled: a stop lets them finish, then commits. */
    const running = new Set<Promise<void>>();
    let stopping = false;
    const maxBatch = o.maxBatch ?? this.maxBatch;
    // The topic's partitions as this process found them (the hub never adds any to a topic; an
    // operator who does restarts the consumers), for onAssignment's `of`.
    const topicPartitions = o.onAssignment ? await this.partitionCount(topic) : 0;
    consumer.on(consumer.events.GROUP_JOIN, (e) => {
      const partitions = e.payload.memberAssignment[topic] ?? [];
      // Emitted before the first fetch of the new assignment, which starts from these.
      for (const [partition, offset] of commits.keep(partitions)) consumer.seek({ topic, partition, offset });
      o.onAssignment?.(partitions, topicPartitions);
    });
    await consumer.connect();
    await consumer.subscribe({ topic, fromBeginning: true });
    // A first join the broker refuses for good (a session outside its bounds, a group the client
    // may not join) ends run() without an error: kafkajs only reports it as a crash it will not
    // restart, emitted before run() returns, before the caller could listen. Heard here, it fails
    // the start with the broker's reason instead of leaving a member that holds nothing.
    let refused: Error | undefined;
    const unlisten = consumer.on(consumer.events.CRASH, (e) => {
      if (!e.payload.restart) refused = e.payload.error;
    });
    await consumer.run({
      partitionsConsumedConcurrently: o.partitionsConcurrently ?? 1,
      autoCommit: false, // see OffsetCommits
      eachBatchAutoResolve: false,
      eachBatch: async ({ batch, heartbeat, isStale, isRunning, resolveOffset, pause }) => {
        // A fetch can bring megabytes: the handler gets bounded chunks, each committed once it ends.
        for (let from = 0; from < batch.messages.length; from += maxBatch) {
          if (stopping) {
            pause(); // fetched again and again until the consumer stops, otherwise
            return;
          }
          if (!isRunning() || isStale()) return;
          const chunk = batch.messages.slice(from, from + maxBatch);
          const last = chunk[chunk.length - 1]!.offset;
          const messages = chunk.map((m) => this.incoming(m, batch.partition));
          const lag = Number(batch.highWatermark) - Number(last) - 1;
          const handled = o.handle(messages, { partition: batch.partition, lag, heartbeat }).then((taken) => {
            resolveOffset(last); // where kafkajs fetches this partition from next
            if (taken) commits.finishWhen(batch.partition, last, taken.durable);
            else commits.finish(batch.partition, last);
          });
          running.add(handled);
          try {
            await handled;
          } finally {
            running.delete(handled);
          }
          await heartbeat();
        }
      },
    });
    unlisten();
    if (refused) {
      commits.stop();
      throw new Error(`the consumer of ${o.group} could not join its group: ${refused.message}`);
    }
    return {
      consumer,
      commits,
      stop: async () => {
        stopping = true;
        await Promise.allSettled([...running]);
        await commits.settled(STOP_COMMIT_MS);
        let bounded: NodeJS.Timeout | undefined;
        await Promise.race([commits.flush(), new Promise((r) => (bounded = setTimeout(r, STOP_COMMIT_MS)))]);
        clearTimeout(bounded);
        commits.stop();
        await consumer.disconnect();
      },
    };
  }

  /** Whether the group has committed every message the topic holds, this member's finished
   * chunks committed first (see Consumer.caughtUp). */
  private async committedToEnd(member: GroupMember | undefined, topic: string, groupId: string) {
    if (!member?.commits.idle) return false;
    await member.commits.flush();
    try {
      const admin = await this.admin('offsets');
      // One after the other: asked at once, kafkajs's admin mixed up their answers ("Response
      // without match") while it connected to the broker.
      const ends = await admin.fetchTopicOffsets(topic);
      const groups = await admin.fetchOffsets({ groupId, topics: [topic] });
      const committed = new Map(groups[0]?.partitions.map((p) => [p.partition, BigInt(p.offset)]));
      // Committed up to the end, or nothing left on the partition to read (none sent, or all of
      // it past retention).
      return ends.every((e) => (committed.get(e.partition) ?? -1n) >= BigInt(e.high) || e.high === e.low);
    } catch {
      this.dropAdmin('offsets');
      return false;
    }
  }

  /** As ensureTopics found them; asked of the broker only for a topic it was not given. */
  private async partitionCount(topic: string): Promise<number> {
    const known = this.partitions.get(topic);
    if (known !== undefined) return known;
    const admin = this.kafka.admin();
    await admin.connect();
    try {
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
      const count = topics[0]?.partitions.length ?? 0;
      this.partitions.set(topic, count);
      return count;
    } finally {
      await admin.disconnect();
    }
  }

  private incoming(m: KafkaMessage, partition: number): InMessage {
    return {
      key: m.key?.toString() ?? '',
      value: m.value ?? Buffer.alloc(0),
      headers: Object.fromEntries(
        Object.entries(m.headers ?? {}).map(([k, v]) => [k, Array.isArray(v) ? String(v[0]) : String(v)]),
      ),
      partition,
      offset: m.offset,
    };
  }

  /**
   * A metadata request to the cluster, without retries: a probe wants the answer of now, and
   * probes that come while one is out share it.
   */
  ping(): Promise<void> {
    this.pinging ??= (async () => {
      try {
        await (await this.admin('ping')).describeCluster();
      } catch (err) {
        this.dropAdmin('ping');
        throw err;
      } finally {
        this.pinging = undefined;
      }
    })();
    return this.pinging;
  }

  /** A kept admin connection (without retries: its callers want the answer of now). */
  private admin(which: 'ping' | 'offsets'): Promise<Admin> {
    this.admins[which] ??= (async () => {
      const admin = this.pingKafka.admin();
      await admin.connect();
      return admin;
    })();
    return this.admins[which];
  }

  /** After a failed request: the next one connects anew. */
  private dropAdmin(which: 'ping' | 'offsets'): void {
    const failed = this.admins[which];
    this.admins[which] = undefined;
    failed?.then((admin) => admin.disconnect()).catch(() => {});
  }

  async close(): Promise<void> {
    for (const which of ['ping', 'offsets'] as const) {
      const admin = this.admins[which];
      this.admins[which] = undefined;
      await admin?.then((a) => a.disconnect()).catch(() => {});
    }
    await Promise.all([...this.consumers].map((c) => c.stop()));
    for (const lane of [this.orderedLane, this.unorderedLane]) {
      const producer = await lane.producer?.catch(() => undefined);
      await producer?.disconnect();
    }
  }
}
