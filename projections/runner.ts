// Keeps one projection's read model current: reads events from its checkpoint, maps each batch
// through the projection (a pure function), and applies the writes with the new checkpoint in
// one atomic step. Catch-up reads pages and applies them pipelined; once caught up it follows
// the live subscription. It survives the event store or the read store going away: it backs off
// and resumes from the checkpoint that was stored.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { EventStore, RecordedEvent, SubscribeOptions } from '../infra/eventstore/port.ts';
import type { ApplyOutcome, ReadStore, Write } from '../infra/readstore/port.ts';
import type { Logger } from '../infra/telemetry.ts';

export interface Projection {
  /** Names the read model (and its keyspace). */
  name: string;
  /** Version of the mapping; change it with the mapping, then replay. */
  version: number;
  description: string;
  /** Pure: the read-model writes for one event (none for events it does not care about). */
  project(event: RecordedEvent): Write[];
}

/** `batchSize` (default 500) also bounds the catch-up's pages; `lingerMs`: see SubscribeOptions
 * (HUB_PROJECTOR_LINGER_MS). */
export interface RunnerOptions extends SubscribeOptions {
  store: EventStore;
  readStore: ReadStore;
  projection: Projection;
  logger: Logger;
  metrics?: ProjectionMetrics;
  /** A fixed generation (a replay's target). Without it the runner follows the active generation. */
  generation?: number;
  /** Called after every applied batch. */
  onBatch?: (checkpoint: number, events: number) => void;
}

/**
 * A batch's writes with those to one key merged where the order allows, so a store applies what the
 * batch changed rather than every step: patches of one document become one patch (later fields
 * win), increments of one field one increment, scores of one index member the last score. Writes
 * of another kind to the same key end the merging there, so nothing moves past a write it would
 * change places with. Pure: the result applied in order leaves what the writes applied in order do.
 */
export function coalesceWrites(writes: Write[]): Write[] {
  const out: Write[] = [];
  /** Per key, the mergeable writes still open: one patch, or increments by field, or scores by member. */
  const open = new Map<string, { op: Write['op']; at: Map<string, number> }>();
  for (const w of writes) {
    const merging = open.get(w.key);
    if (merging && merging.op !== w.op) open.delete(w.key);
    if (w.op !== 'patch' && w.op !== 'incr' && w.op !== 'zadd') {
      open.delete(w.key);
      out.push(w);
      continue;
    }
    let entry = open.get(w.key);
    if (!entry) {
      entry = { op: w.op, at: new Map() };
      open.set(w.key, entry);
    }
    const slot = w.op === 'patch' ? '' : w.op === 'incr' ? w.field : w.member;
    const at = entry.at.get(slot);
    const earlier = at === undefined ? undefined : out[at];
    if (earlier?.op === 'patch' && w.op === 'patch')
      out[at!] = { ...earlier, doc: { ...earlier.doc, ...w.doc } };
    else if (earlier?.op === 'incr' && w.op === 'incr') out[at!] = { ...earlier, by: earlier.by + w.by };
    else if (earlier?.op === 'zadd' && w.op === 'zadd') out[at!] = { ...earlier, score: w.score };
    else {
      entry.at.set(slot, out.length);
      out.push(w);
    }
  }
  return out;
}

/** A catch-up this many events long reports its progress in the log. */
const LONG_BACKLOG = 10_000;
const PROGRESS_EVERY_MS = 5000;
const percent = (done: number, of: number) => `${of > 0 ? ((100 * done) / of).toFixed(1) : '100.0'} %`;

class Moved extends Error {}
class Switched extends Error {}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      'abort',
      () => {
        clearTimeout(t);
        resolve();
      },
      { once: true },
    );
  });

export class ProjectionRunner {
  readonly name: string;
  private readonly o: RunnerOptions;
  private readonly batchSize: number;
  private readonly controller = new AbortController();
  private running: Promise<void> | undefined;
  private generation = 0;
  private checkpoint = 0;
  private lastCreated = 0;
  private head = 0;
  private caughtUpOnce = false;
  private readonly caughtUpWaiters: (() => void)[] = [];

  constructor(options: RunnerOptions) {
    this.o = options;
    this.name = options.projection.name;
    this.batchSize = options.batchSize ?? 500;
    options.metrics?.track(this);
  }

  /** Runs until stop(): catch up, follow, and on failure back off and resume. */
  start(): void {
    this.running ??= this.loop();
  }

  async stop(): Promise<void> {
    this.controller.abort();
    await this.running;
  }

  get hasCaughtUp(): boolean {
    return this.caughtUpOnce;
  }

  /** Resolves once the runner has caught up with the log for the first time. */
  caughtUp(): Promise<void> {
    if (this.caughtUpOnce) return Promise.resolve();
    return new Promise((resolve) => this.caughtUpWaiters.push(resolve));
  }

  status(): { generation: number; checkpoint: number; head: number; lagEvents: number; lagSeconds: number } {
    const lagEvents = Math.max(0, this.head - this.checkpoint);
    const lagSeconds =
      lagEvents === 0 || this.lastCreated === 0 ? 0 : Math.max(0, (Date.now() - this.lastCreated) / 1000);
    return {
      generation: this.generation,
      checkpoint: this.checkpoint,
      head: this.head,
      lagEvents,
      lagSeconds,
    };
  }

  /** Catches up once, without following: applies pages until one comes back short. */
  async catchUpOnce(signal?: AbortSignal): Promise<'caught-up' | 'interrupted'> {
    const generation = await this.resolveGeneration();
    const cp = await this.o.readStore.checkpoint(this.name, generation);
    this.checkpoint = cp.position;
    this.lastCreated = cp.created;
    this.head = await this.o.store.head();
    await this.catchUp(generation, signal ?? this.controller.signal);
    return (signal ?? this.controller.signal).aborted ? 'interrupted' : 'caught-up';
  }

  private async resolveGeneration(): Promise<number> {
    this.generation = this.o.generation ?? (await this.o.readStore.activeGeneration(this.name, true));
    return this.generation;
  }

  private async loop(): Promise<void> {
    const signal = this.controller.signal;
    const headTimer = setInterval(() => {
      this.o.store.head().then(
        (h) => {
          this.head = h;
        },
        () => {},
      );
    }, 1000);
    headTimer.unref();
    let backoffMs = 100;
    while (!signal.aborted) {
      try {
        const generation = await this.resolveGeneration();
        const cp = await this.o.readStore.checkpoint(this.name, generation);
        this.checkpoint = cp.position;
        this.lastCreated = cp.created;
        this.head = await this.o.store.head();
        await this.catchUp(generation, signal);
        this.markCaughtUp();
        backoffMs = 100;
        await this.follow(generation, signal);
      } catch (err) {
        if (signal.aborted) break;
        if (err instanceof Switched) {
          this.o.logger.info(
            { projection: this.name },
            'projection generation switched; following the new one',
          );
          continue;
        }
        if (err instanceof Moved) {
          this.o.logger.warn(
            { projection: this.name },
            'projection checkpoint moved under this runner; resuming from it',
          );
        } else {
          this.o.metrics?.errors.inc({ projection: this.name });
          this.o.logger.warn(
            { projection: this.name, err: (err as Error).message },
            'projection runner failed; retrying',
          );
        }
        await sleep(backoffMs, signal);
        backoffMs = Math.min(backoffMs * 2, 5000);
      }
    }
    clearInterval(headTimer);
  }

  private markCaughtUp(): void {
    if (this.caughtUpOnce) return;
    this.caughtUpOnce = true;
    for (const w of this.caughtUpWaiters.splice(0)) w();
  }

  /** Pages from the checkpoint; reading the next page overlaps applying this one. A long backlog
   * (a read model built for the first time: a new projection, an upgrade, a replay) says how far
   * it is, every few seconds, and when it is done. */
  private async catchUp(generation: number, signal: AbortSignal): Promise<void> {
    const from = this.checkpoint;
    const started = performance.now();
    const long = this.head - from >= LONG_BACKLOG;
    let said = started;
    if (long)
      this.o.logger.info(
        { projection: this.name, generation, from, head: this.head },
        `projection ${this.name}: building from position ${from} to ${this.head}`,
      );
    let page = await this.o.store.readAll(this.checkpoint, this.batchSize);
    while (page.length > 0 && !signal.aborted) {
      if (long && performance.now() - said >= PROGRESS_EVERY_MS) {
        said = performance.now();
        const done = this.checkpoint - from;
        this.o.logger.info(
          {
            projection: this.name,
            checkpoint: this.checkpoint,
            head: this.head,
            eventsPerSecond: Math.round(done / ((said - started) / 1000)),
          },
          `projection ${this.name}: ${percent(done, this.head - from)} built`,
        );
      }
      const applying = this.applyBatch(generation, page);
      const full = page.length === this.batchSize;
      const next = full
        ? this.o.store.readAll(page[page.length - 1]!.position, this.batchSize)
        : Promise.resolve([]);
      const [, nextPage] = await Promise.all([applying, next]);
      page = nextPage;
      if (!full) break;
      // The store's reads and the applies may all resolve at once (SQLite): without a turn given
      // back, a backlog of millions kept the process from serving anything (not even /readyz)
      // until it was built.
      await nextTurn();
    }
    if (long && !signal.aborted)
      this.o.logger.info(
        {
          projection: this.name,
          events: this.checkpoint - from,
          seconds: Number(((performance.now() - started) / 1000).toFixed(1)),
        },
        `projection ${this.name}: built, caught up at position ${this.checkpoint}`,
      );
  }

  /** Live: the subscription's batches of what has arrived. */
  private async follow(generation: number, signal: AbortSignal): Promise<void> {
    if (signal.aborted) return; // an abort listener added now would never fire
    const subscription = this.o.store.subscribe(this.checkpoint, {
      batchSize: this.batchSize,
      lingerMs: this.o.lingerMs,
    });
    const stop = () => subscription.close();
    signal.addEventListener('abort', stop, { once: true });
    try {
      for await (const batch of subscription) {
        if (signal.aborted) break;
        await this.applyBatch(generation, batch);
      }
    } finally {
      signal.removeEventListener('abort', stop);
      subscription.close();
    }
  }

  private async applyBatch(generation: number, events: RecordedEvent[]): Promise<void> {
    const started = performance.now();
    const writes = coalesceWrites(events.flatMap((e) => this.o.projection.project(e)));
    const last = events[events.length - 1]!;
    const from = this.checkpoint;
    // The next batch may be read meanwhile, but it applies only after this one is stored.
    this.checkpoint = last.position;
    let outcome: ApplyOutcome;
    try {
      outcome = await this.o.readStore.apply(
        this.name,
        generation,
        writes,
        from,
        { position: last.position, created: last.created },
        this.o.generation === undefined,
      );
    } catch (err) {
      this.checkpoint = from;
      throw err;
    }
    if (outcome === 'moved') throw new Moved();
    if (outcome === 'inactive') throw new Switched();
    this.lastCreated = last.created;
    if (last.position > this.head) this.head = last.position;
    this.o.metrics?.applied.inc({ projection: this.name }, events.length);
    this.o.metrics?.batchDuration.observe({ projection: this.name }, (performance.now() - started) / 1000);
    this.o.onBatch?.(last.position, events.length);
  }
}

/** Prometheus metrics of every runner in the process. */
export class ProjectionMetrics {
  readonly applied: Counter<'projection'>;
  readonly errors: Counter<'projection'>;
  readonly batchDuration: Histogram<'projection'>;
  private readonly runners = new Set<ProjectionRunner>();

  constructor(registry: Registry) {
    const runners = this.runners;
    this.applied = new Counter({
      name: 'hub_projection_events_applied_total',
      help: 'Events applied to read models, by projection.',
      labelNames: ['projection'],
      registers: [registry],
    });
    this.errors = new Counter({
      name: 'hub_projection_errors_total',
      help: 'Projection runner failures (each followed by a retry), by projection.',
      labelNames: ['projection'],
      registers: [registry],
    });
    this.batchDuration = new Histogram({
      name: 'hub_projection_batch_duration_seconds',
      help: 'Time to project and apply one batch, by projection.',
      labelNames: ['projection'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1],
      registers: [registry],
    });
    const gauge = (name: string, help: string, pick: (s: ReturnType<ProjectionRunner['status']>) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ['projection'],
        registers: [registry],
        collect() {
          for (const r of runners) this.set({ projection: r.name }, pick(r.status()));
        },
      });
    gauge(
      'hub_projection_checkpoint_position',
      'Global position of the last event applied, by projection.',
      (s) => s.checkpoint,
    );
    gauge(
      'hub_projection_lag_events',
      'Events stored but not yet applied, by projection.',
      (s) => s.lagEvents,
    );
    gauge(
      'hub_projection_lag_seconds',
      'Age of the last applied event while events wait to be applied (0 when caught up), by projection.',
      (s) => s.lagSeconds,
    );
  }

  track(runner: ProjectionRunner): void {
    this.runners.add(runner);
    // Exposed at 0 from the start: rate() and the alerts see a series before the first failure.
    this.errors.inc({ projection: runner.name }, 0);
  }
}
