// Fixed-window counters for rate limits that must hold across requests of one caller (login
// attempts per account and per address): in memory (embedded) or in Redis, shared by every API
// process (distributed).
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';

export interface Limiter {
  /** Counts one hit; returns 0 when allowed, else the seconds until the window ends. */
  hit(key: string, limit: number, windowMs: number): Promise<number>;
}

export class MemoryLimiter implements Limiter {
  private readonly windows: LRUCache<string, { count: number; resetAt: number }>;
  constructor(max = 100_000) {
    this.windows = new LRUCache({ max });
  }
  async hit(key: string, limit: number, windowMs: number): Promise<number> {
    const now = Date.now();
    let w = this.windows.get(key);
    if (!w || w.resetAt <= now) {
      w = { count: 0, resetAt: now + windowMs };
      this.windows.set(key, w);
    }
    w.count++;
    return w.count > limit ? Math.max(1, Math.ceil((w.resetAt - now) / 1000)) : 0;
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
    return count > limit ? Math.max(1, Math.ceil(ttl / 1000)) : 0;
  }
}
