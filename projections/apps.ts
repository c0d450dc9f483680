// Apps for listing: each app's record (no secret) and, per owner, an index by creation.
import { appRecord, apps } from '../domain/apps.ts';
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const appKeys = {
  record: (id: string) => `app:${id}`,
  /** An owner's apps, by creation. */
  ofOwner: (ownerPrn: string) => `apps-of:${ownerPrn}`,
};

export const appList: Projection = {
  name: 'apps',
  version: 1,
  description: "Every app record and an index of each owner's apps.",
  project(e: StoredEvent) {
    switch (e.type) {
      case 'AppRegistered': {
        const state = apps.evolve(apps.initial(), e);
        return [
          { op: 'set', key: appKeys.record(state.id), doc: appRecord(state) },
          { op: 'zadd', key: appKeys.ofOwner(state.ownerPrn), member: state.id, score: e.position },
        ];
      }
      case 'AppUpdated': {
        const { fields } = e.data;
        return [
          {
            op: 'patch',
            key: appKeys.record(e.data.app_id),
            doc: {
              ...fields,
              exposedScopesLength: fields.exposed_scopes.length,
              'time-modified': new Date(e.created).toISOString(),
            },
          },
        ];
      }
      case 'AppDeleted':
        return [
          { op: 'del', key: appKeys.record(e.data.app_id) },
          { op: 'zrem', key: appKeys.ofOwner(e.data.owner_prn), member: e.data.app_id },
        ];
      default:
        return [];
    }
  },
};
