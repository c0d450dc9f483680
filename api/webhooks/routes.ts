// /webhooks: subscriptions, the catalog of event types, the account-wide event log, and the
// delivery log with its operations (test, replay, redeliver, rotate-secret).
import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import { RESPONSE_BODY_LIMIT } from '../../processors/delivery/dispatcher.ts';
import { Egress, EgressError } from '../../processors/delivery/egress.ts';
import type { AttemptRecord, Job } from '../../processors/delivery/port.ts';
import { newSigningSecret } from '../../processors/delivery/signing.ts';
import {
  API_VERSION,
  EVENT_TYPES,
  type EventType,
  type WebhookEvent,
} from '../../processors/stream/derive.ts';
import { matches, projectedSubscriptions } from '../../processors/stream/processor.ts';
import { authenticate, requireScope } from '../auth/middleware.ts';
import { seal } from '../auth/secrets.ts';
import { grantingScopes, grants } from '../auth/tokens.ts';
import { type HubContext, PAGE_QUERY, pageSchema } from '../context.ts';
import { notFound, unprocessable } from '../errors.ts';
import { parseRfc3339 } from '../http.ts';
import { NOT_PROTO, type Routes, schema } from '../routes.ts';
import {
  EVENT_TYPE_NAMES,
  fieldProblems,
  type Subscription,
  type SubscriptionFields,
  subscriptionRecord,
  subscriptions,
  webhookStream,
} from './subscriptions.ts';

const KEY = { type: 'string', minLength: 1, maxLength: 128 };
const FIELDS = {
  nick: { type: 'string', minLength: 1, maxLength: 128, description: 'Label of the subscription.' },
  url: {
    type: 'string',
    maxLength: 2048,
    description: 'HTTPS endpoint; must resolve to public addresses only (checked again at every attempt).',
  },
  description: { type: 'string', maxLength: 1024 },
  event_types: {
    type: 'array',
    minItems: 1,
    maxItems: 9,
    uniqueItems: true,
    items: { enum: EVENT_TYPE_NAMES },
  },
  enabled: { type: 'boolean', description: 'false pauses deliveries without deleting.' },
  devices: {
    type: 'array',
    maxItems: 1000,
    items: { type: 'string', pattern: '^prn:::devices:/[a-f0-9]{24}$' },
    description: 'Device PRNs; empty: every device of the account.',
  },
  user_meta_keys: { type: 'array', maxItems: 100, items: KEY },
  device_meta_keys: { type: 'array', maxItems: 100, items: KEY },
  custom_headers: {
    type: 'object',
    maxProperties: 20,
    propertyNames: { ...NOT_PROTO, pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$" },
    // Visible Latin-1 and tabs only: what HTTP/1.1 (and undici) can send as a header value.
    additionalProperties: { type: 'string', maxLength: 1024, pattern: '^[\\t\\x20-\\x7e\\x80-\\xff]*$' },
    description:
      'Header name → value, sent with every delivery. Webhook-*, Content-Type, User-Agent, Host and other framing headers are refused. Read-only tokens see each value as [redacted].',
  },
  retry_policy: {
    type: ['object', 'null'],
    additionalProperties: false,
    required: ['max_attempts', 'delays_s'],
    properties: {
      max_attempts: {
        type: 'integer',
        minimum: 1,
        maximum: 20,
        description: 'Attempts in all, the first included.',
      },
      delays_s: {
        type: 'array',
        maxItems: 19,
        items: { type: 'integer', minimum: 1, maximum: 86_400 },
        description: 'Seconds before each retry; the last repeats when shorter than max_attempts - 1.',
      },
    },
    // A retry needs a delay: at least one whenever there is more than one attempt.
    if: { properties: { max_attempts: { minimum: 2 } } },
    // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then; an object, never awaited (not callable, so not a thenable)
    then: { properties: { delays_s: { minItems: 1 } } },
    description: 'null: the default, 8 attempts with retries after 60, 120, 240, 480, 960, 1920, 3840 s.',
  },
} as const;
const SUBSCRIPTION_BODY = {
  type: 'object',
  additionalProperties: false,
  required: ['nick', 'url', 'event_types', 'enabled'],
  properties: FIELDS,
};
const SUBSCRIPTION = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    owner: { type: 'string' },
    ...FIELDS,
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
    secret: {
      type: 'string',
      description: 'The signing secret: only in the answers of creation and rotate-secret.',
    },
  },
};
/** A time of an attempt: null only in records moved over from older versions that lacked it. */
const ATTEMPT_TIME = { type: ['string', 'null'], format: 'date-time' };
const ATTEMPT = {
  type: 'object',
  description: 'One delivery attempt. The single view adds `request` and `response`.',
  properties: {
    id: { type: 'string', description: '`del_<id>`: the Webhook-Id and `request_id` of this attempt.' },
    job_id: { type: 'string' },
    subscription_id: { type: 'string' },
    owner: { type: 'string', description: 'The PRN of the account the subscription belongs to.' },
    event_id: { type: 'string' },
    event_type: { type: 'string' },
    kind: { enum: ['event', 'test', 'replay', 'redeliver'] },
    attempt: { type: 'integer' },
    status: { enum: ['succeeded', 'failed', 'dead_lettered'] },
    outcome: { enum: ['2xx', '3xx', '4xx', '5xx', 'timeout', 'network', 'refused_address'] },
    response_code: { type: ['integer', 'null'] },
    error: { type: ['string', 'null'] },
    duration_ms: { type: 'integer' },
    scheduled_at: ATTEMPT_TIME,
    started_at: ATTEMPT_TIME,
    finished_at: ATTEMPT_TIME,
    next_attempt_at: { type: ['string', 'null'], format: 'date-time' },
  },
};
const HEADERS = { type: 'object', additionalProperties: { type: 'string' } };
/** The single view of an attempt: the request as sent and the answer as received. */
const ATTEMPT_DETAIL = {
  ...ATTEMPT,
  description: 'One delivery attempt, with the request as sent and the answer as received.',
  properties: {
    ...ATTEMPT.properties,
    request: {
      type: 'object',
      properties: { url: { type: 'string' }, headers: HEADERS, body: { type: 'string' } },
    },
    response: {
      type: ['object', 'null'],
      description: 'null when no answer came (a timeout, a network error, a refused address).',
      properties: {
        status: { type: 'integer' },
        headers: HEADERS,
        body: {
          type: 'string',
          description: `The first ${RESPONSE_BODY_LIMIT} bytes at most; \`truncated\` says if it was cut.`,
        },
        truncated: { type: 'boolean' },
      },
    },
  },
};
const QUEUED = {
  type: 'object',
  properties: {
    jobs: {
      type: 'array',
      items: {
        type: 'object',
        properties: { job_id: { type: 'string' }, subscription_id: { type: 'string' } },
      },
    },
  },
};
const WEBHOOK_ID = /^[a-f0-9]{24}$/;

const EVENT = {
  type: 'object',
  required: ['id', 'type', 'api_version', 'created', 'owner', 'livemode', 'data', 'resource_prn'],
  properties: {
    id: { type: 'string', description: '`evt_<id>`: stable across retries and reprocessing.' },
    type: { enum: Object.keys(EVENT_TYPES) },
    api_version: { type: 'string', description: 'YYYY-MM-DD.' },
    created: { type: 'integer', description: 'Unix seconds: when the change it reports was stored.' },
    owner: { type: 'string', description: 'Account PRN.' },
    resource_prn: { type: 'string', description: 'The device the event is about.' },
    livemode: { type: 'boolean' },
    data: { type: 'object', description: 'Type-specific; see docs/webhooks.md.' },
  },
};

const TIME = {
  type: 'string',
  description: 'RFC 3339 timestamp (e.g. `2026-11-21T10:00:00Z`) or Unix seconds.',
};

/** RFC 3339 or Unix seconds → Unix ms. */
export function parseTime(name: string, raw: string | undefined): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (/^\d{1,12}$/.test(raw)) return Number(raw) * 1000;
  const ns = parseRfc3339(raw);
  if (ns === undefined) {
    throw unprocessable(`${name} must be an RFC 3339 timestamp or Unix seconds.`, [
      { field: name, problem: 'not an RFC 3339 timestamp or Unix seconds' },
    ]);
  }
  return Number(ns / 1_000_000n);
}

const publicEvent = ({ source_position: _p, sequence: _s, created_ms: _c, ...e }: WebhookEvent) => e;

/**
 * Custom header values are as often as not the receiver's credentials (`Authorization: Bearer …`):
 * a token that may change the subscription sees them, a read-only one (a delegated reader, an app)
 * sees each value as REDACTED, in the subscription and in the recorded requests alike (where every
 * header but the protocol's own is masked: custom headers may have been renamed since).
 */
export const REDACTED = '[redacted]';
const PROTOCOL_HEADERS = new Set([
  'content-type',
  'user-agent',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
]);
const mayWrite = (ctx: Context) => grants(ctx.state.auth!.scopes, 'webhooks', 'write');
const masked = (headers: Record<string, string>, keep: (name: string) => boolean) =>
  Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, keep(k.toLowerCase()) ? v : REDACTED]));

function subscriptionFor(ctx: Context, sub: Subscription) {
  const record = subscriptionRecord(sub);
  return mayWrite(ctx) ? record : { ...record, custom_headers: masked(record.custom_headers, () => false) };
}

function attemptFor(ctx: Context, attempt: AttemptRecord): AttemptRecord {
  if (mayWrite(ctx)) return attempt;
  const request = {
    ...attempt.request,
    headers: masked(attempt.request.headers, (k) => PROTOCOL_HEADERS.has(k)),
  };
  return { ...attempt, request };
}

export function webhookRoutes(hub: HubContext) {
  const auth = authenticate(hub.keys, hub.store, hub.config.callerCacheEntries);
  const read = [auth, requireScope('webhooks', 'read')];

  const write = [auth, requireScope('webhooks', 'write')];
  const egress = new Egress({
    allowHttp: hub.config.webhookAllowHttp,
    allowNetworks: hub.config.webhookAllowNetworks,
  });

  /** The caller's subscription, or 404 (unknown, deleted, or another account's). */
  async function owned(ctx: Context): Promise<Subscription> {
    const id = ctx.params.id!;
    if (!WEBHOOK_ID.test(id)) throw notFound('No such subscription.');
    const { state } = await load(hub.store, webhookStream(id), subscriptions);
    if (!state.id || state.deleted || state.ownerPrn !== ctx.state.auth!.sub)
      throw notFound('No such subscription.');
    return state;
  }

  /** One attempt of the caller's subscription, or 404. */
  async function ownedAttempt(ctx: Context): Promise<{ sub: Subscription; attempt: AttemptRecord }> {
    const sub = await owned(ctx);
    const attempt = await hub.deliveries.attempt(ctx.params.did!);
    if (!attempt || attempt.subscription_id !== sub.id) throw notFound('No such delivery.');
    return { sub, attempt };
  }

  /** 422 naming every problem, the first in the message. */
  const refuse = (problems: [string, string][]) => {
    if (problems.length > 0)
      throw unprocessable(
        `${problems[0]![0]} ${problems[0]![1]}.`,
        problems.map(([field, problem]) => ({ field, problem })),
      );
  };

  /** The fields' problems, and the URL's when it is new: a URL kept was checked when it was set,
   * and every delivery checks it again, so a subscription whose receiver stopped resolving (or
   * the rules changed) can still be paused and edited. */
  async function checked(f: SubscriptionFields, kept?: string): Promise<SubscriptionFields> {
    const problems = fieldProblems(f);
    if (f.url !== kept)
      try {
        await egress.checkReachable(f.url);
      } catch (err) {
        if (!(err instanceof EgressError)) throw err;
        problems.unshift(['url', err.message]);
      }
    refuse(problems);
    return f;
  }

  const fields = (b: Partial<SubscriptionFields>, base?: SubscriptionFields): SubscriptionFields => ({
    nick: b.nick ?? base?.nick ?? '',
    url: b.url ?? base?.url ?? '',
    description: b.description ?? base?.description ?? '',
    event_types: b.event_types ?? base?.event_types ?? [],
    enabled: b.enabled ?? base?.enabled ?? true,
    devices: b.devices ?? base?.devices ?? [],
    user_meta_keys: b.user_meta_keys ?? base?.user_meta_keys ?? [],
    device_meta_keys: b.device_meta_keys ?? base?.device_meta_keys ?? [],
    custom_headers: b.custom_headers ?? base?.custom_headers ?? {},
    retry_policy: b.retry_policy === undefined ? (base?.retry_policy ?? null) : b.retry_policy,
  });

  /** Appends the fields `next` makes of the subscription's state as the append finds it: a
   * PATCH merges into that state, not into the one read before its URL was checked, so two
   * concurrent PATCHes of different fields both hold. */
  async function update(ctx: Context, sub: Subscription, next: (now: Subscription) => SubscriptionFields) {
    const { appended, after } = await handle(hub.store, webhookStream(sub.id), subscriptions, (s) => {
      if (s.deleted) throw notFound('No such subscription.');
      return {
        events: [{ type: 'WebhookUpdated', data: { webhook_id: s.id, owner_prn: s.ownerPrn, ...next(s) } }],
        result: undefined,
      };
    });
    await hub.consistency.written(ctx, appended!.position);
    ctx.body = subscriptionRecord(after);
  }

  async function enqueue(jobs: Job[]): Promise<{ job_id: string; subscription_id: string }[]> {
    await hub.deliveries.enqueue(jobs);
    return jobs.map((j) => ({ job_id: j.job_id, subscription_id: j.subscription_id }));
  }

  const job = (sub: { id: string; ownerPrn: string }, kind: Job['kind'], event: WebhookEvent): Job => ({
    job_id: `job_${randomBytes(16).toString('hex')}`,
    subscription_id: sub.id,
    owner: sub.ownerPrn,
    kind,
    event,
    attempt: 0,
    enqueued: Date.now(),
  });

  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/webhooks/event-types',
      tag: 'webhooks',
      summary: 'The catalog of event types, each with a description.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      responses: {
        200: {
          description: 'Every event type.',
          schema: {
            type: 'object',
            properties: {
              items: {
                type: 'array',
                items: {
                  type: 'object',
                  properties: { type: { type: 'string' }, description: { type: 'string' } },
                },
              },
            },
          },
        },
      },
      handler: async (ctx) => {
        ctx.body = {
          items: Object.entries(EVENT_TYPES).map(([type, description]) => ({ type, description })),
        };
      },
    });

    routes.add<
      undefined,
      { type?: EventType; resource_prn?: string; since?: string; until?: string; limit: number; skip: number }
    >({
      method: 'get',
      path: '/webhooks/events',
      tag: 'webhooks',
      summary:
        "Your account's event log, newest first: every derived event, matched by a subscription or not.",
      description:
        'Events are kept for HUB_EVENT_LOG_RETENTION_DAYS (30 by default). `since` is inclusive, `until` exclusive; both compare with `created`.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      query: schema({
        type: 'object',
        properties: {
          type: { enum: Object.keys(EVENT_TYPES), description: 'Only events of this type.' },
          resource_prn: { type: 'string', maxLength: 256, description: 'Only events about this device PRN.' },
          since: TIME,
          until: TIME,
          ...PAGE_QUERY,
        },
      }),
      responses: { 200: { description: 'A page of events.', schema: pageSchema(EVENT) } },
      handler: async (ctx, { query }) => {
        const since = parseTime('since', query.since);
        const until = parseTime('until', query.until);
        const page = await hub.eventLog.list(ctx.state.auth!.sub, {
          type: query.type,
          resource_prn: query.resource_prn,
          since,
          until,
          limit: query.limit,
          skip: query.skip,
        });
        ctx.body = {
          items: page.items.map(publicEvent),
          total: page.total,
          limit: query.limit,
          skip: query.skip,
        };
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/events/{eid}',
      tag: 'webhooks',
      summary: 'One event with its full payload: 404 for an unknown id or another account’s.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      responses: { 200: { description: 'The event.', schema: EVENT } },
      handler: async (ctx) => {
        const event = await hub.eventLog.get(ctx.state.auth!.sub, ctx.params.eid!);
        if (!event) throw notFound('No such event in your account.');
        ctx.body = publicEvent(event);
      },
    });

    routes.add<undefined, { limit: number; skip: number }>({
      method: 'get',
      path: '/webhooks/events/{eid}/deliveries',
      tag: 'webhooks',
      summary: 'Every delivery attempt of one event, across all subscriptions, oldest first.',
      description:
        'Paged like every list: an event redelivered or replayed again and again has as many attempts.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      query: schema({ type: 'object', properties: PAGE_QUERY }),
      responses: {
        200: { description: 'A page of the attempts, oldest first.', schema: pageSchema(ATTEMPT) },
      },
      handler: async (ctx, { query }) => {
        const owner = ctx.state.auth!.sub;
        const event = await hub.eventLog.get(owner, ctx.params.eid!);
        const all = await hub.deliveries.attemptsOfEvent(owner, ctx.params.eid!);
        if (!event && all.length === 0) throw notFound('No such event in your account.');
        ctx.body = {
          items: all.slice(query.skip, query.skip + query.limit).map(summary),
          total: all.length,
          limit: query.limit,
          skip: query.skip,
        };
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/events/{eid}/redeliver',
      tag: 'webhooks',
      summary: 'Sends a fresh attempt of the event to every subscription that matches it now.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      responses: { 202: { description: 'The jobs queued (one per matching subscription).', schema: QUEUED } },
      handler: async (ctx) => {
        const owner = ctx.state.auth!.sub;
        const event = await hub.eventLog.get(owner, ctx.params.eid!);
        if (!event) throw notFound('No such event in your account.');
        const subs = (await projectedSubscriptions(hub.readStore).of(owner)).filter((s) => matches(s, event));
        ctx.status = 202;
        ctx.body = {
          jobs: await enqueue(subs.map((s) => job({ id: s.id, ownerPrn: owner }, 'redeliver', event))),
        };
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/',
      tag: 'webhooks',
      summary: 'Your subscriptions, newest first (no secrets).',
      waitsForWrites: true,
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      query: schema({ type: 'object', properties: PAGE_QUERY }),
      responses: { 200: { description: 'A page of subscriptions.', schema: pageSchema(SUBSCRIPTION) } },
      handler: async (ctx, { query }) => {
        const q = query as unknown as { limit: number; skip: number };
        await hub.consistency.readable(ctx, ['webhooks']);
        const rs = hub.readStore;
        const g = await rs.activeGeneration('webhooks');
        const key = `webhooks-of:${ctx.state.auth!.sub}`;
        const [ids, total] = await Promise.all([
          rs.range('webhooks', g, key, { reverse: true, offset: q.skip, limit: q.limit }),
          rs.count('webhooks', g, key),
        ]);
        const items = await Promise.all(
          ids.map(async (id) =>
            subscriptionFor(ctx, (await load(hub.store, webhookStream(id), subscriptions)).state),
          ),
        );
        ctx.body = { items, total, limit: q.limit, skip: q.skip };
      },
    });

    routes.add<SubscriptionFields>({
      method: 'post',
      path: '/webhooks/',
      tag: 'webhooks',
      summary:
        'Create a subscription; the answer carries its signing secret (shown only here and on rotation).',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      body: schema(SUBSCRIPTION_BODY),
      responses: { 201: { description: 'The subscription, with `secret`.', schema: SUBSCRIPTION } },
      handler: async (ctx, { body }) => {
        const f = await checked(fields(body));
        const id = randomBytes(12).toString('hex');
        const secret = newSigningSecret();
        const { appended, after } = await handle(hub.store, webhookStream(id), subscriptions, () => ({
          events: [
            {
              type: 'WebhookCreated',
              data: {
                webhook_id: id,
                owner_prn: ctx.state.auth!.sub,
                ...f,
                secret_sealed: seal(hub.keys.sealKey, secret),
              },
            },
          ],
          result: undefined,
        }));
        await hub.consistency.written(ctx, appended!.position);
        ctx.status = 201;
        ctx.body = subscriptionRecord(after, secret);
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'One subscription (no secret).',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      handler: async (ctx) => {
        ctx.body = subscriptionFor(ctx, await owned(ctx));
      },
    });

    routes.add<SubscriptionFields, Record<string, string>, Subscription>({
      method: 'put',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Replace a subscription wholesale (fields left out take their defaults).',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      body: schema(SUBSCRIPTION_BODY),
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      authorize: owned,
      handler: async (ctx, { body, allowed: sub }) => {
        const replaced = await checked(fields(body), sub.url);
        await update(ctx, sub, () => replaced);
      },
    });

    routes.add<Partial<SubscriptionFields>, Record<string, string>, Subscription>({
      method: 'patch',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Merge the fields sent into the subscription.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      body: schema({ type: 'object', additionalProperties: false, minProperties: 1, properties: FIELDS }),
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      authorize: owned,
      handler: async (ctx, { body, allowed: sub }) => {
        await checked(fields(body, sub), sub.url);
        // The body's fields were checked above; the others were when they were set. A URL taken
        // from the state now is one whoever set it had checked.
        await update(ctx, sub, (now) => {
          const merged = fields(body, now);
          refuse(fieldProblems(merged));
          return merged;
        });
      },
    });

    routes.add({
      method: 'delete',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Delete a subscription: its deliveries stop at once, scheduled retries included.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        const { appended } = await handle(hub.store, webhookStream(sub.id), subscriptions, (s) => ({
          events: s.deleted
            ? []
            : [{ type: 'WebhookDeleted', data: { webhook_id: s.id, owner_prn: s.ownerPrn } }],
          result: undefined,
        }));
        if (appended) await hub.consistency.written(ctx, appended.position);
        ctx.status = 204;
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/{id}/rotate-secret',
      tag: 'webhooks',
      summary: 'A new signing secret; the previous one keeps signing beside it until the next rotation.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      responses: { 200: { description: 'The subscription, with the new `secret`.', schema: SUBSCRIPTION } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        const secret = newSigningSecret();
        const { appended, after } = await handle(hub.store, webhookStream(sub.id), subscriptions, (s) => ({
          events: [
            {
              type: 'WebhookSecretRotated',
              data: {
                webhook_id: s.id,
                owner_prn: s.ownerPrn,
                secret_sealed: seal(hub.keys.sealKey, secret),
                previous_sealed: s.secretSealed,
              },
            },
          ],
          result: undefined,
        }));
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = subscriptionRecord(after, secret);
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/{id}/test',
      tag: 'webhooks',
      summary: 'Sends a synthetic event (livemode false) through the full signing and retry path.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      responses: { 202: { description: 'The job queued.', schema: QUEUED } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        const now = Date.now();
        const event: WebhookEvent = {
          id: `evt_${randomBytes(16).toString('hex')}`,
          type: (sub.event_types[0] ?? 'device.created') as EventType,
          api_version: API_VERSION,
          created: Math.floor(now / 1000),
          owner: sub.ownerPrn,
          resource_prn: '',
          livemode: false,
          data: { test: true, message: 'A test delivery from Device Hub.' },
          source_position: 0,
          sequence: 0,
          created_ms: now,
        };
        ctx.status = 202;
        ctx.body = { jobs: await enqueue([job(sub, 'test', event)]) };
      },
    });

    routes.add<undefined, { status?: 'succeeded' | 'failed' | 'dead_lettered'; limit: number; skip: number }>(
      {
        method: 'get',
        path: '/webhooks/{id}/deliveries',
        tag: 'webhooks',
        summary: 'Every attempt of one subscription, newest first.',
        description:
          '`status`: `succeeded`, `failed` (every attempt that did not succeed, dead-lettered ones included) or `dead_lettered` (failed, no attempt follows).',
        security: 'bearer',
        scopes: grantingScopes('webhooks', 'read'),
        middleware: read,
        query: schema({
          type: 'object',
          properties: { status: { enum: ['succeeded', 'failed', 'dead_lettered'] }, ...PAGE_QUERY },
        }),
        responses: { 200: { description: 'A page of attempts.', schema: pageSchema(ATTEMPT) } },
        handler: async (ctx, { query }) => {
          const sub = await owned(ctx);
          const page = await hub.deliveries.attempts(sub.id, query);
          ctx.body = {
            items: page.items.map(summary),
            total: page.total,
            limit: query.limit,
            skip: query.skip,
          };
        },
      },
    );

    routes.add({
      method: 'get',
      path: '/webhooks/{id}/deliveries/{did}',
      tag: 'webhooks',
      summary: 'One attempt with the request sent and the response received (body cut at 4 KiB).',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'read'),
      middleware: read,
      responses: { 200: { description: 'The attempt.', schema: ATTEMPT_DETAIL } },
      handler: async (ctx) => {
        ctx.body = attemptFor(ctx, (await ownedAttempt(ctx)).attempt);
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/{id}/deliveries/{did}/replay',
      tag: 'webhooks',
      summary: 'Resends the event of one attempt to this subscription, as a new job with fresh attempts.',
      security: 'bearer',
      scopes: grantingScopes('webhooks', 'write'),
      middleware: write,
      responses: { 202: { description: 'The job queued.', schema: QUEUED } },
      handler: async (ctx) => {
        const { sub, attempt: a } = await ownedAttempt(ctx);
        const event = JSON.parse(a.request.body) as WebhookEvent & { request_id?: string };
        delete event.request_id;
        const logged = await hub.eventLog.get(sub.ownerPrn, event.id);
        ctx.status = 202;
        ctx.body = {
          jobs: await enqueue([
            job(
              sub,
              'replay',
              logged ?? { ...event, resource_prn: '', source_position: 0, sequence: 0, created_ms: 0 },
            ),
          ]),
        };
      },
    });
  };
}

/** An attempt without its recorded request and response: the list view. */
const summary = ({ request: _q, response: _r, ...a }: AttemptRecord) => a;
