// Durable checkpoints of the processes that follow the event store with side effects (the
// mailer, the relay): a JSON file per name in the embedded profile, Redis in the distributed one.
import { closeSync, constants, mkdirSync, openSync, readFileSync, writeSync } from 'node:fs';
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
  /** Open files by name: a checkpoint moves with every batch, so each save is one write. */
  private readonly files = new Map<string, number>();
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
    let fd = this.files.get(name);
    if (fd === undefined) {
      // Created if missing, never truncated: until the first write lands it keeps the last checkpoint.
      fd = openSync(join(this.dir, `${name}.json`), constants.O_RDWR | constants.O_CREAT);
      this.files.set(name, fd);
    }
    // Padded to one fixed width and written in place at offset 0: a single write, never torn by
    // a process crash, never leaving a longer older value behind.
    writeSync(fd, JSON.stringify({ position }).padEnd(FileCheckpoints.WIDTH), 0);
  }
  private static readonly WIDTH = 64;
  close(): void {
    for (const fd of this.files.values()) closeSync(fd);
    this.files.clear();
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
