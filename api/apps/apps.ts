// The app aggregate (stream app-<id>): third-party applications with their scopes and redirect
// URIs. Pure: state folded from events, and the record the API shows.
import type { RecordedEvent } from '../../infra/eventstore/port.ts';

export interface Scope {
  id: string;
  description: string;
  required: boolean;
  service: string;
}

export interface AppFields {
  nick: string;
  name: string;
  logo: string;
  redirect_uris: string[];
  scopes: Scope[];
  exposed_scopes: Scope[];
}

export interface AppState {
  id: string;
  prn: string;
  ownerId: string;
  ownerPrn: string;
  ownerNick: string;
  type: 'public' | 'confidential';
  fields: AppFields;
  created: number;
  modified: number;
  deleted: number;
}

export const appStream = (id: string) => `app-${id}`;
export const appPrn = (id: string) => `prn:::apps:/${id}`;

export const apps = {
  snapshot: { kind: 'app', shape: 1 },
  initial: (): AppState => ({
    id: '',
    prn: '',
    ownerId: '',
    ownerPrn: '',
    ownerNick: '',
    type: 'public',
    fields: { nick: '', name: '', logo: '', redirect_uris: [], scopes: [], exposed_scopes: [] },
    created: 0,
    modified: 0,
    deleted: 0,
  }),
  evolve(a: AppState, e: RecordedEvent | { type: string; data: unknown; created: number }): AppState {
    const d = e.data as Record<string, unknown>;
    switch (e.type) {
      case 'AppRegistered':
        return {
          id: d.app_id as string,
          prn: d.prn as string,
          ownerId: d.owner_id as string,
          ownerPrn: d.owner_prn as string,
          ownerNick: d.owner_nick as string,
          type: d.type as AppState['type'],
          fields: d.fields as AppFields,
          created: e.created,
          modified: e.created,
          deleted: 0,
        };
      case 'AppUpdated':
        return { ...a, fields: d.fields as AppFields, modified: e.created };
      case 'AppDeleted':
        return { ...a, deleted: e.created, modified: e.created };
      default:
        return a;
    }
  },
};

/** The App record of the specification; `secret` only when just created. */
export function appRecord(a: AppState, secret?: string): Record<string, unknown> {
  return {
    id: a.id,
    prn: a.prn,
    type: a.type,
    ...a.fields,
    exposedScopesLength: a.fields.exposed_scopes.length,
    owner: a.ownerPrn,
    'owner-nick': a.ownerNick,
    'time-created': new Date(a.created).toISOString(),
    'time-modified': new Date(a.modified).toISOString(),
    ...(a.deleted ? { 'deleted-at': new Date(a.deleted).toISOString() } : {}),
    ...(secret ? { secret } : {}),
  };
}
