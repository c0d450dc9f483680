// Apps for listing: each app's record (no secret) and, per owner, an index by creation.
import { appRecord, apps } from '../domain/apps.ts';
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Projection } from './runner.ts';

export const appList: Projection = {
  name: 'apps',
  version: 1,
  description: "Every app record and an index of each owner's apps.",
  project(e: StoredEvent) {
    switch (e.type) {
      case 'AppRegistered': {
        const state = apps.evolve(apps.initial(), e);
        return [
          { op: 'set', key: `app:${state.id}`, doc: appRecord(state) },
          { op: 'zadd', key: `apps-of:${state.ownerPrn}`, member: state.id, score: e.position },
        ];
      }
      case 'AppUpdated': {
        const { fields } = e.data;
        return [
          {
            op: 'patch',
            key: `app:${e.data.app_id}`,
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
          { op: 'del', key: `app:${e.data.app_id}` },
          { op: 'zrem', key: `apps-of:${e.data.owner_prn}`, member: e.data.app_id },
        ];
      default:
        return [];
    }
  },
};
