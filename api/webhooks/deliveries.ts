// /webhooks: the catalog of event types and the account-wide event log (its events, their
// deliveries, a redelivery to the subscriptions that match now), and each subscription's delivery
// log with its operations (a test delivery, the replay of one attempt's event). None of these
// changes a subscription: they read the logs and queue delivery jobs.
import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import type { Subscription } from '../../domain/subscriptions.ts';
import { RESPONSE_BODY_LIMIT } from '../../processors/delivery/dispatcher.ts';
import type { AttemptRecord, Job } from '../../processors/delivery/port.ts';
import { eventOfAttempt } from '../../processors/delivery/recovery.ts';
import {
  API_VERSION,
  EVENT_TYPES,
  type EventType,
  type WebhookEvent,
} from '../../processors/stream/derive.ts';
import { matches, projectedSubscriptions } from '../../processors/stream/processor.ts';
import { type EventTypeEntry, WEBHOOK_EVENTS } from '../../schemas/webhook-events.ts';
import { requireScope } from '../auth/middleware.ts';
import { PAGE_QUERY, pageSchema } from '../context.ts';
import { notFound, unprocessable } from '../errors.ts';
import { parseRfc3339 } from '../http.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import type { WebhookRoutes } from './routes.ts';
import { masked, mayWrite } from './subscriptions.ts';

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
    kind: { enum: ['event', 'test', 'replay', 'redeliver', 'recover'] },
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
export const EVENT = {
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
    data: {
      type: 'object',
      description:
        "Type-specific: the type's schema in GET /webhooks/event-types and in this document's `webhooks`.",
    },
  },
};

/** The catalogue as GET /webhooks/event-types answers it. */
const CATALOGUE = (Object.entries(WEBHOOK_EVENTS) as [EventType, EventTypeEntry][]).map(([type, e]) => ({
  type,
  description: e.description,
  schema: e.schema,
  example: e.example,
}));

/** `device.device_meta.updated` → `DeviceDeviceMetaUpdatedData`: the name /openapi.json gives the
 * schema of a type's `data`. */
const dataSchemaName = (type: string) =>
  `${type
    .split(/[._]/)
    .map((w) => w[0]!.toUpperCase() + w.slice(1))
    .join('')}Data`;

/** What a receiver is sent: the headers of the specification's signing and the Event resource,
 * its `data` of the type's schema (OpenAPI 3.1 `webhooks`, one per type). */
function delivery(type: EventType, { description, example }: EventTypeEntry) {
  const header = (name: string, text: string) => ({
    name,
    in: 'header',
    required: true,
    description: text,
    schema: { type: 'string' },
  });
  return {
    post: {
      summary: `A \`${type}\` delivery.`,
      description: `${description} Test deliveries (POST /webhooks/{id}/test, \`livemode\` false) carry \`{test, message}\` as their \`data\` instead.`,
      operationId: `deliver${dataSchemaName(type).slice(0, -'Data'.length)}`,
      tags: ['webhooks'],
      parameters: [
        header('Webhook-Id', '`del_<id>`: the attempt, equal to `request_id`.'),
        header('Webhook-Timestamp', 'Unix seconds.'),
        header(
          'Webhook-Signature',
          '`v1,<hex HMAC-SHA256 of {Webhook-Id}.{Webhook-Timestamp}.{raw body}>`, one entry per secret (two while a rotation overlaps), separated by spaces.',
        ),
      ],
      requestBody: {
        required: true,
        content: {
          'application/json': {
            schema: {
              type: 'object',
              required: ['id', 'type', 'api_version', 'created', 'owner', 'request_id', 'livemode', 'data'],
              properties: {
                id: EVENT.properties.id,
                type: { const: type },
                api_version: EVENT.properties.api_version,
                created: EVENT.properties.created,
                owner: EVENT.properties.owner,
                request_id: {
                  type: 'string',
                  description: '`del_<id>`: this attempt; a new one per attempt.',
                },
                livemode: EVENT.properties.livemode,
                data: { $ref: `#/components/schemas/${dataSchemaName(type)}` },
              },
            },
            example: {
              id: 'evt_0193a4f1c2d8e5b7a9c3d1e2f4a6b8c0',
              type,
              api_version: API_VERSION,
              created: 1_795_000_000,
              owner: 'prn:::accounts:/6650b1f0e1f0a93d7c2b4d02',
              request_id: 'del_5e1f0a93d7c2b4000000002a',
              livemode: true,
              data: example,
            },
          },
        },
      },
      responses: {
        '2XX': { description: 'Received: the delivery is complete.' },
        default: {
          description:
            '408, 425, 429, 5xx or no answer in time: retried with backoff. Any other status: a permanent failure, dead-lettered.',
        },
      },
    },
  };
}

const TIME = s.string({ description: 'RFC 3339 timestamp (e.g. `2026-11-21T10:00:00Z`) or Unix seconds.' });

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

/** An event as the API shows it: without what only orders the log. */
export const publicEvent = ({ source_position: _p, sequence: _s, created_ms: _c, ...e }: WebhookEvent) => e;

/** The headers of a recorded request a read-only token sees (subscriptions.ts: REDACTED). */
const PROTOCOL_HEADERS = new Set([
  'content-type',
  'user-agent',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
]);

function attemptFor(ctx: Context, attempt: AttemptRecord): AttemptRecord {
  if (mayWrite(ctx)) return attempt;
  const request = {
    ...attempt.request,
    headers: masked(attempt.request.headers, (k) => PROTOCOL_HEADERS.has(k)),
  };
  return { ...attempt, request };
}

/** The synthetic event of a test delivery: of the subscription's first type, not live. */
function testEvent(sub: Subscription, now: number): WebhookEvent {
  return {
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
}

/** Queues delivery jobs, answering what the routes show of them. */
function queueing(hub: WebhookRoutes['hub']) {
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

  return { enqueue, job };
}

/** The catalog of event types and the event log: before /webhooks/{id}, which would take them. */
export function eventLogRoutes({ hub }: WebhookRoutes) {
  const { enqueue, job } = queueing(hub);
  return (routes: Routes) => {
    for (const { type, schema } of CATALOGUE) routes.schema(dataSchemaName(type), schema);
    for (const { type, ...entry } of CATALOGUE) routes.webhook(type, delivery(type, entry));
    routes.add({
      method: 'get',
      path: '/webhooks/event-types',
      tag: 'webhooks',
      summary:
        'The catalog of event types, each with a description, the JSON Schema of its `data` and an example.',
      description:
        "The same schemas and examples as this document's `webhooks` (each `data` also under components.schemas as `<Type>Data`) and docs/webhooks.md. Test deliveries (`livemode` false) carry `{test, message}` as their `data` instead.",
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
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
                  required: ['type', 'description', 'schema', 'example'],
                  properties: {
                    type: { type: 'string', enum: Object.keys(EVENT_TYPES) },
                    description: { type: 'string', description: 'When the event fires.' },
                    schema: {
                      type: 'object',
                      description: "The JSON Schema (2020-12) of the type's `data`.",
                    },
                    example: { type: 'object', description: 'An example `data`, of that schema.' },
                  },
                },
              },
            },
          },
        },
      },
      handler: async (ctx) => {
        ctx.body = { items: CATALOGUE };
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/events',
      tag: 'webhooks',
      summary:
        "Your account's event log, newest first: every derived event, matched by a subscription or not.",
      description:
        'Events are kept for HUB_EVENT_LOG_RETENTION_DAYS (30 by default). `since` is inclusive, `until` exclusive; both compare with `created`.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      query: s.object({
        properties: {
          type: s.enum(Object.keys(EVENT_TYPES) as EventType[], { description: 'Only events of this type.' }),
          resource_prn: s.string({ maxLength: 256, description: 'Only events about this device PRN.' }),
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
      scopes: requireScope('webhooks', 'read'),
      responses: { 200: { description: 'The event.', schema: EVENT } },
      handler: async (ctx) => {
        const event = await hub.eventLog.get(ctx.state.auth!.sub, ctx.params.eid!);
        if (!event) throw notFound('No such event in your account.');
        ctx.body = publicEvent(event);
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/events/{eid}/deliveries',
      tag: 'webhooks',
      summary: 'Every delivery attempt of one event, across all subscriptions, oldest first.',
      description:
        'Paged like every list: an event redelivered or replayed again and again has as many attempts.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      query: s.object({ properties: PAGE_QUERY }),
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
      scopes: requireScope('webhooks', 'write'),
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
  };
}

/** A subscription's delivery log, and a test delivery to it. */
export function deliveryRoutes({ hub, owned }: WebhookRoutes) {
  const { enqueue, job } = queueing(hub);

  /** One attempt of the caller's subscription, or 404. */
  async function ownedAttempt(ctx: Context): Promise<{ sub: Subscription; attempt: AttemptRecord }> {
    const sub = await owned(ctx);
    const attempt = await hub.deliveries.attempt(ctx.params.did!);
    if (!attempt || attempt.subscription_id !== sub.id) throw notFound('No such delivery.');
    return { sub, attempt };
  }

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/webhooks/{id}/test',
      tag: 'webhooks',
      summary: 'Sends a synthetic event (livemode false) through the full signing and retry path.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      responses: { 202: { description: 'The job queued.', schema: QUEUED } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        ctx.status = 202;
        ctx.body = { jobs: await enqueue([job(sub, 'test', testEvent(sub, Date.now()))]) };
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/{id}/deliveries',
      tag: 'webhooks',
      summary: 'Every attempt of one subscription, newest first.',
      description:
        '`status`: `succeeded`, `failed` (every attempt that did not succeed, dead-lettered ones included) or `dead_lettered` (failed, no attempt follows).',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      query: s.object({
        properties: { status: s.enum(['succeeded', 'failed', 'dead_lettered']), ...PAGE_QUERY },
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
    });

    routes.add({
      method: 'get',
      path: '/webhooks/{id}/deliveries/{did}',
      tag: 'webhooks',
      summary: 'One attempt with the request sent and the response received (body cut at 4 KiB).',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
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
      scopes: requireScope('webhooks', 'write'),
      responses: { 202: { description: 'The job queued.', schema: QUEUED } },
      handler: async (ctx) => {
        const { sub, attempt: a } = await ownedAttempt(ctx);
        const event = await eventOfAttempt(hub.eventLog, sub.ownerPrn, a);
        ctx.status = 202;
        ctx.body = { jobs: await enqueue([job(sub, 'replay', event)]) };
      },
    });
  };
}

/** An attempt without its recorded request and response: the list view. */
const summary = ({ request: _q, response: _r, ...a }: AttemptRecord) => a;
