// Durable checkpoints of the processes that follow the event store with side effects (the
// mailer, the relay): a JSON file per name in the embedded profile, Redis in the distributed one.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';

export interface CheckpointStore {
  get(name: string): Promise<number>;
  set(name: string, position: number): Promise<void>;
}

/** Kept for the life of the process: for followers whose outputs are rebuilt at each start. */
export class MemoryCheckpoints implements CheckpointStore {
  private readonly positions = new Map<string, number>();
  async get(name: string): Promise<number> {
    return this.positions.get(name) ?? 0;
  }
  async set(name: string, position: number): Promise<void> {
    this.positions.set(name, position);
  }
}

export class FileCheckpoints implements CheckpointStore {
  private readonly dir: string;
  constructor(dir: string) {
    this.dir = dir;
    mkdirSync(dir, { recursive: true });
  }
  async get(name: string): Promise<number> {
    try {
      return Number(JSON.parse(readFileSync(join(this.dir, `${name}.json`), 'utf8')).position) || 0;
    } catch {
      return 0;
    }
  }
  async set(name: string, position: number): Promise<void> {
    const file = join(this.dir, `${name}.json`);
    writeFileSync(`${file}.tmp`, JSON.stringify({ position }));
    renameSync(`${file}.tmp`, file); // atomic: a crash leaves the old or the new checkpoint
  }
}

export class RedisCheckpoints implements CheckpointStore {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }
  async get(name: string): Promise<number> {
    return Number((await this.redis.get(`hub:checkpoint:${name}`)) ?? 0);
  }
  async set(name: string, position: number): Promise<void> {
    await this.redis.set(`hub:checkpoint:${name}`, position);
  }
}
