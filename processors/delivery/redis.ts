// The delivery store on Redis (the distributed profile): shared by every dispatcher process, its
// schedule changed by Lua scripts, each a step of a job's life (enqueue, claim, finish, renew).
import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import { type EndpointHealth, NO_ATTEMPTS } from './health.ts';
import {
  type Attempt,
  type AttemptLog,
  type AttemptRecord,
  CLAIM_SCAN_FACTOR,
  type DeliveryStore,
  type Hold,
  heldOf,
  type Job,
  PASSED_OVER_MS,
  type Rooms,
  recordOf,
  type StatusFilter,
} from './port.ts';

/** How often a Redis store measures its clock against Redis's. */
const CLOCK_SYNC_MS = 60_000;

interface FinishedJob {
  job: Job;
  attempt: Attempt | null;
  next: number | null;
  /** Delivered before it was ever stored here (see DeliveryStore.finish). */
  fresh: boolean;
  done: (err?: Error) => void;
}

const filterKey = (a: Attempt): StatusFilter[] =>
  a.status === 'succeeded' ? ['succeeded'] : a.status === 'failed' ? ['failed'] : ['failed', 'dead_lettered'];

// ARGV: now, retention, the lease's end, the holder; then per job its id, its body and whether to
// hold it ('1' or ''). Returns the ids of the jobs held (leased at once instead of scheduled).
const ENQUEUE = `
local due, ttl, lease, holder = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local held = {}
for i = 5, #ARGV, 3 do
  if redis.call('SET', 'hub:job:' .. ARGV[i], ARGV[i + 1], 'NX', 'PX', ttl) then
    if ARGV[i + 2] == '1' then
      redis.call('ZADD', 'hub:jobs:leased', lease, ARGV[i])
      redis.call('HSET', 'hub:jobs:holder', ARGV[i], holder)
      table.insert(held, ARGV[i])
    else
      redis.call('ZADD', 'hub:jobs:due', due, ARGV[i])
    end
  end
end
return held
`;
// Leases whose holder stopped renewing them come first, then due jobs; each moves to the leased
// set, scored by the lease's end, and is recorded as the claimer's in hub:jobs:holder. ARGV: now,
// limit, lease ms, how many jobs to look at, the room of a subscription not listed (-1: no rooms),
// how far to push back jobs passed over, the claimer; then pairs of subscription and room. A job
// passed over stays where it is, unless the jobs passed over filled the whole look and none was
// taken: then they are pushed back.
const CLAIM = `
local now, limit, lease, scan = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local otherwise, later, holder = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local room = {}
for i = 8, #ARGV, 2 do room[ARGV[i]] = tonumber(ARGV[i + 1]) end
local out = {}
local taken = 0
for _, set in ipairs({'hub:jobs:leased', 'hub:jobs:due'}) do
  if taken >= limit then break end
  local ids = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'WITHSCORES', 'LIMIT', 0, scan)
  local passed = {}
  local before = taken
  for i = 1, #ids, 2 do
    if taken >= limit then break end
    local body = redis.call('GET', 'hub:job:' .. ids[i])
    if not body then
      redis.call('ZREM', set, ids[i])
      redis.call('HDEL', 'hub:jobs:holder', ids[i])
    else
      local sub = otherwise < 0 and '' or string.match(body, '^{"subscription_id":"([^"]*)"') or ''
      local left = otherwise < 0 and 1 or room[sub] or otherwise
      if left > 0 then
        room[sub] = left - 1
        taken = taken + 1
        redis.call('ZREM', set, ids[i])
        redis.call('ZADD', 'hub:jobs:leased', now + lease, ids[i])
        redis.call('HSET', 'hub:jobs:holder', ids[i], holder)
        table.insert(out, body)
        table.insert(out, ids[i + 1])
      else
        table.insert(passed, ids[i])
      end
    end
  end
  if taken == before and #ids >= scan * 2 then
    for _, id in ipairs(passed) do
      redis.call('ZREM', set, id)
      redis.call('ZADD', 'hub:jobs:due', now + later, id)
    end
  end
end
return out
`;

// One call for a batch of finished jobs: ARGV now, retention, the finisher, how long a done job's
// id is kept (its body goes at once: a done job is sized by traffic, kept only to know one sent
// twice, which happens within minutes of it: a consumer or a processor that restarts), then per job
// eleven fields: job id, job body, next due ('' when done), attempt id ('' when none), attempt body,
// started ms, the attempt's index keys (space-separated), then for the endpoint health the
// attempt's subscription ('' without an attempt), '1' if it succeeded, and its end (ms); last, '1'
// if the job was delivered before it was ever stored. Such a job, done and still unknown here, is
// only marked done: one command instead of the schedule's six (a topic's jobs mostly go this way). Each
// subscription's health (hub:health:<sub>) follows health.ts's afterAttempt, is read and written
// once a call, and its probe lease ends. The attempt is recorded in any case; the
// job's state changes only if the finisher holds its lease: a dispatcher that lost its lease (it
// stalled past it, or Redis was out of its reach) and finishes late neither brings back a job its
// new holder completed nor cancels the retry it scheduled.
const FINISH = `
local now, ttl, finisher, doneTtl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local indexes, seen = {}, {}
local health, subs = {}, {}
for i = 5, #ARGV, 11 do
  local job, next, att, hsub = ARGV[i], ARGV[i + 2], ARGV[i + 3], ARGV[i + 7]
  if hsub ~= '' then
    local h = health[hsub]
    if not h then
      local v = redis.call('HMGET', 'hub:health:' .. hsub, 'ls', 'lf', 'n', 'since')
      h = { ls = tonumber(v[1]), lf = tonumber(v[2]), n = tonumber(v[3]) or 0, since = tonumber(v[4]) }
      health[hsub] = h
      subs[#subs + 1] = hsub
    end
    local at = tonumber(ARGV[i + 9])
    if ARGV[i + 8] == '1' then
      if not h.ls or at > h.ls then h.ls = at end
      if not h.lf or at >= h.lf then
        h.n = 0
        h.since = nil
      end
    else
      if not h.lf or at > h.lf then h.lf = at end
      if not h.ls or at >= h.ls then
        h.n = h.n + 1
        if not h.since then h.since = at end
      end
    end
  end
  if att ~= '' then
    redis.call('SET', 'hub:att:' .. att, ARGV[i + 4], 'PX', ttl)
    for key in string.gmatch(ARGV[i + 6], '%S+') do
      redis.call('ZADD', key, ARGV[i + 5], att)
      if not seen[key] then
        seen[key] = true
        indexes[#indexes + 1] = key
      end
    end
  end
  -- Delivered before it was ever stored, done, and unknown here: marked done, nothing else to change.
  local marked = ARGV[i + 10] == '1' and next == ''
    and redis.call('SET', 'hub:job:' .. job, '', 'PX', doneTtl, 'NX')
  local holder = not marked and redis.call('HGET', 'hub:jobs:holder', job)
  local mine = not marked and holder == finisher
  if not marked and not holder then
    -- Unnamed: an older version's lease, a job due and never claimed, or one not known here (a
    -- job delivered before it was stored) may change; a done one (known, in neither set) not.
    mine = redis.call('EXISTS', 'hub:job:' .. job) == 0 or redis.call('ZSCORE', 'hub:jobs:leased', job)
      or redis.call('ZSCORE', 'hub:jobs:due', job)
  end
  if mine then
    -- Due again it is nobody's (''), until its next claim: a late finish of its last holder finds
    -- it named for someone else. Done, its name goes.
    if next == '' then redis.call('HDEL', 'hub:jobs:holder', job)
    else redis.call('HSET', 'hub:jobs:holder', job, '') end
    if next == '' then redis.call('SET', 'hub:job:' .. job, '', 'PX', doneTtl)
    else redis.call('SET', 'hub:job:' .. job, ARGV[i + 1], 'PX', ttl) end
    redis.call('ZREM', 'hub:jobs:leased', job)
    if next == '' then
      redis.call('ZREM', 'hub:jobs:due', job)
    else
      redis.call('ZADD', 'hub:jobs:due', next, job)
    end
  end
end
-- Each index trimmed past the retention and its expiry moved once a call, after its last addition
-- (a subscription's keys recur at most of a batch's finishes).
for _, key in ipairs(indexes) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. (now - ttl))
  redis.call('PEXPIRE', key, ttl)
end
for _, sub in ipairs(subs) do
  local h, key = health[sub], 'hub:health:' .. sub
  local fields = { 'n', h.n, 'probe', 0 }
  for _, f in ipairs({ 'ls', 'lf', 'since' }) do
    if h[f] then
      fields[#fields + 1] = f
      fields[#fields + 1] = string.format('%.0f', h[f])
    end
  end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, ttl)
end
return 0
`;

// The jobs of ARGV the schedule knows (pending, or done within HUB_DONE_JOBS_KEPT_S): their ids.
const KNOWN = `
local out = {}
for i = 1, #ARGV do
  if redis.call('EXISTS', 'hub:job:' .. ARGV[i]) == 1 then out[#out + 1] = ARGV[i] end
end
return out
`;

// The probe of a half-open circuit: ARGV the subscription, now and the lease's end (Redis's
// clock). Taken when the subscription has a health and no lease in force (a finish ends it).
const PROBE = `
local key = 'hub:health:' .. ARGV[1]
if redis.call('EXISTS', key) == 0 then return 0 end
if tonumber(redis.call('HGET', key, 'probe') or '0') > tonumber(ARGV[2]) then return 0 end
redis.call('HSET', key, 'probe', ARGV[3])
return 1
`;

// ARGV: the leases' new end, the renewer, then job ids. XX: only jobs still leased (a finish
// removed its job from the set in the same script that scheduled or completed it, so a renewal
// racing it changes nothing), and only the renewer's: a dispatcher that lost a lease to another
// does not extend that one's.
const RENEW = `
local ends, renewer = ARGV[1], ARGV[2]
for i = 3, #ARGV do
  local holder = redis.call('HGET', 'hub:jobs:holder', ARGV[i])
  if not holder or holder == renewer then redis.call('ZADD', 'hub:jobs:leased', 'XX', ends, ARGV[i]) end
end
return 0
`;

/** A finish as FINISH takes it: the job's id, body and next due time, then the attempt's id,
 * record, start and index keys (empty without an attempt, or when it is recorded elsewhere), and
 * what the endpoint health takes of it (empty without an attempt). */
function redisFinish(
  { job, attempt, next, fresh }: FinishedJob,
  offset: number,
  record: boolean,
): (string | number)[] {
  // A finished job's record only marks its id as seen (a job sent twice is known): no body.
  const values: (string | number)[] = [
    job.job_id,
    next === null ? '' : redisBody(job),
    next === null ? '' : next + offset, // on Redis's clock
  ];
  if (!attempt || !record) values.push('', '', 0, '');
  else {
    const sub = attempt.subscription_id;
    const keys = [
      `hub:atts:${sub}`,
      ...filterKey(attempt).map((status) => `hub:atts:${sub}:${status}`),
      `hub:atts-evt:${attempt.owner}:${attempt.event_id}`,
    ];
    values.push(attempt.id, JSON.stringify(recordOf(attempt)), attempt.started, keys.join(' '));
  }
  if (attempt)
    values.push(attempt.subscription_id, attempt.status === 'succeeded' ? '1' : '', attempt.finished);
  else values.push('', '', 0);
  values.push(fresh ? '1' : '');
  return values;
}

/** A job as Redis keeps it: its subscription first, where the claim script reads it. */
function redisBody({ subscription_id, ...rest }: Job): string {
  return JSON.stringify({ subscription_id, ...rest });
}

type Scripted = Redis & {
  hubJobsEnqueue(...args: (string | number)[]): Promise<string[]>;
  hubJobsClaim(...args: (string | number)[]): Promise<string[]>;
  hubJobsFinish(...args: (string | number)[]): Promise<number>;
  hubJobsRenew(...args: (string | number)[]): Promise<number>;
  hubJobsKnown(...ids: string[]): Promise<string[]>;
  hubHealthProbe(...args: (string | number)[]): Promise<number>;
};

/**
 * Redis layout: each job `hub:job:<id>` (its body while it is pending, then its id alone for
 * `doneJobsMs`, so a job sent twice is known),
 * the schedule `hub:jobs:due` (score: due ms), the claimed jobs `hub:jobs:leased` (score: the
 * lease's end; a job is in one of the two sets while pending); each attempt `hub:att:<id>`, indexed per
 * subscription (all, succeeded, failed, dead_lettered) and per event, all expiring with the retention.
 * With `records` (what the distributed profile runs), the attempts are written there instead, each
 * batch before the schedule's script: a batch whose records fail changes no job (its leases run
 * out, and the jobs are tried again), and one whose script fails has its attempts recorded.
 */
export class RedisDeliveryStore implements DeliveryStore {
  private readonly redis: Scripted;
  private readonly retentionMs: number;
  private readonly records: AttemptLog | undefined;
  private readonly doneJobsMs: number;
  private readonly emitter = new EventEmitter();
  /** Names this store's leases in hub:jobs:holder: its finishes and renewals act on those only. */
  private readonly holder = randomBytes(8).toString('hex');
  /**
   * Redis's clock less this process's, ms: the schedule's times (due, lease ends) are written and
   * read on Redis's clock, so that dispatchers on hosts whose clocks differ agree on them. Before,
   * a host 30 s behind wrote leases that had already ended for the others (who claimed its jobs
   * again at once), and its retries fired by its own clock. Measured with TIME at the start and
   * every CLOCK_SYNC_MS; the schedule's calls wait for the first measure.
   */
  private offset = 0;
  private readonly synced: Promise<void>;
  /** Set once the first measure is in: from then on no call awaits `synced`, which would give up
   * its turn and send its command apart from the turn's others (ioredis pipelines a turn's
   * commands into one write). */
  private measured = false;
  private readonly syncer: NodeJS.Timeout;
  private readonly clock: () => number;

  private finishing: FinishedJob[] = [];
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    redis: Redis,
    o: {
      retentionMs: number;
      /** This process's clock (tests). */
      clock?: () => number;
      /** Where the attempts are recorded; without it, in Redis. */
      records?: AttemptLog;
      /** How long a done job's id is kept, to know it if it is sent again (HUB_DONE_JOBS_KEPT_S). */
      doneJobsMs?: number;
    },
  ) {
    this.redis = redis as Scripted;
    this.doneJobsMs = Math.min(o.doneJobsMs ?? 900_000, o.retentionMs);
    this.records = o.records;
    this.clock = o.clock ?? Date.now;
    this.synced = this.sync();
    this.syncer = setInterval(() => void this.sync(), CLOCK_SYNC_MS);
    this.syncer.unref();
    if (!(redis as unknown as Partial<Scripted>).hubJobsFinish) {
      redis.defineCommand('hubJobsEnqueue', { numberOfKeys: 0, lua: ENQUEUE });
      redis.defineCommand('hubJobsClaim', { numberOfKeys: 0, lua: CLAIM });
      redis.defineCommand('hubJobsFinish', { numberOfKeys: 0, lua: FINISH });
      redis.defineCommand('hubJobsRenew', { numberOfKeys: 0, lua: RENEW });
      redis.defineCommand('hubJobsKnown', { numberOfKeys: 0, lua: KNOWN });
      redis.defineCommand('hubHealthProbe', { numberOfKeys: 0, lua: PROBE });
    }
    this.retentionMs = o.retentionMs;
    this.emitter.setMaxListeners(0);
  }

  private async sync(): Promise<void> {
    try {
      const before = this.clock();
      const [seconds, micros] = await this.redis.time();
      const after = this.clock();
      // A slow answer says little about the clocks: the last measure stands.
      if (after - before <= 100)
        this.offset = Math.round(Number(seconds) * 1000 + Number(micros) / 1000 - (before + after) / 2);
    } catch {
      // Redis out of reach: the schedule's calls fail on their own; the last measure stands.
    }
    this.measured = true;
  }

  async enqueue(jobs: Job[], hold?: Hold): Promise<Job[]> {
    if (jobs.length === 0) return [];
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    const args: (string | number)[] = [
      this.clock() + this.offset,
      this.retentionMs,
      hold ? hold.until + this.offset : 0,
      this.holder,
    ];
    const holds = new Set(hold?.ids);
    for (const j of jobs) args.push(j.job_id, redisBody(j), holds.has(j.job_id) ? '1' : '');
    const ids = await this.redis.hubJobsEnqueue(...args);
    if (ids.length < jobs.length) this.emitter.emit('enqueue');
    return heldOf(jobs, ids);
  }

  async claim(
    now: number,
    limit: number,
    leaseMs: number,
    rooms?: Rooms,
  ): Promise<{ job: Job; due: number }[]> {
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    const at = now + this.offset;
    const args: (string | number)[] = rooms
      ? [at, limit, leaseMs, limit * CLAIM_SCAN_FACTOR, rooms.otherwise, PASSED_OVER_MS, this.holder]
      : [at, limit, leaseMs, limit, -1, 0, this.holder];
    for (const [sub, room] of Object.entries(rooms?.of ?? {})) args.push(sub, room);
    const flat = await this.redis.hubJobsClaim(...args);
    const out: { job: Job; due: number }[] = [];
    for (let i = 0; i < flat.length; i += 2)
      out.push({ job: JSON.parse(flat[i]!) as Job, due: Number(flat[i + 1]) - this.offset });
    return out;
  }

  async known(jobIds: string[]): Promise<Set<string>> {
    if (jobIds.length === 0) return new Set();
    // Pending or done, a job's key is there (a done one's for doneJobsMs). One call for the chunk:
    // a pipeline of an EXISTS per job cost the dispatcher a command's object, promise and reply each.
    return new Set(await this.redis.hubJobsKnown(...jobIds));
  }

  /** Only jobs still leased, and to this store's holder: see RENEW. */
  async renew(jobIds: string[], until: number): Promise<void> {
    if (jobIds.length === 0) return;
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    await this.redis.hubJobsRenew(until + this.offset, this.holder, ...jobIds);
  }

  /** Group-committed: the jobs finished within one turn of the event loop share one script call. */
  finish(job: Job, attempt: Attempt | null, next: number | null, fresh = false): Promise<void> {
    return new Promise((resolve, reject) => {
      this.finishing.push({ job, attempt, next, fresh, done: (err) => (err ? reject(err) : resolve()) });
      if (this.finishing.length === 1)
        setImmediate(() => {
          this.flushing = this.flushFinished();
        });
    });
  }

  private async flushFinished(): Promise<void> {
    const batch = this.finishing;
    this.finishing = [];
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    // `now` trims the attempt indexes, scored by the attempts' own (this process's) start times.
    const args: (string | number)[] = [this.clock(), this.retentionMs, this.holder, this.doneJobsMs];
    const sent: FinishedJob[] = [];
    const rows: unknown[] = [];
    const { records } = this;
    for (const f of batch) {
      try {
        const values = redisFinish(f, this.offset, !records);
        if (records && f.attempt) rows.push(records.rowOf(f.attempt));
        args.push(...values);
        sent.push(f);
      } catch (err) {
        f.done(err as Error); // a finish that cannot be written fails alone, not its batch
      }
    }
    if (sent.length === 0) return;
    let failure: Error | undefined;
    try {
      if (rows.length > 0) await records!.append(rows);
      await this.redis.hubJobsFinish(...args);
    } catch (err) {
      failure = err as Error;
    }
    for (const f of sent) f.done(failure);
    if (!failure && sent.some((f) => f.next !== null)) this.emitter.emit('enqueue');
  }

  async health(subscriptions: string[]): Promise<EndpointHealth[]> {
    const read = await Promise.all(
      subscriptions.map((sub) => this.redis.hmget(`hub:health:${sub}`, 'ls', 'lf', 'n', 'since')),
    );
    const ms = (v: string | null) => (v === null ? null : Number(v));
    return read.map(([ls, lf, n, since]) =>
      n === null || n === undefined
        ? NO_ATTEMPTS
        : {
            lastSuccess: ms(ls ?? null),
            lastFailure: ms(lf ?? null),
            consecutiveFailures: Number(n),
            failingSince: ms(since ?? null),
          },
    );
  }

  async probe(subscription: string, now: number, until: number): Promise<boolean> {
    if (!this.measured) await this.synced; // no turn lost once measured: see `measured`
    return (await this.redis.hubHealthProbe(subscription, now + this.offset, until + this.offset)) === 1;
  }

  async nextDue(): Promise<number | undefined> {
    const [due, leased] = await Promise.all(
      ['hub:jobs:due', 'hub:jobs:leased'].map((k) => this.redis.zrange(k, '0', '0', 'WITHSCORES')),
    );
    const firsts = [due!, leased!].filter((f) => f.length > 0).map((f) => Number(f[1]));
    return firsts.length ? Math.min(...firsts) - this.offset : undefined;
  }

  async pending(): Promise<{ count: number; oldestDue: number | undefined }> {
    const [due, leased, oldestDue] = await Promise.all([
      this.redis.zcard('hub:jobs:due'),
      this.redis.zcard('hub:jobs:leased'),
      this.nextDue(),
    ]);
    return { count: due + leased, oldestDue };
  }

  private async bodies(ids: string[]): Promise<AttemptRecord[]> {
    if (ids.length === 0) return [];
    const bodies = await this.redis.mget(ids.map((id) => `hub:att:${id}`));
    return bodies.filter((b): b is string => b !== null).map((b) => JSON.parse(b) as AttemptRecord);
  }

  /** The oldest start an index entry may have and still be listed: an older one's record has
   * expired (it was written at the attempt's end, to expire a retention later), but the entry
   * stays until a finish of its subscription trims the index. */
  private get listedFrom(): number {
    return Date.now() - this.retentionMs;
  }

  async attempts(subscription: string, q: { status?: StatusFilter; limit: number; skip: number }) {
    if (this.records) return this.records.attempts(subscription, q);
    const key = q.status ? `hub:atts:${subscription}:${q.status}` : `hub:atts:${subscription}`;
    const from = this.listedFrom;
    const [ids, total] = await Promise.all([
      this.redis.zrevrangebyscore(key, '+inf', from, 'LIMIT', q.skip, q.limit),
      this.redis.zcount(key, from, '+inf'),
    ]);
    return { items: await this.bodies(ids), total };
  }

  async attempt(id: string): Promise<AttemptRecord | undefined> {
    if (this.records) return this.records.attempt(id);
    const body = await this.redis.get(`hub:att:${id}`);
    return body ? (JSON.parse(body) as AttemptRecord) : undefined;
  }

  async attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    if (this.records) return this.records.attemptsOfEvent(owner, eventId);
    return this.bodies(
      await this.redis.zrangebyscore(`hub:atts-evt:${owner}:${eventId}`, this.listedFrom, '+inf'),
    );
  }

  onEnqueue(listener: () => void): () => void {
    this.emitter.on('enqueue', listener);
    return () => this.emitter.off('enqueue', listener);
  }

  async close(): Promise<void> {
    clearInterval(this.syncer);
    while (this.finishing.length > 0) await new Promise((r) => setImmediate(r));
    await this.flushing;
    this.emitter.removeAllListeners();
  }
}
