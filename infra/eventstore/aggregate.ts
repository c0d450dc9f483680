// Command handling over the event store: load an aggregate by folding its stream, decide new
// events from its state (a pure function supplied by the domain), append them at the revision
// that was read, and on a concurrent change read again and decide again.
import { randomUUID } from 'node:crypto';
import {
  type AppendResult,
  type EventStore,
  type RecordedEvent,
  WrongExpectedRevisionError,
} from './port.ts';

export interface Evolver<S> {
  initial: () => S;
  evolve: (state: S, event: RecordedEvent) => S;
}

export interface Loaded<S> {
  state: S;
  /** Revision of the stream's last event; -1 when the stream does not exist. */
  revision: number;
}

export async function load<S>(store: EventStore, stream: string, evolver: Evolver<S>): Promise<Loaded<S>> {
  let state = evolver.initial();
  let revision = -1;
  for (let page = await store.readStream(stream, 0, 1000); page.length > 0; ) {
    for (const e of page) {
      state = evolver.evolve(state, e);
      revision = e.revision;
    }
    if (page.length < 1000) break;
    page = await store.readStream(stream, revision + 1, 1000);
  }
  return { state, revision };
}

export interface Decided<T> {
  events: { type: string; data: unknown }[];
  /** What the command answers (computed from the state and the new events). */
  result: T;
}

/**
 * Runs a command: load, decide, append at the revision read. A concurrent append makes it read
 * and decide again (up to `attempts` times); refusals are thrown by `decide` itself.
 */
export async function handle<S, T>(
  store: EventStore,
  stream: string,
  evolver: Evolver<S>,
  decide: (state: S, revision: number) => Decided<T> | Promise<Decided<T>>,
  attempts = 5,
): Promise<{ result: T; appended: AppendResult | undefined; state: S }> {
  for (let attempt = 1; ; attempt++) {
    const { state, revision } = await load(store, stream, evolver);
    const { events, result } = await decide(state, revision);
    if (events.length === 0) return { result, appended: undefined, state };
    try {
      const appended = await store.append(
        stream,
        events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data })),
        revision < 0 ? 'no_stream' : revision,
      );
      return { result, appended, state };
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError) || attempt >= attempts) throw err;
    }
  }
}

// ---------------------------------------------------------------- unique names

export class NameTakenError extends Error {
  readonly kind: string;
  constructor(kind: string, value: string) {
    super(`${kind} '${value}' is taken`);
    this.name = 'NameTakenError';
    this.kind = kind;
  }
}

interface Claim {
  owner: string | undefined;
}
const claims: Evolver<Claim> = {
  initial: () => ({ owner: undefined }),
  evolve: (s, e) =>
    e.type === 'NameClaimed'
      ? { owner: (e.data as { owner_id: string }).owner_id }
      : e.type === 'NameReleased'
        ? { owner: undefined }
        : s,
};

const claimStream = (kind: string, value: string) => `unique-${kind}-${value}`;

/** Who holds a unique name (a nick, an email, a PRN), read from the store: never stale. */
export async function nameOwner(store: EventStore, kind: string, value: string): Promise<string | undefined> {
  return (await load(store, claimStream(kind, value), claims)).state.owner;
}

/**
 * Takes a unique name for an owner; the name's own stream serialises competing claims. Claiming
 * a name one already holds is a no-op. Throws NameTakenError (409) when someone else holds it.
 */
export async function claimName(
  store: EventStore,
  kind: string,
  value: string,
  owner: string,
): Promise<AppendResult | undefined> {
  const { appended } = await handle(store, claimStream(kind, value), claims, (s) => {
    if (s.owner === owner) return { events: [], result: undefined };
    if (s.owner !== undefined) throw new NameTakenError(kind, value);
    return { events: [{ type: 'NameClaimed', data: { kind, value, owner_id: owner } }], result: undefined };
  });
  return appended;
}

/** Gives a name back; only its holder can. */
export async function releaseName(
  store: EventStore,
  kind: string,
  value: string,
  owner: string,
): Promise<void> {
  await handle(store, claimStream(kind, value), claims, (s) =>
    s.owner === owner
      ? { events: [{ type: 'NameReleased', data: { kind, value } }], result: undefined }
      : { events: [], result: undefined },
  );
}
