// A device's public and garbage flags carried to its steps: whenever they change (the pipeline's
// follower below), and on demand (the operator's device callback runs carryPublicity).
import { type DeviceState, decideMarkPublicProcessed, deviceStream, devices } from '../../domain/devices.ts';
import { decideCarryPublicity, trailStream, trails } from '../../domain/trails.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import type { AppendResult, EventStore, SubscribeOptions } from '../../infra/eventstore/port.ts';
import type { Logger } from '../../infra/telemetry.ts';
import { EventFollower } from './follower.ts';

export interface Carried {
  device: DeviceState;
  markedPublic: number;
  markedNonPublic: number;
  position: number;
}

export async function carryPublicity(store: EventStore, deviceId: string): Promise<Carried> {
  const { state: device } = await load(store, deviceStream(deviceId), devices);
  let position = 0;
  const note = (a: AppendResult | undefined) => {
    if (a) position = Math.max(position, a.position);
  };
  const { result: marks, appended } = await handle(store, trailStream(deviceId), trails, (t) => {
    const events = decideCarryPublicity({ deviceId, public: device.public, garbage: device.garbage }, t);
    return { events, result: events.map((e) => e.data) };
  });
  note(appended);
  const markedPublic = marks.filter((m) => m.public).length;
  const markedNonPublic = marks.length - markedPublic;
  const processed = await handle(store, deviceStream(deviceId), devices, (d) => ({
    events: decideMarkPublicProcessed({ deviceId, markedPublic, markedNonPublic }, d),
    result: undefined,
  }));
  note(processed.appended);
  const { state } = await load(store, deviceStream(deviceId), devices);
  return { device: state, markedPublic, markedNonPublic, position };
}

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
