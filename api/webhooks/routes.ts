// /webhooks: the catalog of event types and the account-wide event log. (Subscriptions and
// deliveries are served here too once the dispatcher lands.)

import { EVENT_TYPES, type EventType, type WebhookEvent } from '../../processors/derive.ts';
import { authenticate, requireScope } from '../auth/middleware.ts';
import { type HubContext, PAGE_QUERY, pageSchema } from '../context.ts';
import { notFound, unprocessable } from '../errors.ts';
import { type Routes, schema } from '../routes.ts';

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
  const ms =
    /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/i.test(raw) &&
    Date.parse(raw.replace(/(\.\d{3})\d+/, '$1'));
  if (!ms && ms !== 0) {
    throw unprocessable(`${name} must be an RFC 3339 timestamp or Unix seconds.`, [
      { field: name, problem: 'not an RFC 3339 timestamp or Unix seconds' },
    ]);
  }
  return ms;
}

const publicEvent = ({ source_position: _p, sequence: _s, ...e }: WebhookEvent) => e;

export function webhookRoutes(hub: HubContext) {
  const auth = authenticate(hub.keys);
  const read = [auth, requireScope('webhooks', 'read')];

  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/webhooks/event-types',
      tag: 'webhooks',
      summary: 'The catalog of event types, each with a description.',
      security: 'bearer',
      scopes: ['webhooks.readonly'],
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
      scopes: ['webhooks.readonly'],
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
      scopes: ['webhooks.readonly'],
      middleware: read,
      responses: { 200: { description: 'The event.', schema: EVENT } },
      handler: async (ctx) => {
        const event = await hub.eventLog.get(ctx.state.auth!.sub, ctx.params.eid!);
        if (!event) throw notFound('No such event in your account.');
        ctx.body = publicEvent(event);
      },
    });
  };
}
