// The stream processor: consumes the `changes` topic as a consumer group, runs each device's
// changes through its actor (derive.ts), records every derived event in its owner's log, and
// hands one delivery job per matching subscription on (the `deliveries` topic, or the dispatcher
// of this process: ProcessorOptions.handOff). A batch's offsets are committed only after all of
// that, and actor states are saved once its jobs are durable, so a crash at any point replays the
// batch into the same events (same ids) and nothing is lost.
import { LRUCache } from 'lru-cache';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Bus, Consumer, Handled, InMessage } from '../../infra/bus/port.ts';
import { SCHEMA_HEADER, TOPICS } from '../../infra/bus/port.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import type { ReadStore } from '../../infra/readstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';
import { webhookKeys, webhookList } from '../../projections/webhooks.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { Job } from '../delivery/port.ts';
import { ActorRuntime, type ActorStates } from './actors.ts';
import {
  aggregateKey,
  type Change,
  type DeviceActor,
  derive,
  initialActor,
  jobId,
  type WebhookEvent,
} from './derive.ts';
import type { EventLog } from './eventlog.ts';

/** What matching needs of a subscription (the read model of the webhooks projection). */
export interface SubscriptionFilter {
  id: string;
  owner: string;
  enabled: boolean;
  event_types: string[];
  devices: string[];
  user_meta_keys: string[];
  device_meta_keys: string[];
}

/** Spec, Delivery semantics 5: enabled, type listed, and the device and metadata-key filters. */
export function matches(sub: SubscriptionFilter, e: WebhookEvent): boolean {
  if (!sub.enabled || sub.owner !== e.owner || !sub.event_types.includes(e.type)) return false;
  if (sub.devices.length > 0 && !sub.devices.includes(e.resource_prn)) return false;
  const keys =
    e.type === 'device.user_meta.updated'
      ? sub.user_meta_keys
      : e.type === 'device.device_meta.updated'
        ? sub.device_meta_keys
        : [];
  if (keys.length > 0 && !(e.data.keys as string[]).some((k) => keys.includes(k))) return false;
  return true;
}

export interface Subscriptions {
  of(owner: string): Promise<SubscriptionFilter[]>;
}

const WEBHOOKS = webhookList.name;

/**
 * The subscriptions of the `webhooks` read model, read at each call, or an owner's list cached:
 * - `cacheMs` (distributed): reused for that long, so a subscription created or changed takes
 *   effect within it (the model is in Redis, written by another process);
 * - `until-written` (embedded, whose projector writes the model in this process): reused until the
 *   model is written or its generation switched, so a change takes effect at once. Read at every
 *   batch, the lists cost a tenth of the main thread's time per event at 500 events/s.
 */
export function projectedSubscriptions(
  readStore: ReadStore,
  cacheMs: number | 'until-written' = 0,
  owners = 10_000,
): Subscriptions {
  const untilWritten = cacheMs === 'until-written';
  const cache = new LRUCache<string, { lists: Promise<SubscriptionFilter[]>; generation: number }>({
    max: owners,
    ...(untilWritten ? {} : { ttl: Math.max(1, cacheMs) }),
  });
  // A write to the model ends every list read before it, those still being read too (a list is
  // cached as its read starts).
  if (untilWritten)
    readStore.onCheckpoint((projection, _generation, _position, wrote) => {
      if (projection === WEBHOOKS && wrote !== false) cache.clear();
    });
  const read = async (owner: string, generation?: number) => {
    const g = generation ?? (await readStore.activeGeneration(WEBHOOKS));
    const ids = await readStore.range(WEBHOOKS, g, webhookKeys.ofOwner(owner));
    const docs = await Promise.all(ids.map((id) => readStore.get(WEBHOOKS, g, webhookKeys.record(id))));
    return docs.filter((d) => d !== undefined) as unknown as SubscriptionFilter[];
  };
  /** The list cached from now on (as its read starts: a write meanwhile clears it). */
  const kept = (owner: string, lists: Promise<SubscriptionFilter[]>, generation: number) => {
    lists.catch(() => cache.delete(owner));
    cache.set(owner, { lists, generation });
    return lists;
  };
  return {
    async of(owner) {
      if (cacheMs === 0) return read(owner);
      if (!untilWritten) return cache.get(owner)?.lists ?? kept(owner, read(owner), 0);
      // Until written, a list also ends with its generation (a replay switched it).
      const generation = await readStore.activeGeneration(WEBHOOKS);
      const hit = cache.get(owner);
      if (hit && hit.generation === generation) return hit.lists;
      return kept(owner, read(owner, generation), generation);
    },
  };
}

const CHANGE_SCHEMA = 'ChangeRecord';

export class ProcessorMetrics {
  readonly derived: Counter<'type'>;
  readonly lag: Gauge<'partition'>;
  readonly duration: Histogram;
  readonly changes: Counter;
  readonly jobs: Counter;
  private readonly runtimes = new Set<Map<number, ActorRuntime<DeviceActor, Change, WebhookEvent>>>();

  constructor(registry: Registry) {
    const runtimes = this.runtimes;
    const sum = (pick: (r: ActorRuntime<DeviceActor, Change, WebhookEvent>) => number) => {
      let n = 0;
      for (const map of runtimes) for (const r of map.values()) n += pick(r);
      return n;
    };
    this.derived = new Counter({
      name: 'hub_processor_events_derived_total',
      help: 'Webhook events derived, by type.',
      labelNames: ['type'],
      registers: [registry],
    });
    this.changes = new Counter({
      name: 'hub_processor_changes_total',
      help: 'Changes (stored events) consumed from the changes topic, or taken from the relay of this process.',
      registers: [registry],
    });
    this.jobs = new Counter({
      name: 'hub_processor_delivery_jobs_total',
      help: 'Delivery jobs handed on: to the deliveries topic, or to the dispatcher of this process.',
      registers: [registry],
    });
    this.lag = new Gauge({
      name: 'hub_processor_consumer_lag',
      help: 'Messages of the changes topic not yet consumed, by partition (after the last batch).',
      labelNames: ['partition'],
      registers: [registry],
    });
    this.duration = new Histogram({
      name: 'hub_processor_batch_duration_seconds',
      help: 'Time to process one batch: derive, log, hand off jobs, save actor states.',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    });
    new Gauge({
      name: 'hub_processor_actors',
      help: 'Device actors in memory.',
      registers: [registry],
      collect() {
        this.set(sum((r) => r.stats.actors));
      },
    });
    new Gauge({
      name: 'hub_processor_mailbox_depth',
      help: 'Messages waiting in actor mailboxes.',
      registers: [registry],
      collect() {
        this.set(sum((r) => r.stats.mailboxDepth));
      },
    });
  }

  track(runtimes: Map<number, ActorRuntime<DeviceActor, Change, WebhookEvent>>): () => void {
    this.runtimes.add(runtimes);
    return () => this.runtimes.delete(runtimes);
  }
}

export interface ProcessorOptions {
  bus: Bus;
  registry: SchemaRegistry;
  states: ActorStates<DeviceActor>;
  log: EventLog;
  subscriptions: Subscriptions;
  logger: Logger;
  metrics: ProcessorMetrics;
  /** Device actors run at once per partition. */
  concurrency?: number;
  /** Device actors kept in memory per partition between batches (HUB_STATE_CACHE_ENTRIES). */
  maxActors?: number;
  partitionsConcurrently?: number;
  /** Hands delivery jobs to the dispatcher: the `deliveries` topic (distributed: durable when it
   * resolves), or the dispatcher of this process (embedded: the in-process bus is memory only),
   * which may deliver them before it stores them: then they are durable once `durable` resolves. */
  handOff: (jobs: Job[]) => Promise<{ durable: Promise<void> } | undefined>;
  /**
   * Embedded profile: actor states and the log live in memory and are rebuilt from the start of
   * the store at each start, but jobs handed off before must not go out twice. Changes at or below
   * this checkpoint are derived and logged without jobs; it moves as jobs are handed off.
   */
  handOffCheckpoint?: { checkpoints: CheckpointStore; name: string };
  /**
   * Embedded profile with its derived state on disk: a batch's actor states are saved only once its
   * jobs are durable, together with the position of its last change under this name, so a start
   * resumes the change stream there (`resumePosition`) with the states as they were at it.
   * Actors woken meanwhile see the states not yet saved. Without it, states are saved as soon as
   * the jobs are handed off when that makes them durable (the deliveries topic), else once they
   * are (the distributed profile's hand-off to a dispatcher of this process: saveInOrder).
   */
  resume?: { name: string };
  /** Distributed: the relay of this process may hand its changes here (takesChanges, take). */
  takesChanges?: boolean;
}

/** Only device and trail streams concern device actors; other changes pass by. */
function concernsActors(stream: string): boolean {
  return stream.startsWith('device-') || stream.startsWith('trail-');
}

/** The runtime and save chain of the changes taken in memory (a partition of their own). */
const IN_MEMORY = -1;

export class StreamProcessor {
  private readonly o: ProcessorOptions;
  private readonly runtimes = new Map<number, ActorRuntime<DeviceActor, Change, WebhookEvent>>();
  private consumer: Consumer | undefined;
  private untrack: (() => void) | undefined;
  private handOffFloor = 0;
  private handedOff = 0;
  /** The hand-off checkpoint's writes, in order, each once its batch's jobs are durable. */
  private checkpointing: Promise<void> = Promise.resolve();
  /** Set when a batch's jobs could not be made durable: the checkpoint stays before them. */
  private checkpointHeld = false;
  /** Distributed: per partition, when the last batch's save is asked for (see saveInOrder). */
  private readonly saving = new Map<number, Promise<void>>();
  /** Distributed: counts the joins; a save asked for before the last one is dropped. */
  private generation = 0;
  /** Batches' changed states not saved yet (with `resume`, or distributed: see saveInOrder), oldest
   * first. */
  private readonly unsaved: Map<string, DeviceActor>[] = [];
  /** The states actors wake from: those not yet saved first, newest first, then the store. */
  private readonly states: ActorStates<DeviceActor>;
  /** Distributed: this member holds every partition of the changes topic (see takesChanges). */
  private holdsEveryChange = false;
  /** ...and has handled everything on it since it last looked. */
  private drained = false;
  /** Batches that came through the topic (with takesChanges), and their count when changes were
   * last taken in memory: each path's actors are cleared when the other was used last. */
  private throughTopic = 0;
  private takenAfter = -1;
  /** Changes taken in memory whose durability is not known yet, and whether any were dropped
   * (see takesDropped). */
  private takesPending = 0;
  private dropped = false;

  constructor(options: ProcessorOptions) {
    this.o = options;
    const stored = options.states;
    this.states = {
      load: async (keys) => {
        const found = new Map<string, DeviceActor>();
        const rest = keys.filter((k) => {
          for (let i = this.unsaved.length - 1; i >= 0; i--) {
            const s = this.unsaved[i]!.get(k);
            if (s) {
              found.set(k, s);
              return false;
            }
          }
          return true;
        });
        for (const [k, s] of await stored.load(rest)) found.set(k, s);
        return found;
      },
      save: (states, checkpoint) => stored.save(states, checkpoint),
      checkpoint: (name) => stored.checkpoint(name),
    };
  }

  /** Where the change stream resumes at a start: after the last change whose states were saved
   * with their jobs durable (0 without `resume`: from the start). */
  async resumePosition(): Promise<number> {
    return this.o.resume ? this.o.states.checkpoint(this.o.resume.name) : 0;
  }

  async start(): Promise<void> {
    const { bus, handOffCheckpoint: cp } = this.o;
    if (cp) this.handOffFloor = this.handedOff = await cp.checkpoints.get(cp.name);
    this.untrack = this.o.metrics.track(this.runtimes);
    this.consumer = await bus.consume({
      group: 'hub-processor',
      topic: TOPICS.changes,
      partitionsConcurrently: this.o.partitionsConcurrently ?? 4,
      onAssignment: (partitions, of) => {
        this.runtimes.clear();
        if (this.o.resume || this.o.handOffCheckpoint) return;
        // Every partition is read again from its last commit, or from where this member finished
        // (its batches saved): those not yet saved are derived again, from the states saved, and
        // their pending saves dropped, lest an older state land after a newer one. So are the
        // relay's changes taken in memory and not yet saved (the relay reads them again).
        this.holdsEveryChange = of > 0 && partitions.length === of;
        this.reassigned();
      },
      handle: async (messages, info) => {
        if (messages.length > 0 && this.o.takesChanges) {
          this.drained = false;
          if (this.takenAfter === this.throughTopic) {
            // The first batch through the topic after changes taken in memory: their actors, cached
            // by another runtime, may be ahead of this partition's.
            this.runtimes.clear();
          }
          this.throughTopic++;
        }
        const timer = this.o.metrics.duration.startTimer();
        let handled: Handled | undefined;
        try {
          handled = await this.handle(messages, info.partition);
        } catch (err) {
          // Actors may have moved past changes whose outputs were not written: forget them,
          // the stored states are behind this batch and the retry derives it again.
          this.runtimes.get(info.partition)?.clear();
          throw err;
        }
        timer();
        this.o.metrics.lag.set({ partition: info.partition }, info.lag);
        return handled;
      },
    });
  }

  async stop(): Promise<void> {
    await this.consumer?.stop();
    this.consumer = undefined;
    await this.checkpointing;
    this.untrack?.();
  }

  private runtime(partition: number): ActorRuntime<DeviceActor, Change, WebhookEvent> {
    let r = this.runtimes.get(partition);
    if (!r) {
      r = new ActorRuntime({
        behaviour: {
          initial: initialActor,
          receive: (state, change) => {
            const { state: next, events } = derive(state, change);
            return { state: next, out: events };
          },
        },
        states: this.states,
        concurrency: this.o.concurrency ?? 64,
        maxActors: this.o.maxActors,
      });
      this.runtimes.set(partition, r);
    }
    return r;
  }

  private handle(messages: InMessage[], partition: number): Promise<Handled | undefined> {
    let last = 0; // the position of the batch's last change, whatever its stream
    const batch = messages.flatMap((m) => {
      const version = Number(/\.v(\d+)$/.exec(m.headers[SCHEMA_HEADER] ?? '')?.[1] ?? 1);
      const r = this.o.registry.decode(CHANGE_SCHEMA, version, m.value) as {
        id: string;
        type: string;
        stream: string;
        position: number;
        created: number;
        data: string;
      };
      last = Math.max(last, Number(r.position));
      if (!concernsActors(r.stream)) return [];
      // A stored event, as the relay put it on the stream: its data is of its type's schema.
      const change = {
        id: r.id,
        type: r.type,
        stream: r.stream,
        position: Number(r.position),
        created: Number(r.created),
        data: JSON.parse(r.data),
      } as Change;
      return [{ key: m.key, message: change }];
    });
    return this.process(batch, last, partition);
  }

  /**
   * Distributed: whether the relay of this process may hand its changes here in memory
   * (`take`) rather than through the changes topic. Only while this member of the group holds
   * every partition of the topic and has handled everything on it (so a change handed here
   * overtakes none still there): asked once after each join, or after a batch came through the
   * topic, while the relay holds back (it has stopped sending), for up to `waitMs`.
   */
  async takesChanges(waitMs = 2000): Promise<boolean> {
    if (!this.o.takesChanges) return false;
    const deadline = Date.now() + waitMs;
    while (this.holdsEveryChange && !this.drained) {
      const generation = this.generation;
      const through = this.throughTopic;
      if ((await this.consumer?.caughtUp().catch(() => false)) && generation === this.generation) {
        // Unless a batch came through the topic meanwhile (another process's relay).
        if (through === this.throughTopic) this.drained = true;
        break;
      }
      if (Date.now() >= deadline) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    if (this.holdsEveryChange && this.drained) return true;
    // Through the topic then, but only once the changes taken here are saved or dropped: a change
    // of the topic, derived from their states, would otherwise be saved before them.
    while (this.takesPending > 0 && !this.dropped) await new Promise((r) => setTimeout(r, 5));
    return false;
  }

  /**
   * The relay's changes, in store order, handed in memory (see takesChanges): one batch of all
   * partitions, whose states are saved once its jobs are durable, in order (saveInOrder). The
   * relay moves its checkpoint only once `durable` resolves; should anything fail, or the group's
   * partitions move meanwhile, it rejects, and the relay reads the changes again from there.
   */
  async take(events: readonly Change[]): Promise<Handled> {
    if (this.takesDropped) throw new Error('changes taken before were dropped: read them again first');
    if (!this.o.takesChanges || !this.holdsEveryChange || !this.drained)
      throw new Error("the changes are no longer all this processor's");
    if (this.throughTopic > this.takenAfter) {
      // Actors cached from batches of the topic may be behind those of these changes: from here.
      this.runtimes.clear();
      this.takenAfter = this.throughTopic;
    }
    let last = 0;
    const batch: { key: string; message: Change }[] = [];
    for (const e of events) {
      last = Math.max(last, e.position);
      if (concernsActors(e.stream)) batch.push({ key: aggregateKey(e.stream), message: e });
    }
    const generation = this.generation;
    this.takesPending++;
    try {
      const handled = (await this.process(batch, last, IN_MEMORY)) ?? { durable: Promise.resolve() };
      // Not made durable (jobs not stored, states not saved): as after a join, from the states
      // saved, and the batches taken after it read again too (the chain of saves is broken).
      handled.durable.then(
        () => this.takesPending--,
        () => {
          if (generation === this.generation) this.reassigned();
          this.takesPending--;
        },
      );
      return handled;
    } catch (err) {
      if (generation === this.generation) this.reassigned();
      this.takesPending--;
      throw err;
    }
  }

  /**
   * Changes taken in memory were dropped (a join, or a batch not made durable) before they were
   * saved: the relay reads them again, from its last durable batch, before it sends anything on,
   * by either path; a later change sent first would overtake them (and be applied first, the
   * older then skipped as applied). Cleared by `rereading`, as the relay starts reading again.
   */
  get takesDropped(): boolean {
    return this.dropped;
  }

  rereading(): void {
    this.dropped = false;
  }

  /** The partitions may have moved: states not saved are derived again, from those saved. */
  private reassigned(): void {
    this.generation++;
    this.drained = false;
    if (this.takesPending > 0) this.dropped = true;
    this.saving.clear();
    this.unsaved.length = 0;
    this.runtimes.clear();
  }

  private async process(
    batch: { key: string; message: Change }[],
    last: number,
    partition: number,
  ): Promise<Handled | undefined> {
    const { metrics } = this.o;
    // Derived from the states of this generation: saved only in it (see saveInOrder).
    const generation = this.generation;
    const { out: events, changed } = await this.runtime(partition).run(batch);
    // The log and the jobs are two outputs of the batch, neither read to make the other: written at
    // once, each a round trip of its own in the distributed profile (PostgreSQL, Kafka).
    const handing = this.jobsFor(events.filter((e) => e.source_position > this.handOffFloor)).then(
      async (jobs) => ({ jobs, handed: await this.o.handOff(jobs) }),
    );
    const logged = this.o.log.append(events);
    const { resume } = this.o;
    const cp = this.o.handOffCheckpoint;
    // Distributed, the next batch need not wait for the log either: the batch is durable once its
    // log is written too (its states are saved after both), and the log's appends of a steady rate
    // then gather in fewer statements (HUB_POSTGRES_LOG_LINGER_MS).
    const logOffTheWay = !resume && !cp;
    if (logOffTheWay) logged.catch(() => {}); // its failure fails the batch's durable instead
    const [{ jobs, handed }] = logOffTheWay ? [await handing] : await Promise.all([handing, logged]);
    metrics.jobs.inc(jobs.length);
    // Saved last: a crash before this derives the batch again, into the same ids. The next batch
    // need not wait for it (its actors' states are in memory, and a load of one evicted since
    // follows this save on the same connection): the batch's offsets are committed only once it
    // is done, and should it fail the partition is read again from before the batch.
    let saved: Promise<void> | undefined;
    if (resume) this.unsaved.push(changed);
    else if (cp) saved = this.o.states.save(changed);
    else
      saved = this.saveInOrder(
        partition,
        changed,
        generation,
        Promise.all([handed?.durable, logged]).then(() => {}),
      );
    for (const e of events) metrics.derived.inc({ type: e.type });
    metrics.changes.inc(batch.length);
    const moves = cp !== undefined && last > this.handedOff;
    if (moves) this.handedOff = last;
    if (moves || resume) {
      // Moved once this batch's jobs are durable, without holding up the next batch: a crash
      // before it hands them off again (delivery is at least once).
      const durable = handed?.durable;
      this.checkpointing = this.checkpointing.then(async () => {
        if (this.checkpointHeld) return;
        // From a batch that failed on, nothing moves: a start resumes before it.
        const hold = (err: unknown, what: string) => {
          this.checkpointHeld = true;
          this.o.logger.error({ err: (err as Error).message }, `processor: ${what}`);
        };
        try {
          await durable;
        } catch (err) {
          hold(err, 'delivery jobs not stored; the hand-off checkpoint stays before them until a restart');
          return;
        }
        if (resume) {
          try {
            await this.o.states.save(changed, { name: resume.name, position: last });
          } catch (err) {
            hold(err, 'actor states not saved; the change stream resumes before them at the next start');
            return;
          }
          this.unsaved.splice(this.unsaved.indexOf(changed), 1);
        }
        if (!moves) return;
        await cp.checkpoints.set(cp.name, last).catch((err: Error) => {
          this.o.logger.warn(
            { err: err.message },
            'processor: hand-off checkpoint not written; the next one is',
          );
        });
      });
    }
    return saved && { durable: saved };
  }

  /**
   * Distributed: a batch's states saved once its jobs are durable (at once for the topic's, which
   * are durable when sent; once finished or stored for those the dispatcher of this process took),
   * its offsets committed after (a crash before derives the batch again), in order per partition
   * whatever path each batch's jobs took, as a later batch's states are derived from this one's:
   * actors woken meanwhile read them from `unsaved`. A batch whose jobs or states fail fails every
   * later one of its partition, which is then read again from its last commit (the bus). After a
   * join, the batches not yet saved are read again: their saves are dropped (see onAssignment).
   */
  private saveInOrder(
    partition: number,
    changed: Map<string, DeviceActor>,
    generation: number,
    durable?: Promise<void>,
  ): Promise<void> {
    // Derived before a join, maybe from states dropped at it: neither kept nor saved.
    if (generation !== this.generation) return Promise.reject(new Error('the partition was assigned again'));
    this.unsaved.push(changed);
    let saving: Promise<void> = Promise.resolve();
    // Asked for once the last batch's save was asked for: one connection keeps them in order, so the
    // next need not wait for this one's answer.
    const asked = (this.saving.get(partition) ?? Promise.resolve())
      .then(() => durable)
      .then(() => {
        // Read again since: derived again, saved by that batch (the bus ignores this failure).
        if (generation !== this.generation) throw new Error('the partition was assigned again');
        saving = this.o.states.save(changed);
      });
    const saved = asked.then(() => saving);
    const forget = () => {
      const at = this.unsaved.indexOf(changed);
      if (at >= 0) this.unsaved.splice(at, 1);
    };
    saved.then(forget, forget);
    this.saving.set(partition, asked);
    return saved;
  }

  private async jobsFor(events: WebhookEvent[]): Promise<Job[]> {
    const byOwner = new Map<string, Promise<SubscriptionFilter[]>>();
    const jobs: Job[] = [];
    const now = Date.now();
    for (const e of events) {
      let subs = byOwner.get(e.owner);
      if (!subs) {
        subs = this.o.subscriptions.of(e.owner);
        byOwner.set(e.owner, subs);
      }
      for (const sub of await subs) {
        if (!matches(sub, e)) continue;
        jobs.push({
          job_id: jobId(e.id, sub.id, e.created_ms),
          subscription_id: sub.id,
          owner: e.owner,
          kind: 'event',
          event: e,
          attempt: 0,
          enqueued: now,
        });
      }
    }
    return jobs;
  }
}
