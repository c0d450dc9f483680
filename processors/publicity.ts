// The pipeline half of the device callback: whenever a device's public flag or garbage mark
// changes, its steps follow (the same code the operator callback runs on demand).
import { carryPublicity } from '../api/devices/publicity.ts';
import type { CheckpointStore } from '../infra/checkpoints.ts';
import type { EventStore, SubscribeOptions } from '../infra/eventstore/port.ts';
import type { Logger } from '../infra/telemetry.ts';
import { EventFollower } from './follower.ts';

export function publicityProcessor(o: {
  store: EventStore;
  checkpoints: CheckpointStore;
  logger: Logger;
  /** How it follows the store (batch size, linger). */
  follow?: SubscribeOptions;
}): EventFollower {
  const { follow, ...rest } = o;
  return new EventFollower({
    name: 'publicity',
    ...follow,
    ...rest,
    handle: async (batch) => {
      const changed = new Set(
        batch
          // A step pushed while its device's flags changed may carry the old ones: carried too.
          .filter(
            (e) =>
              e.type === 'DevicePublicSet' || e.type === 'DeviceMarkedGarbage' || e.type === 'StepPushed',
          )
          .map((e) => (e.data as { device_id: string }).device_id),
      );
      for (const id of changed) await carryPublicity(o.store, id);
    },
  });
}
