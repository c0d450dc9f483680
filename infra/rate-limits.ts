// The rate-limit algorithms, named by what they are. Token buckets: every request's budget per
// caller (a steady rate with bursts), in process. Fixed windows: counters that must hold across
// requests and processes (login attempts per account and per address, registrations per address),
// with marks that last a while (the addresses an account logged in from), in memory (embedded) or
// in Redis, shared by every API process (distributed). The Koa side is in api/http.ts. Rate slots:
// a webhook subscription's deliveries spaced at its rate, shared by every dispatcher the same way
// (processors/delivery/throttle.ts).
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';

/** Takes a token of a caller's budget: 0 when allowed, else the seconds until one is back. */
export interface TokenBuckets {
  take(key: string): number | Promise<number>;
}

/** Token buckets per caller key, capped in number (the oldest bucket goes first). In-process: each
 * API process limits on its own, which bounds the whole by processes × rate (an embedded hub's API
 * threads share their process's, on the main thread). */
export class MemoryTokenBuckets implements TokenBuckets {
  private readonly buckets: LRUCache<string, { tokens: number; at: number }>;
  private readonly perSecond: number;
  private readonly burst: number;
  constructor(perSecond: number, burst: number, maxCallers = 100_000) {
    this.perSecond = perSecond;
    this.burst = burst;
    this.buckets = new LRUCache({ max: maxCallers });
  }

  /** Takes a token: 0 when allowed, else the seconds until one is back. */
  take(key: string): number {
    if (this.perSecond <= 0) return 0;
    const now = performance.now();
    let bucket = this.buckets.get(key);
    if (!bucket) {
      bucket = { tokens: this.burst, at: now };
      this.buckets.set(key, bucket);
    }
    bucket.tokens = Math.min(this.burst, bucket.tokens + ((now - bucket.at) / 1000) * this.perSecond);
    bucket.at = now;
    if (bucket.tokens < 1) return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perSecond));
    bucket.tokens -= 1;
    return 0;
  }
}

/** Fixed-window counters and marks, by key. */
export interface FixedWindows {
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

export class MemoryFixedWindows implements FixedWindows {
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

export class RedisFixedWindows implements FixedWindows {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }
  async hit(key: string, limit: number, windowMs: number): Promise<number> {
    const [count, ttlMs] = (await this.redis.eval(
      `local c = redis.call('INCR', KEYS[1])
       if c == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
       return {c, redis.call('PTTL', KEYS[1])}`,
      1,
      `hub:limit:${key}`,
      windowMs,
    )) as [number, number];
    return count > limit ? secondsLeft(ttlMs) : 0;
  }
  async spent(key: string, limit: number): Promise<number> {
    const [count, ttlMs] = (await this.redis
      .multi()
      .get(`hub:limit:${key}`)
      .pttl(`hub:limit:${key}`)
      .exec())!.map(([, value]) => value) as [string | null, number];
    return Number(count ?? 0) >= limit && ttlMs > 0 ? secondsLeft(ttlMs) : 0;
  }
  async mark(key: string, ttlMs: number): Promise<void> {
    await this.redis.set(`hub:mark:${key}`, '1', 'PX', ttlMs);
  }
  async marked(key: string): Promise<boolean> {
    return (await this.redis.exists(`hub:mark:${key}`)) === 1;
  }
}

/**
 * Slots spaced at a key's rate (GCRA's virtual scheduling, without a burst): each reservation takes
 * the key's next free slot, at once if it is free by now, and frees the next one 1/rate later.
 * Unlike a token bucket refused, a caller over the rate is told when its own slot comes, so that
 * callers waiting for a key are spread one slot apart instead of all trying again at once.
 */
export interface RateSlots {
  /** Reserves the next slot of `key` at `perSecond`: ms from now until it (0: at once). */
  reserve(key: string, perSecond: number): Promise<number>;
}

/** One reservation: the slot reserved, given when the key's next slot is free (undefined: never
 * reserved, or long ago), and that next free time. ms. */
export function nextSlot(free: number | undefined, now: number, perSecond: number) {
  const slot = Math.max(free ?? now, now);
  return { slot, free: slot + 1000 / perSecond };
}

/** In this process (the embedded profile's one dispatcher). */
export class MemoryRateSlots implements RateSlots {
  private readonly free: LRUCache<string, number>;
  constructor(maxKeys = 100_000) {
    this.free = new LRUCache({ max: maxKeys });
  }
  async reserve(key: string, perSecond: number): Promise<number> {
    const now = Date.now();
    const { slot, free } = nextSlot(this.free.get(key), now, perSecond);
    this.free.set(key, free);
    return Math.ceil(slot - now);
  }
}

// nextSlot on Redis's clock, in one step: KEYS[1] the key's next free time; ARGV[1] the interval,
// ms. The key expires a second after its last slot has passed.
const RESERVE_SLOT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local slot = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now)
local free = slot + tonumber(ARGV[1])
redis.call('SET', KEYS[1], tostring(free), 'PX', math.ceil(free - now) + 1000)
return math.ceil(slot - now)
`;

/** In Redis, shared by every dispatcher (the distributed profile): the delay is read on Redis's
 * clock and answered relative, so that hosts whose clocks differ agree on the spacing. */
export class RedisRateSlots implements RateSlots {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }
  async reserve(key: string, perSecond: number): Promise<number> {
    return Number(await this.redis.eval(RESERVE_SLOT, 1, `hub:slots:${key}`, 1000 / perSecond));
  }
}
