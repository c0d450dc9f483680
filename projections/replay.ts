// Replays a projection from position 0 into a new generation while the active one keeps
// answering reads, then switches reads over atomically and drops the old keyspace. One replay
// per projection at a time (a lease in the read store); an interrupted replay resumes where it
// stopped, because its target generation and checkpoint are kept.
import type { EventStore } from '../infra/eventstore/port.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import type { Logger } from '../infra/telemetry.ts';
import { type Projection, ProjectionRunner } from './runner.ts';

export class ReplayRunningError extends Error {
  constructor(projection: string) {
    super(`a replay of ${projection} is already running; wait for it or stop it first`);
    this.name = 'ReplayRunningError';
  }
}

export interface ReplayProgress {
  generation: number;
  checkpoint: number;
  head: number;
  /** Events applied by this run so far. */
  applied: number;
  eventsPerSecond: number;
  etaSeconds: number;
}

export interface ReplayOptions {
  store: EventStore;
  readStore: ReadStore;
  projection: Projection;
  logger: Logger;
  owner: string;
  signal?: AbortSignal;
  /** How long the old generation stays after the switch, for readers that still resolve it. */
  dropGraceMs?: number;
  batchSize?: number;
  /** Called once the lease is held and the target generation chosen, before any event is read. */
  onStart?: (generation: number, checkpoint: number, head: number) => void;
  onProgress?: (p: ReplayProgress) => void;
  /** Called when reads have moved to the new generation (the old one is dropped after the grace). */
  onSwitch?: () => void;
}

export interface ReplayResult {
  outcome: 'switched' | 'interrupted';
  generation: number;
  previous: number;
  checkpoint: number;
  applied: number;
  droppedKeys: number;
  seconds: number;
}

const LEASE_MS = 15_000;

/** The lease a replay of `projection` holds while it runs. */
const replayLease = (projection: string) => `replay:${projection}`;

export async function replayProjection(o: ReplayOptions): Promise<ReplayResult> {
  const { readStore, projection } = o;
  const lockName = replayLease(projection.name);
  if (!(await readStore.lock(lockName, o.owner, LEASE_MS))) throw new ReplayRunningError(projection.name);
  const renew = setInterval(
    () => void readStore.lock(lockName, o.owner, LEASE_MS).catch(() => {}),
    LEASE_MS / 3,
  );
  renew.unref();
  const started = performance.now();
  try {
    const previous = await readStore.activeGeneration(projection.name);
    let generation = await readStore.replayTarget(projection.name);
    if (generation === undefined || generation <= previous) {
      generation = previous + 1;
      await readStore.drop(projection.name, generation); // leftovers of an abandoned attempt
      await readStore.setReplayTarget(projection.name, generation);
      o.logger.info({ projection: projection.name, generation }, 'replay started');
    } else {
      o.logger.info({ projection: projection.name, generation }, 'replay resumed');
    }
    let head = await o.store.head();
    if (o.onStart)
      o.onStart(generation, (await readStore.checkpoint(projection.name, generation)).position, head);
    let applied = 0;
    let lastHeadRead = performance.now();
    const runner = new ProjectionRunner({
      store: o.store,
      readStore,
      projection,
      logger: o.logger,
      generation,
      batchSize: o.batchSize ?? 1000,
      onBatch: (checkpoint, events) => {
        applied += events;
        if (performance.now() - lastHeadRead > 2000) {
          lastHeadRead = performance.now();
          void o.store.head().then((h) => {
            head = h;
          });
        }
        head = Math.max(head, checkpoint);
        const rate = applied / ((performance.now() - started) / 1000);
        o.onProgress?.({
          generation: generation!,
          checkpoint,
          head,
          applied,
          eventsPerSecond: rate,
          etaSeconds: rate > 0 ? (head - checkpoint) / rate : Number.POSITIVE_INFINITY,
        });
      },
    });
    const outcome = await runner.catchUpOnce(o.signal);
    const checkpoint = (await readStore.checkpoint(projection.name, generation)).position;
    if (outcome === 'interrupted') {
      o.logger.info(
        { projection: projection.name, generation, checkpoint },
        'replay interrupted; run it again to resume',
      );
      return {
        outcome,
        generation,
        previous,
        checkpoint,
        applied,
        droppedKeys: 0,
        seconds: (performance.now() - started) / 1000,
      };
    }
    // Reads move to the new generation at once; the live runner follows it from its checkpoint.
    await readStore.activate(projection.name, generation);
    await readStore.setReplayTarget(projection.name, undefined);
    o.onSwitch?.();
    await new Promise((r) => setTimeout(r, o.dropGraceMs ?? 5000));
    const droppedKeys = await readStore.drop(projection.name, previous);
    o.logger.info(
      { projection: projection.name, generation, previous, droppedKeys },
      'replay switched reads',
    );
    return {
      outcome: 'switched',
      generation,
      previous,
      checkpoint,
      applied,
      droppedKeys,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    clearInterval(renew);
    await readStore.unlock(lockName, o.owner).catch(() => {});
  }
}

export interface ProjectionStatus {
  name: string;
  version: number;
  description: string;
  generation: number;
  checkpoint: number;
  head: number;
  lagEvents: number;
  lagSeconds: number;
  replay?: { generation: number; checkpoint: number };
}

/** What `hub projections status` shows: read from the stores, so it works from any process. */
export async function projectionStatus(
  store: EventStore,
  readStore: ReadStore,
  list: Projection[],
): Promise<ProjectionStatus[]> {
  const head = await store.head();
  return Promise.all(
    list.map(async (p) => {
      const generation = await readStore.activeGeneration(p.name, true);
      const cp = await readStore.checkpoint(p.name, generation);
      const lagEvents = Math.max(0, head - cp.position);
      const status: ProjectionStatus = {
        name: p.name,
        version: p.version,
        description: p.description,
        generation,
        checkpoint: cp.position,
        head,
        lagEvents,
        lagSeconds: lagEvents === 0 || cp.created === 0 ? 0 : Math.max(0, (Date.now() - cp.created) / 1000),
      };
      const target = await readStore.replayTarget(p.name);
      if (target !== undefined) {
        status.replay = {
          generation: target,
          checkpoint: (await readStore.checkpoint(p.name, target)).position,
        };
      }
      return status;
    }),
  );
}

/** How far a replay is, 0 to 1: its checkpoint against the head of the log. */
export function replayFraction(checkpoint: number, head: number): number {
  return head === 0 ? 1 : Math.min(1, checkpoint / head);
}

/** One line of progress: bar, percentage, counts, rate and ETA. */
export function progressLine(p: ReplayProgress, width = 30): string {
  const fraction = replayFraction(p.checkpoint, p.head);
  const filled = Math.round(fraction * width);
  const eta = Number.isFinite(p.etaSeconds) ? `${Math.ceil(p.etaSeconds)} s` : '?';
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(fraction * 100).toFixed(1)}% ${p.checkpoint.toLocaleString('en-US')}/${p.head.toLocaleString('en-US')} ${Math.round(p.eventsPerSecond).toLocaleString('en-US')} events/s ETA ${eta}`;
}

export type ReplayStatus = 'running' | 'switched' | 'done' | 'interrupted' | 'failed';

/** A replay as operators follow it: the one this process runs or ran last, or one the stores show
 * (running in another process, or interrupted and waiting to be resumed). */
export interface ReplayView {
  /** The generation being built. */
  generation: number;
  /** Its checkpoint: the position reached. */
  position: number;
  head: number;
  percent: number;
  status: ReplayStatus;
  /** Known to the process that runs it (ms since the epoch); absent elsewhere. */
  started?: number;
  finished?: number;
  eventsPerSecond?: number;
  error?: string;
}

export type ProjectionView = Omit<ProjectionStatus, 'replay'> & { replay: ReplayView | undefined };

/** What the operators' API asks of the process that serves it (the main thread's, from API threads). */
export interface ProjectionOperations {
  list(): Promise<ProjectionView[]>;
  /** Undefined: no projection of that name. */
  one(name: string): Promise<ProjectionView | undefined>;
  /** Starts a replay in the background and answers once it holds the lease (ReplayRunningError when
   * another holds it; undefined: no projection of that name). */
  replay(name: string): Promise<ProjectionView | undefined>;
}

interface Run extends ReplayView {
  controller: AbortController;
  done: Promise<void>;
}

const percentOf = (position: number, head: number) => Math.round(replayFraction(position, head) * 1000) / 10;

/**
 * Replays started from the API, run in this process in the background by replayProjection (what
 * `hub projections replay` runs): the lease fences a second one in any process, the old generation
 * answers reads until the switch. The status comes from projectionStatus (what `hub projections
 * status` shows), with the progress of the runs this process knows.
 */
export class ProjectionReplays implements ProjectionOperations {
  private readonly runs = new Map<string, Run>();
  private readonly o: {
    store: EventStore;
    readStore: ReadStore;
    logger: Logger;
    projections: Projection[];
    owner: () => string;
    dropGraceMs: number;
  };

  constructor(o: ProjectionReplays['o']) {
    this.o = o;
  }

  async list(): Promise<ProjectionView[]> {
    const rows = await projectionStatus(this.o.store, this.o.readStore, this.o.projections);
    return Promise.all(rows.map((row) => this.view(row)));
  }

  async one(name: string): Promise<ProjectionView | undefined> {
    const projection = this.o.projections.find((p) => p.name === name);
    if (!projection) return undefined;
    const [row] = await projectionStatus(this.o.store, this.o.readStore, [projection]);
    return this.view(row!);
  }

  async replay(name: string): Promise<ProjectionView | undefined> {
    const projection = this.o.projections.find((p) => p.name === name);
    if (!projection) return undefined;
    const started = Promise.withResolvers<void>();
    const controller = new AbortController();
    let run: Run | undefined;
    const done = replayProjection({
      store: this.o.store,
      readStore: this.o.readStore,
      projection,
      logger: this.o.logger,
      owner: this.o.owner(),
      signal: controller.signal,
      dropGraceMs: this.o.dropGraceMs,
      onStart: (generation, checkpoint, head) => {
        run = {
          generation,
          position: checkpoint,
          head,
          percent: percentOf(checkpoint, head),
          status: 'running',
          started: Date.now(),
          controller,
          done: settled,
        };
        this.runs.set(name, run);
        started.resolve();
      },
      onProgress: (p) => {
        Object.assign(run!, {
          position: p.checkpoint,
          head: p.head,
          percent: percentOf(p.checkpoint, p.head),
          eventsPerSecond: Math.round(p.eventsPerSecond),
        });
      },
      onSwitch: () => {
        run!.status = 'switched';
      },
    });
    const settled = done.then(
      (result) => {
        Object.assign(run!, {
          status: result.outcome === 'switched' ? 'done' : 'interrupted',
          position: result.checkpoint,
          head: Math.max(run!.head, result.checkpoint),
          percent: percentOf(result.checkpoint, Math.max(run!.head, result.checkpoint)),
          finished: Date.now(),
        });
      },
      (err: unknown) => {
        started.reject(err); // refused before it started (ReplayRunningError), or failed to start
        if (!run) return;
        this.o.logger.error({ err, projection: name }, 'replay failed; asking again resumes it');
        Object.assign(run, {
          status: 'failed',
          error: 'the replay failed; the log has the reason',
          finished: Date.now(),
        });
      },
    );
    await started.promise;
    return this.one(name);
  }

  /** Interrupts the replays running here (each resumes at the next one asked for) and waits for them. */
  async stop(): Promise<void> {
    const running = [...this.runs.values()].filter((r) => r.status === 'running' || r.status === 'switched');
    for (const r of running) r.controller.abort();
    await Promise.all(running.map((r) => r.done));
  }

  private async view(row: ProjectionStatus): Promise<ProjectionView> {
    const { replay: stored, ...status } = row;
    const run = this.runs.get(row.name);
    const mine = run && viewOf(run);
    if (!stored || mine?.status === 'running' || mine?.status === 'switched')
      return { ...status, replay: mine };
    // An unfinished replay the stores show: another process's (it holds the lease), or one that
    // stopped (interrupted, failed) and resumes at the next one asked for.
    const ours = mine?.generation === stored.generation ? mine : undefined;
    const elsewhere = await this.o.readStore.lockHolder(replayLease(row.name));
    return {
      ...status,
      replay: {
        ...ours,
        generation: stored.generation,
        position: stored.checkpoint,
        head: row.head,
        percent: percentOf(stored.checkpoint, row.head),
        status: elsewhere ? 'running' : (ours?.status ?? 'interrupted'),
      },
    };
  }
}

function viewOf(run: Run): ReplayView {
  const { controller: _controller, done: _done, ...view } = run;
  return view;
}
