// What every service's routes are given: the configuration and the adapters of the process.
import type { Context } from 'koa';
import type { DomainEvent } from '../domain/events.ts';
import type { Config } from '../infra/config.ts';
import { type Evolver, handle } from '../infra/eventstore/aggregate.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import type { FixedWindows } from '../infra/rate-limits.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import type { Logger } from '../infra/telemetry.ts';
import type { DeliveryStore } from '../processors/delivery/port.ts';
import type { EventLog } from '../processors/stream/eventlog.ts';
import type { ProjectionOperations } from '../projections/replay.ts';
import type { CaptchaCheck } from './auth/captcha.ts';
import type { Keys } from './auth/keys.ts';
import type { Consistency } from './consistency.ts';
import type { DeviceCa } from './devices/ca.ts';
import { unprocessable } from './errors.ts';
import { s } from './schema.ts';
import type { StreamSlots } from './webhooks/stream.ts';

export interface HubContext {
  config: Config;
  logger: Logger;
  store: EventStore;
  readStore: ReadStore;
  consistency: Consistency;
  keys: Keys;
  fixedWindows: FixedWindows;
  eventLog: EventLog;
  deliveries: DeliveryStore;
  /** The projections' status and replays (/admin/projections): run by the process's main thread. */
  projections: ProjectionOperations;
  /** The process's count of open event streams (API threads: the main thread's); absent, the
   * routes keep one of their own. */
  streamSlots?: Pick<StreamSlots, 'take' | 'give'>;
  captcha: CaptchaCheck;
  deviceCa: DeviceCa;
  /** Where users reach the API (links in emails, redirect-uri). */
  publicUrl: () => string;
}

/** The list envelope of every paginated read: GET /auth/accounts, /apps, /devices, /webhooks/events… */
export interface Page<T> {
  items: T[];
  total: number;
  limit: number;
  skip: number;
}

export const PAGE_QUERY = {
  limit: s.integer({
    minimum: 1,
    maximum: 500,
    default: 50,
    description: 'Items per page (default 50, at most 500).',
  }),
  // Bounded: a skip beyond 2^53 reached the stores as a float (SQLite refused it, Redis too): a 500.
  skip: s.integer({
    minimum: 0,
    maximum: 1_000_000_000,
    default: 0,
    description: 'Items to skip (at most 1,000,000,000).',
  }),
};

export const pageSchema = (item: Record<string, unknown>) => ({
  type: 'object',
  required: ['items', 'total', 'limit', 'skip'],
  properties: {
    items: { type: 'array', items: item },
    total: { type: 'integer' },
    limit: { type: 'integer' },
    skip: { type: 'integer' },
  },
});

/** The nick of a device or an app: unique among its owner's, one of the names its path's {id} takes. */
export const NICK = s.string({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$' });

/** The redirect URIs of an app, or of a user's account (the implicit grant's). */
export const REDIRECT_URIS = s.array({
  maxItems: 20,
  // No fragment: the token is handed over in one (RFC 6749 3.1.2).
  items: s.string({ format: 'uri', pattern: '^https?://[^#]*$', maxLength: 2048 }),
});

/** A path's {id} is read as an id first when it is 24 hex digits: a nick of that form could not be
 * reached by, or would reach the thing with that id. */
export function refuseIdShapedNick(nick: string, field: string): void {
  if (/^[a-f0-9]{24}$/i.test(nick))
    throw unprocessable(`The nick "${nick}" has the form of an id, which a path's {id} is read as first.`, [
      { field, problem: 'has the form of an id' },
    ]);
}

/**
 * Runs a decision on one stream (load, decide, append: `handle`), makes the caller's later reads
 * wait for its append, and answers the state after it: what a route does once it has parsed and
 * authorized a command.
 */
export async function decideOn<S>(
  hub: HubContext,
  ctx: Context,
  stream: string,
  aggregate: Evolver<S>,
  decide: (state: S) => DomainEvent[],
  /** handle()'s options: a state cache, a state just loaded. */
  options: Parameters<typeof handle<S, undefined>>[4] = {},
): Promise<S> {
  const { appended, after } = await handle(
    hub.store,
    stream,
    aggregate,
    (s) => ({ events: decide(s), result: undefined }),
    options,
  );
  if (appended) await hub.consistency.written(ctx, appended.position);
  return after;
}
