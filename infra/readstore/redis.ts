// Redis read store (ioredis). A batch of writes and its checkpoint are applied by one Lua
// script, so they land together or not at all; the script also checks that the checkpoint is
// where the writer thinks (a crashed or duplicate runner cannot apply an event twice) and, for
// live runners, that the generation is still the active one.
//
// Keys: hub:rm:<projection>:active, :target, :g<N>:cp (hash: position, created),
// :g<N>:d:<key> (documents are hashes of JSON values; indexes are sorted sets).
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { commandConnection } from '../redis.ts';
import type {
  ApplyOutcome,
  Checkpoint,
  CheckpointListener,
  Doc,
  RangeOptions,
  ReadStore,
  Write,
} from './port.ts';

// Pub/sub channels belong to the server, not to a database: each name carries the database index,
// so that hubs in other databases of one Redis (a replay there included) are not heard.
const channelsOf = (db: number) => ({
  checkpoints: `hub:rm:checkpoints:${db}`,
  switches: `hub:rm:switches:${db}`,
});
const ACTIVE_CACHE_MS = 1000;

const APPLY = `
if ARGV[5] == '1' and tonumber(redis.call('GET', KEYS[2]) or '1') ~= tonumber(ARGV[1]) then return 'inactive' end
local cp = tonumber(redis.call('HGET', KEYS[1], 'position') or '0')
if cp ~= tonumber(ARGV[2]) then return 'moved' end
local prefix = ARGV[6]
local writes = cjson.decode(ARGV[9])
for _, w in ipairs(writes) do
  local k = prefix .. w[2]
  local op = w[1]
  if op == 's' then
    redis.call('DEL', k)
    if #w[3] > 0 then redis.call('HSET', k, unpack(w[3])) end
  elseif op == 'p' then
    if #w[3] > 0 then redis.call('HSET', k, unpack(w[3])) end
    if #w[4] > 0 then redis.call('HDEL', k, unpack(w[4])) end
  elseif op == 'd' then redis.call('DEL', k)
  elseif op == 'i' then redis.call('HINCRBY', k, w[3], w[4])
  elseif op == 'z' then redis.call('ZADD', k, w[4], w[3])
  elseif op == 'r' then redis.call('ZREM', k, w[3])
  end
end
redis.call('HSET', KEYS[1], 'position', ARGV[3], 'created', ARGV[4])
redis.call('PUBLISH', ARGV[7], ARGV[8] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3])
return 'ok'
`;

const UNLOCK = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
const LOCK = `
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0`;

type Scripted = Redis & {
  hubApply(...args: (string | number)[]): Promise<ApplyOutcome>;
  hubLock(key: string, owner: string, ttlMs: number): Promise<number>;
  hubUnlock(key: string, owner: string): Promise<number>;
};

const base = (p: string) => `hub:rm:${p}`;
const genKey = (p: string, g: number) => `${base(p)}:g${g}`;
const dataPrefix = (p: string, g: number) => `${genKey(p, g)}:d:`;

/** Encodes writes compactly for the script: [op, key, ...args]. */
function encode(writes: Write[]): string {
  return JSON.stringify(
    writes.map((w) => {
      switch (w.op) {
        case 'set': {
          const fields: string[] = [];
          for (const [f, v] of Object.entries(w.doc))
            if (v !== null && v !== undefined) fields.push(f, JSON.stringify(v));
          return ['s', w.key, fields];
        }
        case 'patch': {
          const set: string[] = [];
          const del: string[] = [];
          for (const [f, v] of Object.entries(w.doc)) {
            if (v === null || v === undefined) del.push(f);
            else set.push(f, JSON.stringify(v));
          }
          return ['p', w.key, set, del];
        }
        case 'del':
          return ['d', w.key];
        case 'incr':
          return ['i', w.key, w.field, w.by];
        case 'zadd':
          return ['z', w.key, w.member, w.score];
        default:
          return ['r', w.key, w.member];
      }
    }),
  );
}

export class RedisReadStore implements ReadStore {
  readonly kind = 'redis';
  private readonly redis: Scripted;
  private subscriber: Redis | undefined;
  /** Whether the checkpoint channel is subscribed: see onCheckpoint. */
  private checkpointsHeard = false;
  private readonly url: string;
  private readonly channels: ReturnType<typeof channelsOf>;
  private readonly activeCache = new Map<string, { generation: number; at: number }>();
  private readonly listeners = new Set<(projection: string, generation: number, position: number) => void>();

  constructor(url: string) {
    this.url = url;
    this.redis = commandConnection(url) as Scripted;
    this.channels = channelsOf(this.redis.options.db ?? 0);
    this.redis.defineCommand('hubApply', { numberOfKeys: 2, lua: APPLY });
    this.redis.defineCommand('hubLock', { numberOfKeys: 1, lua: LOCK });
    this.redis.defineCommand('hubUnlock', { numberOfKeys: 1, lua: UNLOCK });
    this.subscribe();
  }

  /** One subscriber connection: generation switches, and checkpoint notifications once asked for. */
  private subscribe(): void {
    const sub = new Redis(this.url, { maxRetriesPerRequest: null });
    sub.on('error', () => {});
    sub.on('message', (channel: string, message: string) => {
      const [projection, generation, position] = message.split(' ');
      if (channel === this.channels.switches) {
        this.activeCache.set(projection!, { generation: Number(generation), at: Date.now() });
      } else {
        for (const l of this.listeners) l(projection!, Number(generation), Number(position));
      }
    });
    void sub.subscribe(this.channels.switches).catch(() => {});
    this.subscriber = sub;
  }

  async activeGeneration(projection: string, fresh = false): Promise<number> {
    const cached = this.activeCache.get(projection);
    if (!fresh && cached && Date.now() - cached.at < ACTIVE_CACHE_MS) return cached.generation;
    const generation = Number((await this.redis.get(`${base(projection)}:active`)) ?? 1);
    this.activeCache.set(projection, { generation, at: Date.now() });
    return generation;
  }

  async activate(projection: string, generation: number): Promise<void> {
    await this.redis
      .multi()
      .set(`${base(projection)}:active`, generation)
      .publish(this.channels.switches, `${projection} ${generation}`)
      .exec();
    this.activeCache.set(projection, { generation, at: Date.now() });
  }

  async checkpoint(projection: string, generation: number): Promise<Checkpoint> {
    const cp = await this.redis.hmget(`${genKey(projection, generation)}:cp`, 'position', 'created');
    return { position: Number(cp[0] ?? 0), created: Number(cp[1] ?? 0) };
  }

  apply(
    projection: string,
    generation: number,
    writes: Write[],
    from: number,
    to: Checkpoint,
    onlyIfActive: boolean,
  ): Promise<ApplyOutcome> {
    return this.redis.hubApply(
      `${genKey(projection, generation)}:cp`,
      `${base(projection)}:active`,
      generation,
      from,
      to.position,
      to.created,
      onlyIfActive ? '1' : '0',
      dataPrefix(projection, generation),
      this.channels.checkpoints,
      projection,
      encode(writes),
    );
  }

  async get(projection: string, generation: number, key: string): Promise<Doc | undefined> {
    const hash = await this.redis.hgetall(dataPrefix(projection, generation) + key);
    const fields = Object.entries(hash);
    if (fields.length === 0) return undefined;
    return Object.fromEntries(fields.map(([f, json]) => [f, JSON.parse(json)]));
  }

  async range(projection: string, generation: number, key: string, o: RangeOptions = {}): Promise<string[]> {
    const k = dataPrefix(projection, generation) + key;
    const min = o.min === undefined ? '-inf' : String(o.min);
    const max = o.max === undefined ? '+inf' : String(o.max);
    const args: (string | number)[] = o.reverse ? [k, max, min, 'BYSCORE', 'REV'] : [k, min, max, 'BYSCORE'];
    if (o.offset !== undefined || o.limit !== undefined) args.push('LIMIT', o.offset ?? 0, o.limit ?? -1);
    return this.redis.call('ZRANGE', ...args) as Promise<string[]>;
  }

  count(
    projection: string,
    generation: number,
    key: string,
    min = -Infinity,
    max = Infinity,
  ): Promise<number> {
    const lo = min === -Infinity ? '-inf' : String(min);
    const hi = max === Infinity ? '+inf' : String(max);
    return this.redis.zcount(dataPrefix(projection, generation) + key, lo, hi);
  }

  private async *keys(pattern: string): AsyncGenerator<string[]> {
    let cursor = '0';
    do {
      const [next, keys] = await this.redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) yield keys;
    } while (cursor !== '0');
  }

  async dump(projection: string, generation: number): Promise<Record<string, unknown>> {
    const prefix = dataPrefix(projection, generation);
    const all: string[] = [];
    for await (const keys of this.keys(`${prefix}*`)) all.push(...keys);
    all.sort();
    const out: Record<string, unknown> = {};
    for (const key of all) {
      const type = await this.redis.type(key);
      if (type === 'hash') {
        const hash = await this.redis.hgetall(key);
        out[key.slice(prefix.length)] = Object.fromEntries(
          Object.keys(hash)
            .sort()
            .map((f) => [f, JSON.parse(hash[f]!)]),
        );
      } else if (type === 'zset') {
        const flat = await this.redis.zrange(key, '0', '-1', 'WITHSCORES');
        const entries: [string, number][] = [];
        for (let i = 0; i < flat.length; i += 2) entries.push([flat[i]!, Number(flat[i + 1])]);
        out[key.slice(prefix.length)] = entries;
      }
    }
    return out;
  }

  async drop(projection: string, generation: number): Promise<number> {
    let n = 0;
    for await (const keys of this.keys(`${dataPrefix(projection, generation)}*`)) {
      n += await this.redis.unlink(keys);
    }
    await this.redis.unlink(`${genKey(projection, generation)}:cp`);
    return n;
  }

  async replayTarget(projection: string): Promise<number | undefined> {
    const v = await this.redis.get(`${base(projection)}:target`);
    return v === null ? undefined : Number(v);
  }

  async setReplayTarget(projection: string, generation: number | undefined): Promise<void> {
    if (generation === undefined) await this.redis.del(`${base(projection)}:target`);
    else await this.redis.set(`${base(projection)}:target`, generation);
  }

  async lock(name: string, owner: string, ttlMs: number): Promise<boolean> {
    return (await this.redis.hubLock(`hub:lock:${name}`, owner, ttlMs)) === 1;
  }

  async unlock(name: string, owner: string): Promise<void> {
    await this.redis.hubUnlock(`hub:lock:${name}`, owner);
  }

  async lockHolder(name: string): Promise<string | undefined> {
    return (await this.redis.get(`hub:lock:${name}`)) ?? undefined;
  }

  /**
   * The checkpoint channel is subscribed at the first listener: only the processes that serve
   * reads listen (the API's read-your-writes waits). Every batch of every projection publishes a
   * notice, hundreds a second at 1,000 writes/s, and the projector, the processor and the
   * dispatcher had each taken them all. A notice missed while the subscription starts is made up
   * by the waits' own re-checks (waitForPosition).
   */
  onCheckpoint(listener: CheckpointListener): () => void {
    if (!this.checkpointsHeard && this.subscriber) {
      this.checkpointsHeard = true;
      void this.subscriber.subscribe(this.channels.checkpoints).catch(() => {
        this.checkpointsHeard = false; // the next listener tries again
      });
    }
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** For readiness checks. */
  async ping(): Promise<void> {
    await this.redis.ping();
  }

  async close(): Promise<void> {
    this.listeners.clear();
    this.subscriber?.disconnect();
    await this.redis.quit().catch(() => this.redis.disconnect());
  }
}

export const newOwnerId = () => `${process.pid}-${randomUUID().slice(0, 8)}`;
