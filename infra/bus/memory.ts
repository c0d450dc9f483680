// The in-process bus of the embedded profile: each partition an array of messages with one
// cursor per consumer group; a message is dropped once every group has passed it. Senders wait
// while a partition is full, so a fast producer is held back to its slowest group.
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Logger } from '../telemetry.ts';
import type { Bus, ConsumeOptions, Consumer, InMessage, OutMessage } from './port.ts';

interface Partition {
  messages: InMessage[];
  /** Offset of messages[0]. */
  base: number;
  next: number;
  cursors: Map<string, number>;
  wake: Set<() => void>;
}

export class MemoryBus implements Bus {
  readonly kind = 'memory';
  private readonly topics = new Map<string, Partition[]>();
  private readonly capacity: number;
  private readonly maxBatch: number;
  private readonly logger: Logger;
  private readonly room = new Set<() => void>();

  constructor(o: { logger: Logger; capacity?: number; maxBatch?: number }) {
    this.logger = o.logger;
    this.capacity = o.capacity ?? 50_000;
    this.maxBatch = o.maxBatch ?? 1000;
  }

  async ensureTopics(topics: { topic: string; partitions: number }[]): Promise<void> {
    for (const { topic, partitions } of topics) {
      if (this.topics.has(topic)) continue;
      this.topics.set(
        topic,
        Array.from({ length: partitions }, () => ({
          messages: [],
          base: 0,
          next: 0,
          cursors: new Map(),
          wake: new Set(),
        })),
      );
    }
  }

  private partitionsOf(topic: string): Partition[] {
    const p = this.topics.get(topic);
    if (!p) throw new Error(`no topic ${topic}`);
    return p;
  }

  async send(topic: string, messages: OutMessage[], _options?: { ordered?: boolean }): Promise<void> {
    const partitions = this.partitionsOf(topic);
    const touched = new Set<Partition>();
    for (const m of messages) {
      const index = partitionOfKey(m.key, partitions.length);
      const p = partitions[index]!;
      p.messages.push({
        key: m.key,
        value: m.value,
        headers: m.headers ?? {},
        partition: index,
        offset: String(p.next++),
      });
      touched.add(p);
    }
    for (const p of touched) for (const wake of p.wake) wake();
    // Backpressure: accepted, but the sender waits until its partitions have room again.
    while ([...touched].some((p) => p.messages.length > this.capacity)) {
      await new Promise<void>((resolve) => this.room.add(resolve));
    }
  }

  async consume(o: ConsumeOptions): Promise<Consumer> {
    const partitions = this.partitionsOf(o.topic);
    let running = true;
    const maxBatch = o.maxBatch ?? this.maxBatch;
    const stopWaiting = new Set<() => void>();
    const loop = async (index: number) => {
      const p = partitions[index]!;
      if (!p.cursors.has(o.group)) p.cursors.set(o.group, p.base);
      let backoffMs = 100;
      while (running) {
        const cursor = p.cursors.get(o.group)!;
        if (cursor >= p.next) {
          await new Promise<void>((resolve) => {
            const wake = () => {
              p.wake.delete(wake);
              stopWaiting.delete(wake);
              resolve();
            };
            p.wake.add(wake);
            stopWaiting.add(wake);
          });
          continue;
        }
        const from = cursor - p.base;
        const batch = p.messages.slice(from, from + maxBatch);
        try {
          const handled = await o.handle(batch, {
            partition: index,
            lag: p.next - cursor - batch.length,
            heartbeat: async () => {},
          });
          // In memory nothing outlives the process: the batch moves on once it is durable.
          await handled?.durable;
          backoffMs = 100;
        } catch (err) {
          this.logger.warn(
            { topic: o.topic, group: o.group, partition: index, err: (err as Error).message },
            'batch failed; retrying it',
          );
          await new Promise((r) => setTimeout(r, backoffMs));
          backoffMs = Math.min(backoffMs * 2, 5000);
          continue;
        }
        p.cursors.set(o.group, cursor + batch.length);
        this.trim(p);
        // A backlog's batches may be handled without waiting on anything: give the turn back.
        if (p.cursors.get(o.group)! < p.next) await nextTurn();
      }
    };
    o.onAssignment?.(
      partitions.map((_, i) => i),
      partitions.length,
    );
    const loops = partitions.map((_, i) => loop(i));
    return {
      // A group's cursor moves past a batch once it is durable.
      caughtUp: async () => partitions.every((p) => (p.cursors.get(o.group) ?? p.base) >= p.next),
      stop: async () => {
        running = false;
        for (const wake of [...stopWaiting]) wake();
        await Promise.all(loops);
      },
    };
  }

  /** Drops what every group has passed, and lets waiting senders go on. */
  private trim(p: Partition): void {
    const low = Math.min(...p.cursors.values());
    if (low > p.base) {
      p.messages.splice(0, low - p.base);
      p.base = low;
    }
    if (p.messages.length <= this.capacity) {
      for (const resolve of this.room) resolve();
      this.room.clear();
    }
  }

  /** In this process: it answers while the process does. */
  async ping(): Promise<void> {}

  async close(): Promise<void> {
    for (const resolve of this.room) resolve();
    this.room.clear();
  }
}

/** FNV-1a: spreads keys over partitions, the same way in every process. */
export function partitionOfKey(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % partitions;
}
