// The account-wide event log: every derived event, whether or not a subscription matched it,
// kept for the retention period. Adapters: memory (embedded) and Redis (distributed). Writes are
// idempotent by event id, so a change processed twice is logged once.
import type { Redis } from 'ioredis';
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

export interface EventLog {
  append(events: WebhookEvent[]): Promise<void>;
  /** Newest first. */
  list(owner: string, query: EventQuery): Promise<{ items: WebhookEvent[]; total: number }>;
  /** undefined when unknown, expired or another account's. */
  get(owner: string, id: string): Promise<WebhookEvent | undefined>;
}

/** The log's order and time filters use the event's `created` (in ms); within one second, the
 * store order of the changes they came from, and the order of derivation. */
const score = (e: WebhookEvent) => e.created * 1000;
const before = (a: WebhookEvent, b: WebhookEvent) =>
  score(a) - score(b) || a.source_position - b.source_position || a.sequence - b.sequence;
/** Redis sorts equal scores by member: the member leads with the zero-padded source position. */
const member = (e: WebhookEvent) =>
  `${String(e.source_position).padStart(16, '0')}${String(e.sequence).padStart(2, '0')}:${e.id}`;

export class MemoryEventLog implements EventLog {
  private readonly byOwner = new Map<string, WebhookEvent[]>(); // oldest first
  private readonly byId = new Map<string, WebhookEvent>();
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
      let list = this.byOwner.get(e.owner);
      if (!list) {
        list = [];
        this.byOwner.set(e.owner, list);
      }
      // Appends arrive nearly in order: insert from the end.
      let i = list.length;
      while (i > 0 && before(list[i - 1]!, e) > 0) i--;
      list.splice(i, 0, e);
      let drop = 0;
      while (drop < list.length && (list.length - drop > this.maxPerOwner || score(list[drop]!) < horizon))
        drop++;
      for (const old of list.splice(0, drop)) this.byId.delete(old.id);
    }
  }

  async list(owner: string, q: EventQuery): Promise<{ items: WebhookEvent[]; total: number }> {
    const horizon = Date.now() - this.retentionMs;
    const hits = (this.byOwner.get(owner) ?? []).filter(
      (e) =>
        score(e) >= horizon &&
        (!q.type || e.type === q.type) &&
        (!q.resource_prn || e.resource_prn === q.resource_prn) &&
        (q.since === undefined || score(e) >= q.since) &&
        (q.until === undefined || score(e) < q.until),
    );
    hits.reverse();
    return { items: hits.slice(q.skip, q.skip + q.limit), total: hits.length };
  }

  async get(owner: string, id: string): Promise<WebhookEvent | undefined> {
    const e = this.byId.get(id);
    return e && e.owner === owner && score(e) >= Date.now() - this.retentionMs ? e : undefined;
  }
}

/**
 * Redis layout: each event a string `hub:evt:<id>` expiring with the retention; per owner four
 * sorted indexes by time (all, by type, by device, by type and device), trimmed past the
 * retention as they grow and expiring when idle, so neither memory nor keys grow without bound.
 */
export class RedisEventLog implements EventLog {
  private readonly redis: Redis;
  private readonly retentionMs: number;
  /** Last trim per index key: trimming once a minute is enough. */
  private readonly trimmed = new Map<string, number>();

  constructor(o: { redis: Redis; retentionMs: number }) {
    this.redis = o.redis;
    this.retentionMs = o.retentionMs;
  }

  private static indexes(e: Pick<WebhookEvent, 'owner' | 'type' | 'resource_prn'>): string[] {
    const base = `hub:evlog:${e.owner}`;
    return [
      base,
      `${base}:t:${e.type}`,
      `${base}:r:${e.resource_prn}`,
      `${base}:tr:${e.type}:${e.resource_prn}`,
    ];
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
    const horizon = now - this.retentionMs;
    const pipeline = this.redis.pipeline();
    const touched = new Set<string>();
    for (const e of events) {
      const expiresIn = score(e) + this.retentionMs - now;
      if (expiresIn <= 0) continue;
      pipeline.set(`hub:evt:${e.id}`, JSON.stringify(e), 'PX', Math.ceil(expiresIn));
      for (const key of RedisEventLog.indexes(e)) {
        pipeline.zadd(key, score(e), member(e));
        touched.add(key);
      }
    }
    for (const key of touched) {
      pipeline.pexpire(key, this.retentionMs);
      if (now - (this.trimmed.get(key) ?? 0) > 60_000) {
        pipeline.zremrangebyscore(key, '-inf', `(${horizon}`);
        this.trimmed.set(key, now);
      }
    }
    if (this.trimmed.size > 100_000) this.trimmed.clear();
    const results = await pipeline.exec();
    const failed = results?.find(([err]) => err);
    if (failed) throw failed[0];
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
