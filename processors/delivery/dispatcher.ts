// The dispatcher: takes delivery jobs from the `deliveries` topic (or the embedded processor's
// hand-offs) and delivers them first, storing in the durable schedule only those that must wait
// (a topic chunk's offsets are committed once each of its jobs is finished or stored), and runs
// the schedule: claims due jobs, signs and POSTs each to its subscription (attempt.ts), records
// the attempt, and schedules the retry or dead-letters. A slow or failing endpoint holds only its
// own subscription's slots: each subscription has a bounded number of attempts in flight and of
// jobs waiting here; jobs beyond them are left in the schedule until its queue drains.
// Connections are pooled per origin (undici).

import { LRUCache } from 'lru-cache';
import type { Registry } from 'prom-client';
import type { Bus, Consumer } from '../../infra/bus/port.ts';
import { TOPICS } from '../../infra/bus/port.ts';
import type { RateSlots } from '../../infra/rate-limits.ts';
import type { Logger } from '../../infra/telemetry.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import { Attempts } from './attempt.ts';
import { type CircuitOptions, Circuits } from './circuit.ts';
import { decodeJob } from './codec.ts';
import { Endpoints, type EndpointsOptions } from './endpoints.ts';
import { Durability, type Held } from './held.ts';
import { dispatcherMetrics } from './metrics.ts';
import type { Attempt, DeliveryStore, Job, Rooms } from './port.ts';
import { Throttle } from './throttle.ts';
import { PooledHttp, SpilloverHttp } from './webhook-http.ts';

export { RESPONSE_BODY_LIMIT } from './webhook-http.ts';

/** A claimed job is this dispatcher's for this long, renewed every third of it while held here:
 * if the process dies, another dispatcher claims the job once the lease runs out. */
export const LEASE_MS = 30_000;
/** Jobs waiting here per subscription, as a multiple of its attempts in flight. */
const QUEUE_FACTOR = 8;
/** A job handed off and held here unstored is stored (leased to this process) once it has been
 * here this long unfinished, so that the hand-off checkpoint moves on past a slow endpoint. */
export const SPILL_MS = 1000;
/** The share of a process's jobs (HUB_DISPATCHER_MAX_IN_FLIGHT) that may be waiting for their
 * subscription's slot: the rest is kept for jobs that start at once. */
const WAIT_SHARE = 0.75;
/** Handed-off jobs remembered once durable (finished or stored), so that a batch handed off again
 * skips them: about a megabyte. */
const DURABLE_JOBS_KEPT = 10_000;
/** How long a hand-off waits for a subscription's room to free before it asks whether that
 * subscription keeps pace with the others (see keptPace). */
export const ROOM_WAIT_MS = 250;
/** How long a hand-off waits for room in all, however steadily it frees: the processor's next batch
 * (or the topic's next chunk) waits for this one. Stored instead, a backlog on the topic cost the
 * schedule a write, a claim and a finish of its own per job: 61,000 of a prefilled topic's 70,000
 * jobs went that way, at a third of the rate of jobs delivered first. */
const HANDOFF_WAIT_MS = 1000;
/** Subscriptions of one hand-off waiting for room at once (see handOff). */
export const WAITS_PER_HANDOFF = 16;

export interface DispatcherOptions extends EndpointsOptions, CircuitOptions {
  bus: Bus;
  registry: SchemaRegistry;
  deliveries: DeliveryStore;
  logger: Logger;
  metrics: Registry;
  version: string;
  timeoutMs: number;
  /** Attempts in flight and jobs waiting in this process, all subscriptions together. */
  maxInFlight: number;
  /** Attempts in flight per subscription in this process. */
  maxInFlightPerSubscription: number;
  /** Threads of its own for the HTTP side of attempts: 0 (this thread) or 1 (past a rate: SpilloverHttp). */
  httpThreads: number;
  /** With the HTTP thread, the attempts a second kept on this one (SpilloverHttp's default; the
   * tests give 0, every attempt on the thread). */
  httpInlineUpToPerSecond?: number;
  /** The subscriptions' rate limits (throttle.ts); default: in this process. */
  rateSlots?: RateSlots;
}

export class Dispatcher {
  private readonly o: DispatcherOptions;
  /** The subscriptions the jobs go to. */
  private readonly endpoints: Endpoints;
  private readonly attempts: Attempts;
  private readonly throttle: Throttle;
  /** What each job's subscription lets it do before its attempt: paused, or its circuit open. */
  private readonly circuits: Circuits;
  private consumer: Consumer | undefined;
  /** This dispatcher holds every partition of the deliveries topic (see takesEveryJob). */
  private holdsEveryPartition = false;
  private running = false;
  private loopDone: Promise<void> | undefined;
  /** Ends the claim loop's sleep: set while it sleeps. */
  private wake: (() => void) | undefined;
  /** A wake that came while the loop was not asleep (reading the schedule): its next sleep ends at
   * once, as what woke it may have come after that read. */
  private wokenMeanwhile = false;
  private readonly inFlight = new Map<string, number>(); // subscription → attempts running
  /** Attempts whose slot freed, in all and by subscription while it has jobs here (see keptPace). */
  private slotsFreed = 0;
  private readonly slotsFreedOf = new Map<string, number>();
  private readonly waiting = new Map<string, Held[]>(); // subscription → jobs waiting for a slot
  private held = 0; // running + waiting (+ recording)
  /** Of `held`, those waiting for their subscription's slot. */
  private waitingCount = 0;
  /** The last claim left due jobs it could take no more of (their subscriptions' queues here full,
   * or the waiting share spent). */
  private starved = false;
  /** The claim loop waits for free slots (rather than for a due job): a finished attempt wakes it. */
  private waitingForSlots = false;
  /** Takes and hand-offs waiting for room (see waitForRoom). */
  private roomWaits = 0;
  /** Set as a stop begins: takes and hand-offs store what they hold no room for, instead of waiting. */
  private draining = false;
  private readonly holding = new Map<string, Held>(); // job id → the job, running or waiting here
  /** Subscriptions whose queue here a hand-off's wait saw full until it gave up: their jobs are
   * stored at once until the queue has drained by a chunk (see handOff). */
  private readonly slow = new Set<string>();
  /** Ids of the handed-off jobs that became durable here lately (see handOff's heldAlready). */
  private readonly durableJobs = new LRUCache<string, true>({ max: DURABLE_JOBS_KEPT });
  /** Jobs handed off and not stored, in the order they came. */
  private readonly fresh = new Set<Held>();
  /** Hand-offs and takes waiting for slots to free, each woken once its `enough` holds. */
  private roomWaiters: { enough: () => boolean; woken: () => void }[] = [];
  private spiller: NodeJS.Timeout | undefined;
  private stopping: Promise<void> | undefined;
  private unsubscribe: (() => void) | undefined;
  private renewer: NodeJS.Timeout | undefined;

  constructor(options: DispatcherOptions) {
    this.o = options;
    this.endpoints = new Endpoints(options);
    this.circuits = new Circuits(options);
    const http = { egress: options.egress.policy, timeoutMs: options.timeoutMs };
    const metrics = dispatcherMetrics(options.metrics, options.deliveries, {
      held: () => this.held,
      inFlight: () => this.attempts.inFlight,
    });
    this.attempts = new Attempts({
      http:
        options.httpThreads > 0
          ? new SpilloverHttp({ ...http, inlineUpToPerSecond: options.httpInlineUpToPerSecond })
          : new PooledHttp(http),
      metrics,
      version: options.version,
    });
    this.throttle = new Throttle(options.rateSlots, options.metrics);
  }

  async start(): Promise<void> {
    const { registry, deliveries } = this.o;
    this.consumer = await this.o.bus.consume({
      group: 'hub-dispatcher',
      topic: TOPICS.deliveries,
      partitionsConcurrently: 4,
      // A chunk of the topic is half a subscription's queue here (its jobs share a key, so a
      // partition's chunk is mostly one subscription's): a healthy subscription takes a chunk in
      // well within HANDOFF_WAIT_MS. Chunks of 1,000 took about a second at one subscription's
      // pace on a loaded 2-core machine, and their tails were stored.
      maxBatch: this.queueLimit / 2,
      onAssignment: (partitions, of) => {
        this.holdsEveryPartition = of > 0 && partitions.length === of;
      },
      // Delivered first, as the embedded processor's hand-offs are: a chunk's offsets are
      // committed once each of its jobs is finished or stored (see handOff), and the next chunk
      // comes meanwhile. Stored first, every job cost the schedule a write before its attempt and
      // another after it, and its attempt waited for the first.
      // A job the schedule knows (sent again after a processor's or a dispatcher's crash, a
      // rebalance) is left to it: pending, it is claimed from there; done, it was delivered.
      handle: async (messages) => {
        const jobs = messages.map((m) => decodeJob(registry, m));
        const known = await deliveries.known?.(jobs.map((j) => j.job_id));
        return this.handOff(known?.size ? jobs.filter((j) => !known.has(j.job_id)) : jobs);
      },
    });
    this.unsubscribe = deliveries.onEnqueue(() => this.wakeLoop());
    this.running = true;
    this.loopDone = this.loop();
    this.renewer = setInterval(() => {
      const leased = [...this.holding.values()].filter((h) => !h.fresh).map((h) => h.job.job_id);
      if (leased.length === 0) return;
      this.o.deliveries.renew(leased, Date.now() + LEASE_MS).catch((err) => {
        this.o.logger.warn({ err: (err as Error).message }, 'dispatcher: leases not renewed');
      });
    }, LEASE_MS / 3);
    this.spiller = setInterval(() => this.spill(), SPILL_MS / 4);
  }

  /**
   * Whether every delivery job would come to this dispatcher through the deliveries topic: it holds
   * each of the topic's partitions (it is the only dispatcher running). A processor in this process
   * may then hand its jobs here (`handOff`) rather than through the topic, and each subscription's
   * limits still hold for the whole hub. Once a second dispatcher joins, the next rebalance ends it;
   * jobs handed here until then are delivered here (the limits may be exceeded by them meanwhile).
   */
  get takesEveryJob(): boolean {
    return this.holdsEveryPartition && this.running && !this.draining;
  }

  /**
   * Jobs handed off by a processor in this process or taken from the deliveries topic, delivered first
   * and stored only if they must be: a job its subscription's queue here has room for is held in
   * memory and started as a slot frees; it is stored (leased to this process) only if it is not
   * finished within SPILL_MS, or when the process stops first. Delivery is at least once, and a
   * job's durable record is then its attempt, written as it would be anyway: most jobs never touch
   * the schedule. While a job has no room here (every slot taken, its subscription's queue full,
   * or the waiting share spent) the hand-off waits for room (the processor's backpressure, or the
   * topic's: a backlog stays where it is durable already). Each subscription's jobs wait beside
   * the others' (up to WAITS_PER_HANDOFF at once), so one subscription's wait holds up no other's
   * jobs of the batch. A subscription stops waiting, and stores what has no room for a claim, once
   * a wait saw no room free for ROOM_WAIT_MS while it fell behind the others (a slow subscription:
   * see keptPace), or once the hand-off has waited HANDOFF_WAIT_MS in all (the next batch is not
   * held up longer). Resolves once each job is held here or stored; `durable` once each is
   * finished or stored, and only then may the processor's hand-off checkpoint move past them.
   */
  async handOff(jobs: Job[]): Promise<{ durable: Promise<void> }> {
    const durability = new Durability();
    const stored: Job[] = [];
    const waitUntil = Date.now() + HANDOFF_WAIT_MS;
    /** Whether the job was handed off here already (its batch handed off again after a failed
     * write, maybe while the first hand-off still waits for room): held, this hand-off too is
     * durable only once that job is, or the checkpoint could pass a job held only in memory;
     * durable already (finished or stored lately), there is nothing more to do for it. */
    const heldAlready = (job: Job): boolean => {
      const here = this.holding.get(job.job_id);
      if (!here) return this.durableJobs.has(job.job_id);
      const earlier = here.fresh;
      if (earlier) {
        durability.add();
        earlier.done.then(
          () => durability.settle(),
          (err: Error) => durability.fail(err),
        );
      }
      return true;
    };
    const takeIn = async (sub: string, subJobs: Job[]) => {
      let patient = true;
      for (const job of subJobs) {
        if (heldAlready(job)) continue;
        // Woken once a chunk of this subscription's jobs would fit, not at every slot that frees. A
        // subscription whose queue a wait saw full to the end is slow: its jobs are stored at once
        // until its queue has drained by a chunk, rather than each hand-off waiting for it again.
        while (patient && this.running && !this.admits(sub) && !this.slow.has(sub)) {
          patient = Date.now() < waitUntil && (await this.waitForRoomOf(sub));
          if (!patient && this.queueRoom(sub) < this.subChunk) this.slow.add(sub);
        }
        // Another hand-off of the same batch may have taken the job in while this one waited.
        if (heldAlready(job)) continue;
        if (!this.running || !this.admits(sub)) {
          stored.push(job);
          continue;
        }
        durability.add();
        const held: Held = { job, due: Date.now(), fresh: durability };
        this.fresh.add(held);
        this.hold(held);
      }
    };
    const bySubscription = new Map<string, Job[]>();
    for (const job of jobs) {
      const same = bySubscription.get(job.subscription_id);
      if (same) same.push(job);
      else bySubscription.set(job.subscription_id, [job]);
    }
    // At most WAITS_PER_HANDOFF subscriptions wait at once: every attempt's end asks each waiter
    // whether its room has freed, and a change for an account with hundreds of subscriptions would
    // otherwise make as many waiters at saturation.
    const groups = [...bySubscription];
    const worker = async () => {
      for (let group = groups.shift(); group; group = groups.shift()) await takeIn(...group);
    };
    await Promise.all(Array.from({ length: Math.min(WAITS_PER_HANDOFF, groups.length) }, worker));
    durability.seal();
    if (stored.length > 0) await this.o.deliveries.enqueue(stored);
    return { durable: durability.done };
  }

  /** Resolves true once `enough` holds after a job is done (by default: `roomChunk` slots are
   * free), false after ROOM_WAIT_MS without (or once the dispatcher stops). */
  private roomFreed(enough = () => this.startRoom >= this.roomChunk): Promise<boolean> {
    // Stopping, a waiter stores what it holds instead. Room freed while the caller awaited
    // something else (a store write) has woken nobody.
    if (this.draining) return Promise.resolve(false);
    if (enough()) return Promise.resolve(this.running);
    return new Promise((resolve) => {
      const waiter = {
        enough,
        woken: () => {
          clearTimeout(timer);
          resolve(this.running && !this.draining);
        },
      };
      const timer = setTimeout(() => {
        this.roomWaiters = this.roomWaiters.filter((w) => w !== waiter);
        resolve(false);
      }, ROOM_WAIT_MS);
      this.roomWaiters.push(waiter);
    });
  }

  /** roomFreed, counted while it waits (and until its waiter has run on): a claim meanwhile takes
   * only half of the free room, leaving the rest to the waiters. */
  private async waitForRoom(enough?: () => boolean): Promise<boolean> {
    this.roomWaits++;
    try {
      return await this.roomFreed(enough);
    } finally {
      this.roomWaits--;
    }
  }

  /**
   * Waits for a chunk of `sub`'s room (see handOff): true once it frees, or when no room freed for
   * ROOM_WAIT_MS but `sub` kept pace meanwhile; false when it did not (or the dispatcher stops).
   */
  private async waitForRoomOf(sub: string): Promise<boolean> {
    const freed = this.slotsFreed;
    const freedOf = this.slotsFreedOf.get(sub) ?? 0;
    if (await this.waitForRoom(() => this.roomFor(sub) >= this.subChunk)) return true;
    return this.running && !this.draining && this.keptPace(sub, freed, freedOf);
  }

  /**
   * Whether `sub` freed at least half an average busy subscription's share of the slots freed since
   * `freed` and `freedOf` were read. A wait that sees no room for a while is not enough to call a
   * subscription slow: when every slot of the process is busy, a healthy subscription's queue
   * drains at the process's pace, which on a loaded machine was below a chunk in ROOM_WAIT_MS
   * (its jobs were then stored, a third of a prefilled topic's, each costing the schedule a write,
   * a claim and a finish). A hanging receiver frees nothing; when nothing freed at all, nothing
   * is moving, and waiting longer helps no one either.
   */
  private keptPace(sub: string, freed: number, freedOf: number): boolean {
    const all = this.slotsFreed - freed;
    const mine = (this.slotsFreedOf.get(sub) ?? 0) - freedOf;
    if (all === 0) return false;
    if (mine < 0) return true; // its count began again: its queue drained meanwhile
    return mine * this.inFlight.size * 2 >= all;
  }

  /** Wakes the waiters whose room has freed. */
  private wakeRoomWaiters(): void {
    if (this.roomWaiters.length === 0) return;
    const ready = this.roomWaiters.filter((w) => w.enough());
    if (ready.length === 0) return;
    this.roomWaiters = this.roomWaiters.filter((w) => !ready.includes(w));
    for (const w of ready) w.woken();
  }

  /** Stores the fresh jobs held here for SPILL_MS and not finished, leased to this process: their
   * attempts go on as they were, and their hand-offs need not wait for them. */
  private spill(now = Date.now()): void {
    const old: Held[] = [];
    for (const h of this.fresh) {
      if (h.due > now - SPILL_MS) break;
      if (!h.spill && !h.recording) old.push(h);
    }
    if (old.length === 0) return;
    const spill = this.storeFresh(old, now + LEASE_MS).catch((err: Error) => {
      this.o.logger.warn({ err: err.message, jobs: old.length }, 'dispatcher: jobs not stored; retrying');
      for (const h of old) h.spill = undefined;
    });
    for (const h of old) h.spill = spill;
  }

  /** Stores fresh jobs: leased to this process until `until`, or due now. A job the store knew
   * already (sent twice) counts as stored: its finish finds it by id. */
  private async storeFresh(fresh: Held[], until?: number): Promise<void> {
    const jobs = fresh.map((h) => h.job);
    await this.o.deliveries.enqueue(
      jobs,
      until === undefined ? undefined : { ids: jobs.map((j) => j.job_id), until },
    );
    for (const h of fresh) this.durable(h);
  }

  /** A fresh job is durable now: stored, or finished. */
  private durable(h: Held): void {
    if (h.fresh) this.durableJobs.set(h.job.job_id, true);
    h.fresh?.settle();
    h.fresh = undefined;
    h.spill = undefined;
    this.fresh.delete(h);
  }

  /** Jobs of a subscription waiting here for a slot. */
  private queued(sub: string): number {
    return this.waiting.get(sub)?.length ?? 0;
  }

  private get queueLimit(): number {
    return this.o.maxInFlightPerSubscription * QUEUE_FACTOR;
  }

  /** Jobs this process may still hold: running, being recorded, or waiting for a slot. */
  private get startRoom(): number {
    return this.o.maxInFlight - this.held;
  }

  /**
   * Of that, what jobs waiting for their subscription's slot may take: WAIT_SHARE of the whole,
   * the rest kept for jobs that start at once. When waiting jobs could fill it all, a few slow
   * subscriptions' queues did, and no other subscription's job was taken until one of their
   * attempts timed out; their older backlogs then took the freed slots first.
   */
  private get waitRoom(): number {
    return Math.min(this.startRoom, Math.floor(this.o.maxInFlight * WAIT_SHARE) - this.waitingCount);
  }

  /** Whether a job of `sub` would start at once: a free slot, none queued. */
  private startsNow(sub: string): boolean {
    return (this.inFlight.get(sub) ?? 0) + this.queued(sub) < this.o.maxInFlightPerSubscription;
  }

  /** Whether a job of `sub` may be held now: it starts at once, or waits within both limits. */
  private admits(sub: string): boolean {
    return this.roomFor(sub) > 0;
  }

  /** How many more jobs of `sub` may be held now (see admits). */
  private roomFor(sub: string): number {
    if (this.startsNow(sub)) return this.startRoom;
    return Math.min(this.queueRoom(sub), this.waitRoom);
  }

  /** Places left in `sub`'s queue here. */
  private queueRoom(sub: string): number {
    return this.queueLimit - this.queued(sub);
  }

  /** While most slots are busy, claims and hand-offs wait for this many to free (a sixteenth, at
   * most 64), so that they take work in batches rather than a job at a time. */
  private get roomChunk(): number {
    return Math.min(64, this.o.maxInFlight / 16);
  }

  /** A chunk of one subscription's room: roomChunk, or a quarter of its queue if that is less. */
  private get subChunk(): number {
    return Math.max(1, Math.min(this.roomChunk, Math.ceil(this.queueLimit / 4)));
  }

  /** Stops taking work: waiting jobs go back to the schedule at once, attempts in flight finish
   * (bounded by the attempt timeout) and are recorded. Once, however often it is called. */
  stop(): Promise<void> {
    this.stopping ??= this.shut();
    return this.stopping;
  }

  private async shut(): Promise<void> {
    this.draining = true;
    for (const w of this.roomWaiters.splice(0)) w.woken();
    await this.consumer?.stop();
    this.running = false;
    this.wakeLoop();
    clearInterval(this.spiller);
    await this.loopDone;
    await Promise.all([...this.fresh].map((h) => h.spill));
    const back = [...this.waiting.values()].flat();
    this.waiting.clear();
    this.waitingCount = 0;
    for (const h of back) this.holding.delete(h.job.job_id);
    this.held -= back.length;
    const now = Date.now();
    // Fresh jobs not started go into the schedule, due now; stored ones are handed back.
    const fresh = back.filter((h) => h.fresh);
    const storing = this.storeFresh(fresh).catch((err: Error) => {
      // Not stored: their hand-offs fail, so the hand-off checkpoint stays before them.
      for (const h of fresh) h.fresh?.fail(err);
    });
    await Promise.all([
      storing,
      ...back
        .filter((h) => !h.fresh)
        .map((h) =>
          this.o.deliveries.finish(h.job, null, Math.min(h.due, now)).catch(() => {
            // Not handed back: the lease runs out and another dispatcher claims it.
          }),
        ),
    ]);
    while (this.held > 0) await new Promise((r) => setTimeout(r, 20));
    clearInterval(this.renewer);
    this.unsubscribe?.();
    await this.attempts.close();
  }

  private sleep(ms: number): Promise<void> {
    if (this.wokenMeanwhile) {
      this.wokenMeanwhile = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.wake === done) this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  private wakeLoop(): void {
    if (this.wake) this.wake();
    else this.wokenMeanwhile = true;
  }

  private async loop(): Promise<void> {
    while (this.running) {
      try {
        // Claim in batches: while most slots are busy, wait for a sixteenth of them to free. Jobs
        // that would wait are taken only while their share has room (see `rooms`).
        const free = this.startRoom;
        if (free <= 0 || (this.held > 0 && free < this.roomChunk)) {
          this.waitingForSlots = true;
          await this.sleep(1000); // woken when a slot frees
          this.waitingForSlots = false;
          continue;
        }
        const now = Date.now();
        // Takes and hand-offs waiting for room get half of it: the schedule's jobs are not starved
        // by a busy topic, nor the topic's by a backlog in the schedule.
        const limit = Math.min(this.roomWaits > 0 ? Math.ceil(free / 2) : free, 500);
        this.wokenMeanwhile = false; // this claim sees what came before it
        const claimed = await this.o.deliveries.claim(now, limit, LEASE_MS, this.rooms());
        this.starved = false;
        if (claimed.length === 0) {
          // Sleep until the next due job, at most a second (jobs other processes schedule), and
          // wake early for jobs enqueued or rescheduled here. Jobs due and not claimed belong to
          // subscriptions whose queues here are full: wake when one has drained by half.
          const next = await this.o.deliveries.nextDue();
          this.starved = next !== undefined && next <= now;
          await this.sleep(
            next === undefined || this.starved ? 1000 : Math.min(Math.max(next - Date.now(), 1), 1000),
          );
          continue;
        }
        for (const { job, due } of claimed) this.accept(job, due);
      } catch (err) {
        this.o.logger.warn({ err: (err as Error).message }, 'dispatcher: schedule unreadable; retrying');
        await this.sleep(1000);
      }
    }
  }

  /** What a claim may take of each subscription: the room left in its queue here; once the
   * waiting budget is spent, only what its free slots start at once. */
  private rooms(): Rooms {
    const of: Record<string, number> = {};
    const canWait = this.waitRoom > 0;
    for (const sub of new Set([...this.waiting.keys(), ...this.inFlight.keys()]))
      of[sub] = canWait
        ? Math.max(0, this.queueLimit - this.queued(sub))
        : Math.max(0, this.o.maxInFlightPerSubscription - (this.inFlight.get(sub) ?? 0) - this.queued(sub));
    return { of, otherwise: canWait ? this.queueLimit : this.o.maxInFlightPerSubscription };
  }

  /** A claimed (or held) job: started at once if its subscription has a free slot, else waits here.
   * A claimed job is held even when takes filled the room it was claimed for meanwhile: sent back,
   * it cost the schedule a write and a claim more a second later. The excess is at most what
   * takes added during the claim (the process's places, the queues' and the waiting share's);
   * attempts stay within their slots. */
  private accept(job: Job, due: number): void {
    if (this.holding.has(job.job_id)) return; // already here (a lease renewed by a claim)
    this.hold({ job, due });
  }

  private hold(h: Held): void {
    const sub = h.job.subscription_id;
    const queue = this.waiting.get(sub);
    if (queue) queue.push(h);
    else this.waiting.set(sub, [h]);
    this.waitingCount++;
    this.holding.set(h.job.job_id, h);
    this.held++;
    this.pump(sub);
  }

  /** Starts the subscription's waiting jobs its free slots allow. A slot frees when the attempt's
   * answer is in: the next attempt need not wait for the record's write, the job stays held (and
   * its lease renewed) until the write is done. */
  private pump(sub: string): void {
    const queue = this.waiting.get(sub);
    while (queue && queue.length > 0 && (this.inFlight.get(sub) ?? 0) < this.o.maxInFlightPerSubscription) {
      const held = queue.shift()!;
      this.waitingCount--;
      this.inFlight.set(sub, (this.inFlight.get(sub) ?? 0) + 1);
      let slot = true;
      const release = () => {
        if (!slot) return;
        slot = false;
        this.inFlight.set(sub, this.inFlight.get(sub)! - 1);
        this.slotsFreed++;
        this.slotsFreedOf.set(sub, (this.slotsFreedOf.get(sub) ?? 0) + 1);
        if (this.inFlight.get(sub) === 0 && !this.waiting.get(sub)?.length) {
          this.inFlight.delete(sub);
          this.waiting.delete(sub);
          this.slotsFreedOf.delete(sub);
        }
        this.pump(sub);
      };
      void this.run(held, release).finally(() => {
        release();
        this.holding.delete(held.job.job_id);
        this.held--;
        // A freed slot matters to the claim loop only if it waits for slots, or if its last claim
        // left due jobs it could not take and this queue is at most half full. Else its next
        // due time, an enqueue or the 1-s poll wakes it (waking it at every attempt's end cost a
        // claim and a look at the next due time, two Redis round trips or two calls to the
        // SQLite thread, about one per ten deliveries at 500 a second).
        if (
          this.waitingForSlots ||
          (this.starved && (this.waiting.get(sub)?.length ?? 0) <= this.queueLimit / 2)
        )
          this.wakeLoop();
        if (this.slow.has(sub) && this.queueRoom(sub) >= this.subChunk) this.slow.delete(sub);
        this.wakeRoomWaiters();
      });
    }
  }

  private async run(held: Held, release: () => void): Promise<void> {
    const { job } = held;
    try {
      const looked = this.endpoints.get(job.subscription_id);
      const found = looked instanceof Promise ? await looked : looked;
      if (!found || found.sub.deleted) return await this.finish(held, null, null); // deleted: nothing more
      const gated = this.circuits.gate(found.sub);
      const wait = gated instanceof Promise ? await gated : gated;
      if (wait !== undefined) return await this.finish(held, null, wait); // paused, or its circuit open
      const slot = await this.throttle.wait(held, found.sub.rate_limit);
      if (slot > 0) return await this.finish(held, null, Date.now() + slot); // over its rate: its slot
      const attempt = await this.attempts.make(job, held.due, found);
      this.circuits.after(attempt); // before the next job of the subscription starts
      release();
      job.attempt = attempt.attempt;
      await this.finish(held, attempt, attempt.next);
    } catch (err) {
      // Not recorded: the lease runs out and the job is claimed again. A fresh job has no lease to
      // run out: it is stored now, due, for a claim (and its hand-off waits for that), rather than
      // by the next spill, which a stop would never run.
      if (held.fresh && !held.recording && !held.spill) {
        const fresh = held.fresh;
        held.spill = this.storeFresh([held]).catch((e: Error) => fresh.fail(e));
      }
      this.o.logger.warn(
        { err: (err as Error).message, job: job.job_id },
        'dispatcher: attempt not recorded',
      );
    }
  }

  /** Records the attempt, and the job's next due time. A fresh job has no row to be claimed again
   * from: its record is written again, a second apart, until it is (or the process stops, and its
   * hand-off fails: the hand-off checkpoint stays before it). */
  private async finish(held: Held, attempt: Attempt | null, next: number | null): Promise<void> {
    for (;;) {
      if (held.spill) await held.spill; // being stored: the finish then finds its row
      held.recording = true;
      try {
        await this.o.deliveries.finish(held.job, attempt, next, held.fresh !== undefined);
        this.durable(held);
        return;
      } catch (err) {
        if (!held.fresh || !this.running) {
          held.fresh?.fail(err as Error);
          throw err;
        }
        this.o.logger.warn(
          { err: (err as Error).message, job: held.job.job_id },
          'dispatcher: attempt not recorded; retrying',
        );
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  }
}
