// Apps for listing: each app's record (no secret) and, per owner, an index by creation.
import { appRecord, apps } from '../api/apps/apps.ts';
import type { Projection } from './runner.ts';

export const appList: Projection = {
  name: 'apps',
  version: 1,
  description: "Every app record and an index of each owner's apps.",
  project(e) {
    if (e.type !== 'AppRegistered' && e.type !== 'AppUpdated' && e.type !== 'AppDeleted') return [];
    const d = e.data as { app_id: string; owner_prn?: string };
    const key = `app:${d.app_id}`;
    if (e.type === 'AppRegistered') {
      const state = apps.evolve(apps.initial(), e);
      return [
        { op: 'set', key, doc: appRecord(state) },
        { op: 'zadd', key: `apps-of:${state.ownerPrn}`, member: state.id, score: e.position },
      ];
    }
    if (e.type === 'AppUpdated') {
      const fields = (e.data as { fields: Record<string, unknown> }).fields;
      const exposed = (fields.exposed_scopes as unknown[]).length;
      return [
        {
          op: 'patch',
          key,
          doc: {
            ...fields,
            exposedScopesLength: exposed,
            'time-modified': new Date(e.created).toISOString(),
          },
        },
      ];
    }
    return [
      { op: 'del', key },
      { op: 'zrem', key: `apps-of:${d.owner_prn}`, member: d.app_id },
    ];
  },
};
