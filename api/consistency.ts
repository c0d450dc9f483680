// Read-your-writes over HTTP. A command answers the global position of its last event in
// `X-Hub-Position`, and the API remembers each caller's last write position. A read waits until
// the projections it reads have applied max(that position, the request's `X-Hub-Min-Position`).

import type { Redis } from 'ioredis';
import type { Context } from 'koa';
import type { ReadStore } from '../infra/readstore/port.ts';
import { waitForPosition } from '../projections/consistency.ts';

export interface LastWrites {
  get(caller: string): Promise<number>;
  record(caller: string, position: number): Promise<void>;
}

const REMEMBER_MS = 5 * 60_000;

/** One process's memory (embedded profile): bounded, entries forgotten after five minutes. */
export class MemoryLastWrites implements LastWrites {
  private readonly positions = new Map<string, { position: number; at: number }>();
  private readonly max: number;
  constructor(max = 100_000) {
    this.max = max;
  }
  async get(caller: string): Promise<number> {
    const e = this.positions.get(caller);
    return e && Date.now() - e.at < REMEMBER_MS ? e.position : 0;
  }
  async record(caller: string, position: number): Promise<void> {
    const e = this.positions.get(caller);
    this.positions.delete(caller);
    this.positions.set(caller, { position: Math.max(position, e?.position ?? 0), at: Date.now() });
    if (this.positions.size > this.max) this.positions.delete(this.positions.keys().next().value as string);
  }
}

/** Shared by every API process (distributed profile). */
export class RedisLastWrites implements LastWrites {
  private readonly redis: Redis;
  constructor(redis: Redis) {
    this.redis = redis;
  }
  async get(caller: string): Promise<number> {
    return Number((await this.redis.get(`hub:rw:${caller}`)) ?? 0);
  }
  async record(caller: string, position: number): Promise<void> {
    await this.redis.eval(
      `local v = tonumber(redis.call('GET', KEYS[1]) or '0')
       if tonumber(ARGV[1]) > v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end return 1`,
      1,
      `hub:rw:${caller}`,
      position,
      REMEMBER_MS,
    );
  }
}

export interface Consistency {
  /** After a command: answer the position and remember it for the caller. */
  written(ctx: Context, position: number): Promise<void>;
  /** Before a read: wait until the projections have the caller's writes (503 past the bound). */
  readable(ctx: Context, projections: string[]): Promise<void>;
}

export function consistency(readStore: ReadStore, lastWrites: LastWrites, waitMs: number): Consistency {
  return {
    async written(ctx, position) {
      ctx.set('X-Hub-Position', String(position));
      if (ctx.state.caller) await lastWrites.record(ctx.state.caller, position);
    },
    async readable(ctx, projections) {
      const asked = Number(ctx.get('X-Hub-Min-Position') || 0);
      const own = ctx.state.caller ? await lastWrites.get(ctx.state.caller) : 0;
      const position = Math.max(Number.isSafeInteger(asked) && asked > 0 ? asked : 0, own);
      await waitForPosition(readStore, projections, position, waitMs);
    },
  };
}
