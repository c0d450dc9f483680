// Read-your-writes: a read waits, bounded, until the projections it reads have applied the
// position it needs (the caller's last write, or one asked for). Past the bound it fails with
// ProjectionLagError (503), never stale data.
import type { ReadStore } from '../infra/readstore/port.ts';

export class ProjectionLagError extends Error {
  readonly projection: string;
  readonly wanted: number;
  readonly reached: number;
  constructor(projection: string, wanted: number, reached: number, waitedMs: number) {
    super(
      `The ${projection} read model has not reached the position this read needs (${wanted}: your last write, or the one asked for) within ${waitedMs} ms (it is at ${reached}); retry shortly.`,
    );
    this.name = 'ProjectionLagError';
    this.projection = projection;
    this.wanted = wanted;
    this.reached = reached;
  }
}

/** Resolves once every named projection's active generation has applied `position`. */
export async function waitForPosition(
  readStore: ReadStore,
  projections: string[],
  position: number,
  timeoutMs: number,
): Promise<void> {
  if (position <= 0) return;
  const deadline = Date.now() + timeoutMs;
  for (const projection of projections) {
    let reached = 0;
    while (true) {
      const generation = await readStore.activeGeneration(projection);
      reached = (await readStore.checkpoint(projection, generation)).position;
      if (reached >= position) break;
      const left = deadline - Date.now();
      if (left <= 0) throw new ProjectionLagError(projection, position, reached, timeoutMs);
      // Woken by the next applied batch, or re-checked every 50 ms in case a notice was missed.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, Math.min(50, left));
        const off = readStore.onCheckpoint((p, _g, at) => {
          if (p === projection && at >= position) done();
        });
        function done() {
          clearTimeout(timer);
          off();
          resolve();
        }
      });
    }
  }
}
