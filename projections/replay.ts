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
  onProgress?: (p: ReplayProgress) => void;
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

export async function replayProjection(o: ReplayOptions): Promise<ReplayResult> {
  const { readStore, projection } = o;
  const lockName = `replay:${projection.name}`;
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
      const generation = await readStore.activeGeneration(p.name);
      const cp = await readStore.checkpoint(p.name, generation);
      const lagEvents = Math.max(0, head - cp.position);
      const status: ProjectionStatus = {
        name: p.name,
        version: p.version,
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

/** One line of progress: bar, percentage, counts, rate and ETA. */
export function progressLine(p: ReplayProgress, width = 30): string {
  const fraction = p.head === 0 ? 1 : Math.min(1, p.checkpoint / p.head);
  const filled = Math.round(fraction * width);
  const eta = Number.isFinite(p.etaSeconds) ? `${Math.ceil(p.etaSeconds)} s` : '?';
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(fraction * 100).toFixed(1)}% ${p.checkpoint.toLocaleString('en-US')}/${p.head.toLocaleString('en-US')} ${Math.round(p.eventsPerSecond).toLocaleString('en-US')} events/s ETA ${eta}`;
}
