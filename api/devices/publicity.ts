// Carries a device's public and garbage flags to its steps. The operator callback runs it on
// demand; the pipeline (processors/publicity.ts) runs it whenever a device's flags change.
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import type { AppendResult, EventStore } from '../../infra/eventstore/port.ts';
import { type DeviceState, deviceStream, devices, stepsToMark, trailStream, trails } from './devices.ts';

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
    const marks = stepsToMark(device, t);
    return {
      events: marks.map((m) => ({ type: 'StepPublicitySet', data: { device_id: deviceId, ...m } })),
      result: marks,
    };
  });
  note(appended);
  const markedPublic = marks.filter((m) => m.public).length;
  const markedNonPublic = marks.length - markedPublic;
  const processed = await handle(store, deviceStream(deviceId), devices, (d) =>
    d.publicProcessed && marks.length === 0
      ? { events: [], result: undefined }
      : {
          events: [
            {
              type: 'DevicePublicProcessed',
              data: {
                device_id: deviceId,
                public: d.public,
                steps_marked_public: markedPublic,
                steps_marked_non_public: markedNonPublic,
              },
            },
          ],
          result: undefined,
        },
  );
  note(processed.appended);
  const { state } = await load(store, deviceStream(deviceId), devices);
  return { device: state, markedPublic, markedNonPublic, position };
}
