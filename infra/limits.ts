// Fixed-window counters for rate limits that must hold across requests of one caller (login
// attempts per account and per address), and marks that last a while (the addresses an account
// logged in from): in memory (embedded) or in Redis, shared by every API process (distributed).
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';

export interface Limiter {
  /** Counts one hit; returns 0 when allowed, else the seconds until the window ends. */
  hit(key: string, limit: number, windowMs: number): Promise<number>;
  /** Counts nothing: 0 while the window has had fewer than `limit` hits, else the seconds until it ends. */
  spent(key: string, limit: number): Promise<number>;
  /** Marks `key` for `ttlMs` (again: from now). */
  mark(key: string, ttlMs: number): Promise<void>;
  /** Whether `key` is marked. */
  marked(key: string): Promise<boolean>;
}

/** Seconds until a window that ends in `ms` ends, at least 1. */
const secondsLeft = (ms: number) => Math.max(1, Math.ceil(ms / 1000));

export class MemoryLimiter implements Limiter {
  private readonly windows: LRUCache<string, { count: number; resetAt: number }>;
  private readonly marks: LRUCache<string, true>;
  constructor(max = 100_000) {
    this.windows = new LRUCache({ max });
    this.marks = new LRUCache({ max });
  }
  async hit(key: string, limit: number, windowMs: number): Promise<number> {
    const now = Date.now();
    let w = this.windows.get(key);
    if (!w || w.resetAt <= now) {
      w = { count: 0, resetAt: now + windowMs };
      this.windows.set(key, w);
    }
    w.count++;
    return w.count > limit ? secondsLeft(w.resetAt - now) : 0;
  }
  async spent(key: string, limit: number): Promise<number> {
    const now = Date.now();
    const w = this.windows.get(key);
    return w && w.resetAt > now && w.count >= limit ? secondsLeft(w.resetAt - now) : 0;
  }
  async mark(key: string, ttlMs: number): Promise<void> {
    this.marks.set(key, true, { ttl: ttlMs });
  }
  async marked(key: string): Promise<boolean> {
    return this.marks.get(key) === true;
  }
}

export class RedisLimiter implements Limiter {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }
  async hit(key: string, limit: number, windowMs: number): Promise<number> {
    const [count, ttl] = (await this.redis.eval(
      `local c = redis.call('INCR', KEYS[1])
       if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
       return {c, redis.call('PTTL', KEYS[1])}`,
      1,
      `hub:limit:${key}`,
      windowMs,
    )) as [number, number];
    return count > limit ? secondsLeft(ttl) : 0;
  }
  async spent(key: string, limit: number): Promise<number> {
    const [count, ttl] = (await this.redis
      .multi()
      .get(`hub:limit:${key}`)
      .pttl(`hub:limit:${key}`)
      .exec())!.map(([, value]) => value) as [string | null, number];
    return Number(count ?? 0) >= limit && ttl > 0 ? secondsLeft(ttl) : 0;
  }
  async mark(key: string, ttlMs: number): Promise<void> {
    await this.redis.set(`hub:mark:${key}`, '1', 'PX', ttlMs);
  }
  async marked(key: string): Promise<boolean> {
    return (await this.redis.exists(`hub:mark:${key}`)) === 1;
  }
}
