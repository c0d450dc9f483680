// The app aggregate (stream app-<id>): third-party applications with their scopes and redirect
// URIs. Its state folded from its events, the App record (the API shows it, the apps projection
// stores it), and a named decision per command. Pure: no I/O, no HTTP; a refusal is a DomainError.
// An app's nick is unique among its owner's apps: a unique name (names.ts), reserved before deciding.
import { refuse } from './errors.ts';
import type { AppFields, DomainEvent, FoldedEvent, Scope } from './events.ts';

export type { AppFields, Scope };

export type AppType = 'public' | 'confidential';

export interface AppState {
  id: string;
  prn: string;
  ownerId: string;
  ownerPrn: string;
  ownerNick: string;
  type: AppType;
  fields: AppFields;
  created: number;
  modified: number;
  deleted: number;
}

export const appStream = (id: string) => `app-${id}`;
export const appPrn = (id: string) => `prn:::apps:/${id}`;

/** The type an AppRegistered records: confidential, or else public. */
const appType = (recorded: string): AppType => (recorded === 'confidential' ? 'confidential' : 'public');

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
  /** Folds one event of the app's stream; any other leaves the state as it is. */
  evolve(a: AppState, e: FoldedEvent): AppState {
    switch (e.type) {
      case 'AppRegistered':
        return {
          id: e.data.app_id,
          prn: e.data.prn,
          ownerId: e.data.owner_id,
          ownerPrn: e.data.owner_prn,
          ownerNick: e.data.owner_nick,
          type: appType(e.data.type),
          fields: e.data.fields,
          created: e.created,
          modified: e.created,
          deleted: 0,
        };
      case 'AppUpdated':
        return { ...a, fields: e.data.fields, modified: e.created };
      case 'AppDeleted':
        return { ...a, deleted: e.created, modified: e.created };
      default:
        return a;
    }
  },
};

/** The App record of the specification (what the API answers and the apps projection stores);
 * `secret` only when just created. */
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

// ---------------------------------------------------------------- decisions

/** Every command but a registration is on an app that exists and is not deleted. */
function refuseGone(a: AppState): void {
  if (!a.id || a.deleted) throw refuse.notFound('No such app.');
}

export interface RegisterApp {
  id: string;
  owner: { id: string; prn: string; nick: string };
  type: AppType;
  /** sha256 of the secret of a confidential app (shown once); null for a public one. */
  secretHash: string | null;
  /** Its nick already reserved among the owner's apps. */
  fields: AppFields;
}

/** Register (a user): the stream is new. */
export function decideRegister(c: RegisterApp, a: AppState): DomainEvent<'AppRegistered'>[] {
  if (a.id) throw refuse.conflict('The app exists already.');
  return [
    {
      type: 'AppRegistered',
      data: {
        app_id: c.id,
        prn: appPrn(c.id),
        owner_id: c.owner.id,
        owner_prn: c.owner.prn,
        owner_nick: c.owner.nick,
        type: c.type,
        secret_hash: c.secretHash,
        fields: c.fields,
      },
    },
  ];
}

export interface UpdateApp {
  /** The type asked for, if any: it cannot change. */
  type?: AppType | undefined;
  /** A new nick already reserved among the owner's apps. */
  fields: AppFields;
}

/** The rule of an update the app's later changes have no part in: its type stays. decideUpdate
 * applies it; the route asks it first too, before reserving a new nick for an update refused. */
export function checkAppUpdate(c: Pick<UpdateApp, 'type'>, a: Pick<AppState, 'type'>): void {
  if (c.type && c.type !== a.type)
    throw refuse.invalid("An app's type cannot change; register a new app.", [
      { field: 'type', problem: 'cannot change' },
    ]);
}

/** Replace the app's fields (its owner). */
export function decideUpdate(c: UpdateApp, a: AppState): DomainEvent<'AppUpdated'>[] {
  refuseGone(a);
  checkAppUpdate(c, a);
  return [{ type: 'AppUpdated', data: { app_id: a.id, fields: c.fields } }];
}

/** Delete (its owner): its tokens stop being issued. Deleting again changes nothing. */
export function decideDelete(a: AppState): DomainEvent<'AppDeleted'>[] {
  if (!a.id) throw refuse.notFound('No such app.');
  if (a.deleted) return [];
  return [{ type: 'AppDeleted', data: { app_id: a.id, owner_prn: a.ownerPrn } }];
}
