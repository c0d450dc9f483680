// Read-your-writes over HTTP. A command answers the global position of its last event in
// `X-Hub-Position`, and the API remembers each caller's last write position (on the embedded hub's
// API threads the store's head stands for it, see StoreHeadLastWrites). A read waits until the projections it
// reads have applied max(that position, the request's `X-Hub-Min-Position`).

import type { Redis } from 'ioredis';
import type { Context } from 'koa';
import { LRUCache } from 'lru-cache';
import { withTimeout } from '../infra/deadline.ts';
import type { Logger } from '../infra/telemetry.ts';
import { badRequest } from './errors.ts';

export interface LastWrites {
  get(caller: string): Promise<number>;
  record(caller: string, position: number): Promise<void>;
  /** Kept elsewhere (Redis): a record may fail or hang, and a command's answer bounds its wait. */
  readonly remote?: boolean;
}

const REMEMBER_MS = 5 * 60_000;

/** One process's memory (embedded profile): bounded, entries forgotten after five minutes. */
export class MemoryLastWrites implements LastWrites {
  private readonly positions: LRUCache<string, { position: number; at: number }>;
  constructor(max = 100_000) {
    this.positions = new LRUCache({ max });
  }
  async get(caller: string): Promise<number> {
    const e = this.positions.get(caller);
    return e && Date.now() - e.at < REMEMBER_MS ? e.position : 0;
  }
  async record(caller: string, position: number): Promise<void> {
    const e = this.positions.get(caller);
    this.positions.set(caller, { position: Math.max(position, e?.position ?? 0), at: Date.now() });
  }
}

// ARGV: how long to remember, then pairs of key and position; each key keeps the larger position.
const RECORD = `
for i = 2, #ARGV, 2 do
  if tonumber(ARGV[i + 1]) > tonumber(redis.call('GET', ARGV[i]) or '0') then
    redis.call('SET', ARGV[i], ARGV[i + 1], 'PX', ARGV[1])
  end
end
return 1
`;

/**
 * Shared by every API process (distributed profile). The records of one turn of the event loop
 * (the callers answered by one group commit, typically) go to Redis in one script call: a round
 * trip per request was the API's largest share of Redis traffic.
 */
export class RedisLastWrites implements LastWrites {
  readonly remote = true;
  private readonly redis: Redis & { hubLastWrites(...args: (string | number)[]): Promise<number> };
  private pending: { positions: Map<string, number>; recorded: Promise<void> } | undefined;
  constructor(redis: Redis) {
    if (!('hubLastWrites' in redis)) redis.defineCommand('hubLastWrites', { numberOfKeys: 0, lua: RECORD });
    this.redis = redis as RedisLastWrites['redis'];
  }
  async get(caller: string): Promise<number> {
    return Number((await this.redis.get(`hub:rw:${caller}`)) ?? 0);
  }
  record(caller: string, position: number): Promise<void> {
    if (!this.pending) {
      const positions = new Map<string, number>();
      const recorded = new Promise<void>((resolve) => setImmediate(resolve)).then(async () => {
        this.pending = undefined; // records from here on go in the next call
        await this.redis.hubLastWrites(
          REMEMBER_MS,
          ...[...positions].flatMap(([c, p]) => [`hub:rw:${c}`, p]),
        );
      });
      this.pending = { positions, recorded };
    }
    const { positions, recorded } = this.pending;
    positions.set(caller, Math.max(position, positions.get(caller) ?? 0));
    return recorded;
  }
}

/**
 * The API threads' (embedded profile, HUB_API_THREADS): recording each write would cost every
 * command a call to the main thread. Instead a read waits for everything stored before it began
 * (the store's head), which holds the caller's last write: the same guarantee, paid for by the
 * reads of read models (a few, each waiting the projector's lag at most) instead of every write.
 */
export class StoreHeadLastWrites implements LastWrites {
  private readonly store: { head(): Promise<number> };
  constructor(store: { head(): Promise<number> }) {
    this.store = store;
  }
  get(): Promise<number> {
    return this.store.head();
  }
  async record(): Promise<void> {}
}

export interface Consistency {
  /** After a command: answer the position and remember it for the caller. */
  written(ctx: Context, position: number): Promise<void>;
  /** Before a read: wait until the projections have the caller's writes (503 past the bound). */
  readable(ctx: Context, projections: string[]): Promise<void>;
}

/** Waits until the projections have applied `position` (see waitForPosition). */
export type WaitForPosition = (projections: string[], position: number) => Promise<void>;

/** What a process does when a write was not remembered (Redis failed or hung): a warning at most
 * every 10 s, since at ingestion rates an outage would be a line per write. */
export function warnUnremembered(logger: Logger): (err: unknown) => void {
  let warned = 0;
  return (err) => {
    if (Date.now() - warned < 10_000) return;
    warned = Date.now();
    logger.warn({ error: (err as Error).message }, 'writes are not remembered for read-your-writes');
  };
}

/** How long a command's answer waits for its write to be remembered, ms. */
const RECORD_WAIT_MS = 1000;

export function consistency(
  lastWrites: LastWrites,
  waitFor: WaitForPosition,
  recordFailed: (err: unknown) => void = () => {},
): Consistency {
  return {
    async written(ctx, position) {
      ctx.set('X-Hub-Position', String(position));
      if (!ctx.state.caller) return;
      // In memory, or not recorded at all (API threads): nothing to bound, no timer per write.
      if (!lastWrites.remote) return lastWrites.record(ctx.state.caller, position);
      // The write is stored: remembering it (Redis, distributed) neither fails its answer nor holds
      // it past a bound. Unremembered, the caller's next read may not wait for it; the answer's
      // X-Hub-Position, sent back as X-Hub-Min-Position, still makes it wait.
      await withTimeout(
        lastWrites.record(ctx.state.caller, position),
        RECORD_WAIT_MS,
        'the write was not remembered',
      ).catch(recordFailed);
    },
    async readable(ctx, projections) {
      const asked = minPosition(ctx);
      const own = ctx.state.caller ? await lastWrites.get(ctx.state.caller) : 0;
      const position = Math.max(asked, own);
      if (position > 0) await waitFor(projections, position);
    },
  };
}

/** The request's X-Hub-Min-Position (0 when absent); 400 when it is not what a command answered,
 * a decimal integer. Every operation that publishes the header checks it (routes.ts), whether or
 * not its answer then waits. */
export function minPosition(ctx: Context): number {
  const header = ctx.get('X-Hub-Min-Position');
  if (header && !/^\d{1,15}$/.test(header))
    throw badRequest('X-Hub-Min-Position is a decimal integer: an X-Hub-Position a command answered.', [
      { field: 'X-Hub-Min-Position', problem: 'must be a decimal integer' },
    ]);
  return header ? Number(header) : 0;
}
