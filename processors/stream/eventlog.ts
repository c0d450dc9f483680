// The account-wide event log: every derived event, whether or not a subscription matched it,
// kept for the retention period. Adapters: memory and SQLite (embedded), PostgreSQL (distributed;
// eventlog-postgres.ts), and Redis (what the distributed profile kept before, read now only to
// move it: postgres-logs-move.ts). Writes are idempotent by event id, so a change processed twice
// is logged once.
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { EventType, WebhookEvent } from './derive.ts';

export interface EventQuery {
  type?: EventType;
  resource_prn?: string;
  /** Unix ms, inclusive. */
  since?: number;
  /** Unix ms, exclusive. */
  until?: number;
  limit: number;
  skip: number;
}

/**
 * A place in the log's own order: the order its appends became readable in, not the events' time
 * (a processor may log an older change after a newer one). Written `<n>`, or on PostgreSQL
 * `<xid>.<source position>.<sequence>.<id>` (the appending transaction, then the order the events
 * were derived in) and `<xid>.` for a head, opaque to readers: GET /webhooks/events/stream
 * sends it as each event's SSE id and reads on after the one a client sends back.
 */
export type LogPosition = string;
export const LOG_POSITION = /^\d{1,20}(\.(\d{1,20}\.\d{1,10}\.evt_[0-9a-f]{1,64})?)?$/;

export interface Tail {
  /** The owner's events appended after the position asked, in the log's order, each with its own. */
  items: { event: WebhookEvent; position: LogPosition }[];
  /** Where to read on from: past the items, and past other accounts' events read on the way. */
  position: LogPosition;
  /** Whether more may follow at once (the read stopped at its limit). */
  more: boolean;
}

export interface EventLog {
  append(events: WebhookEvent[]): Promise<void>;
  /** Newest first. */
  list(owner: string, query: EventQuery): Promise<{ items: WebhookEvent[]; total: number }>;
  /** undefined when unknown, expired or another account's. */
  get(owner: string, id: string): Promise<WebhookEvent | undefined>;
  /** The position of the log's end now: a tail from it reads what is appended from now on. */
  head(): Promise<LogPosition>;
  /** At most `limit` of `owner`'s events appended after `after`, oldest appended first. Only what no
   * later append can come before is read: a reader that reads on from `position` misses nothing
   * and sees nothing twice. */
  tail(owner: string, after: LogPosition, limit: number): Promise<Tail>;
}

/** The log's order and time filters use the event's `created` (in ms); within one second, the
 * store order of the changes they came from, and the order of derivation. */
const score = (e: WebhookEvent) => e.created * 1000;
const before = (a: WebhookEvent, b: WebhookEvent) =>
  score(a) - score(b) || a.source_position - b.source_position || a.sequence - b.sequence;
/** Redis sorts equal scores by member: the member leads with the zero-padded source position. */
const member = (e: WebhookEvent) =>
  `${String(e.source_position).padStart(16, '0')}${String(e.sequence).padStart(2, '0')}:${e.id}`;

/** One owner's events, oldest first, from `items[head]`: dropping the oldest advances `head`,
 * and the array is compacted only once most of it is dropped, so a full log drops in O(1). */
interface OwnerLog {
  items: WebhookEvent[];
  head: number;
}

export class MemoryEventLog implements EventLog {
  private readonly byOwner = new Map<string, OwnerLog>();
  private readonly byId = new Map<string, WebhookEvent>();
  /** Each logged event's place in the order of appends (the log's position), from 1. */
  private readonly appended = new WeakMap<WebhookEvent, number>();
  private appends = 0;
  private readonly retentionMs: number;
  private readonly maxPerOwner: number;

  constructor(o: { retentionMs: number; maxPerOwner?: number }) {
    this.retentionMs = o.retentionMs;
    this.maxPerOwner = o.maxPerOwner ?? 100_000;
  }

  async append(events: WebhookEvent[]): Promise<void> {
    const horizon = Date.now() - this.retentionMs;
    for (const e of events) {
      if (this.byId.has(e.id) || score(e) < horizon) continue;
      this.byId.set(e.id, e);
      this.appended.set(e, ++this.appends);
      let log = this.byOwner.get(e.owner);
      if (!log) {
        log = { items: [], head: 0 };
        this.byOwner.set(e.owner, log);
      }
      const { items } = log;
      // Appends arrive nearly in order: insert from the end.
      let i = items.length;
      while (i > log.head && before(items[i - 1]!, e) > 0) i--;
      if (i === items.length) items.push(e);
      else items.splice(i, 0, e);
      while (
        log.head < items.length &&
        (items.length - log.head > this.maxPerOwner || score(items[log.head]!) < horizon)
      ) {
        this.byId.delete(items[log.head]!.id);
        items[log.head++] = undefined as unknown as WebhookEvent; // let it be collected
      }
      if (log.head > 1024 && log.head * 2 > items.length) {
        log.items = items.slice(log.head);
        log.head = 0;
      }
    }
  }

  async list(owner: string, q: EventQuery): Promise<{ items: WebhookEvent[]; total: number }> {
    const horizon = Date.now() - this.retentionMs;
    const log = this.byOwner.get(owner);
    const hits: WebhookEvent[] = [];
    // Newest first, as the port promises.
    for (let i = (log?.items.length ?? 0) - 1; log && i >= log.head; i--) {
      const e = log.items[i]!;
      if (
        score(e) >= horizon &&
        (!q.type || e.type === q.type) &&
        (!q.resource_prn || e.resource_prn === q.resource_prn) &&
        (q.since === undefined || score(e) >= q.since) &&
        (q.until === undefined || score(e) < q.until)
      )
        hits.push(e);
    }
    return { items: hits.slice(q.skip, q.skip + q.limit), total: hits.length };
  }

  async get(owner: string, id: string): Promise<WebhookEvent | undefined> {
    const e = this.byId.get(id);
    return e && e.owner === owner && score(e) >= Date.now() - this.retentionMs ? e : undefined;
  }

  async head(): Promise<LogPosition> {
    return String(this.appends);
  }

  /** Reads the owner's whole log (this adapter serves tests and benchmarks, not fleets). */
  async tail(owner: string, after: LogPosition, limit: number): Promise<Tail> {
    const from = Number.parseInt(after, 10);
    const log = this.byOwner.get(owner);
    const found: { event: WebhookEvent; n: number }[] = [];
    for (let i = log?.head ?? 0; log && i < log.items.length; i++) {
      const n = this.appended.get(log.items[i]!)!;
      if (n > from) found.push({ event: log.items[i]!, n });
    }
    found.sort((a, b) => a.n - b.n);
    const items = found.slice(0, limit).map(({ event, n }) => ({ event, position: String(n) }));
    const more = found.length > limit;
    return { items, position: more ? items.at(-1)!.position : String(Math.max(from, this.appends)), more };
  }
}

/** One call per batch: per event its body and four index entries. ARGV: now, retention ms, the
 * number of events, six values per event, then the index keys due for a trim (past the retention)
 * and a renewed expiry. */
const APPEND = `
local now, retention, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local horizon = now - retention
local last = 3 + 6 * n
for i = 4, last, 6 do
  local id, body, score, member, owner, extra = ARGV[i], ARGV[i+1], tonumber(ARGV[i+2]), ARGV[i+3], ARGV[i+4], ARGV[i+5]
  local ttl = score + retention - now
  if ttl > 0 then
    redis.call('SET', 'hub:evt:' .. id, body, 'PX', math.ceil(ttl))
    local base = 'hub:evlog:' .. owner
    local sep = string.find(extra, ' ', 1, true)
    local type, resource = string.sub(extra, 1, sep - 1), string.sub(extra, sep + 1)
    redis.call('ZADD', base, score, member)
    redis.call('ZADD', base .. ':t:' .. type, score, member)
    redis.call('ZADD', base .. ':r:' .. resource, score, member)
    redis.call('ZADD', base .. ':tr:' .. type .. ':' .. resource, score, member)
  end
end
for i = last + 1, #ARGV do
  redis.call('ZREMRANGEBYSCORE', ARGV[i], '-inf', '(' .. horizon)
  redis.call('PEXPIRE', ARGV[i], retention)
end
return 0
`;

type Scripted = Redis & { hubLogAppend(...args: (string | number)[]): Promise<number> };

/**
 * What the distributed profile kept before PostgreSQL, read now only to move it (no tail: nothing
 * streams from it). Redis layout: each event a string `hub:evt:<id>` expiring with the retention; per owner four
 * sorted indexes by time (all, by type, by device, by type and device), trimmed past the
 * retention as they grow and expiring when idle, so neither memory nor keys grow without bound.
 * A batch is one script call: Redis parses one command, not six per event.
 */
export class RedisEventLog implements Omit<EventLog, 'head' | 'tail'> {
  private readonly redis: Scripted;
  private readonly retentionMs: number;
  /** The index keys this process trimmed in the last minute (once a minute is enough), bounded:
   * a key forgotten early is only trimmed again sooner. */
  private readonly trimmed = new LRUCache<string, true>({ max: 100_000, ttl: 60_000 });

  constructor(o: { redis: Redis; retentionMs: number }) {
    this.redis = o.redis as Scripted;
    if (!(o.redis as unknown as Partial<Scripted>).hubLogAppend)
      o.redis.defineCommand('hubLogAppend', { numberOfKeys: 0, lua: APPEND });
    this.retentionMs = o.retentionMs;
  }

  private static index(owner: string, q: EventQuery): string {
    const base = `hub:evlog:${owner}`;
    if (q.type && q.resource_prn) return `${base}:tr:${q.type}:${q.resource_prn}`;
    if (q.type) return `${base}:t:${q.type}`;
    if (q.resource_prn) return `${base}:r:${q.resource_prn}`;
    return base;
  }

  async append(events: WebhookEvent[]): Promise<void> {
    if (events.length === 0) return;
    const now = Date.now();
    const args: (string | number)[] = [now, this.retentionMs, events.length];
    const due = new Set<string>();
    for (const e of events) {
      args.push(e.id, JSON.stringify(e), score(e), member(e), e.owner, `${e.type} ${e.resource_prn}`);
      const base = `hub:evlog:${e.owner}`;
      for (const key of [
        base,
        `${base}:t:${e.type}`,
        `${base}:r:${e.resource_prn}`,
        `${base}:tr:${e.type}:${e.resource_prn}`,
      ]) {
        if (this.trimmed.has(key)) continue;
        this.trimmed.set(key, true);
        due.add(key);
      }
    }
    args.push(...due);
    await this.redis.hubLogAppend(...args);
  }

  async list(owner: string, q: EventQuery): Promise<{ items: WebhookEvent[]; total: number }> {
    const key = RedisEventLog.index(owner, q);
    const min = Math.max(q.since ?? 0, Date.now() - this.retentionMs);
    const max = q.until === undefined ? '+inf' : `(${q.until}`;
    const [ids, total] = await Promise.all([
      this.redis.zrevrangebyscore(key, max, min, 'LIMIT', q.skip, q.limit),
      this.redis.zcount(key, min, max),
    ]);
    if (ids.length === 0) return { items: [], total };
    const bodies = await this.redis.mget(ids.map((m) => `hub:evt:${m.slice(m.indexOf(':') + 1)}`));
    const items = bodies.filter((b): b is string => b !== null).map((b) => JSON.parse(b) as WebhookEvent);
    return { items, total };
  }

  async get(owner: string, id: string): Promise<WebhookEvent | undefined> {
    const body = await this.redis.get(`hub:evt:${id}`);
    if (!body) return undefined;
    const e = JSON.parse(body) as WebhookEvent;
    return e.owner === owner ? e : undefined;
  }
}
