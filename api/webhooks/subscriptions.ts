// /webhooks subscriptions: list, create, read, replace, patch (pause and resume too), delete and
// rotate the signing secret. Each write checks a new URL against the egress rules (it resolves
// names), then runs a decision of domain/subscriptions.ts. Every answer shows the subscription's
// endpoint health, as the delivery store keeps it.
import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import type { DomainEvent } from '../../domain/events.ts';
import {
  decideCreate,
  decideDelete,
  decidePatch,
  decideReplace,
  decideRotateSecret,
  RATE_LIMIT_BOUNDS,
  type Subscription,
  subscriptions,
  webhookStream,
} from '../../domain/subscriptions.ts';
import { load } from '../../infra/eventstore/aggregate.ts';
import { seal } from '../../infra/secrets.ts';
import { Egress, EgressError } from '../../processors/delivery/egress.ts';
import { circuitOf, type EndpointHealth } from '../../processors/delivery/health.ts';
import { newSigningSecret } from '../../processors/delivery/signing.ts';
import { EVENT_TYPES } from '../../processors/stream/derive.ts';
import { webhookKeys } from '../../projections/webhooks.ts';
import { requireScope } from '../auth/middleware.ts';
import { grants } from '../auth/tokens.ts';
import { decideOn, PAGE_QUERY, pageSchema } from '../context.ts';
import { NOT_PROTO, type Routes } from '../routes.ts';
import { s } from '../schema.ts';
import type { WebhookRoutes } from './routes.ts';

const KEY = s.string({ minLength: 1, maxLength: 128 });
const FIELDS = {
  nick: s.string({ minLength: 1, maxLength: 128, description: 'Label of the subscription.' }),
  url: s.string({
    maxLength: 2048,
    description: 'HTTPS endpoint; must resolve to public addresses only (checked again at every attempt).',
  }),
  description: s.string({ maxLength: 1024 }),
  event_types: s.array({
    minItems: 1,
    maxItems: 9,
    uniqueItems: true,
    items: s.enum(Object.keys(EVENT_TYPES)),
  }),
  enabled: s.boolean({ description: 'false pauses deliveries without deleting.' }),
  devices: s.array({
    maxItems: 1000,
    items: s.string({ pattern: '^prn:::devices:/[a-f0-9]{24}$' }),
    description: 'Device PRNs; empty: every device of the account.',
  }),
  user_meta_keys: s.array({ maxItems: 100, items: KEY }),
  device_meta_keys: s.array({ maxItems: 100, items: KEY }),
  custom_headers: s.map({
    maxProperties: 20,
    propertyNames: { ...NOT_PROTO, pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$" },
    // Visible Latin-1 and tabs only: what HTTP/1.1 (and undici) can send as a header value.
    additionalProperties: s.string({ maxLength: 1024, pattern: '^[\\t\\x20-\\x7e\\x80-\\xff]*$' }),
    description:
      'Header name → value, sent with every delivery. Webhook-*, Content-Type, User-Agent, Host and other framing headers are refused. Read-only tokens see each value as [redacted].',
  }),
  retry_policy: s.nullable(
    s.object({
      additionalProperties: false,
      required: ['max_attempts', 'delays_s'],
      properties: {
        max_attempts: s.integer({
          minimum: 1,
          maximum: 20,
          description: 'Attempts in all, the first included.',
        }),
        delays_s: s.array({
          maxItems: 19,
          items: s.integer({ minimum: 1, maximum: 86_400 }),
          description: 'Seconds before each retry; the last repeats when shorter than max_attempts - 1.',
        }),
      },
      // A retry needs a delay: at least one whenever there is more than one attempt.
      if: { properties: { max_attempts: { minimum: 2 } } },
      // biome-ignore lint/suspicious/noThenProperty: JSON Schema's if/then; an object, never awaited (not callable, so not a thenable)
      then: { properties: { delays_s: { minItems: 1 } } },
      description: 'null: the default, 8 attempts with retries after 60, 120, 240, 480, 960, 1920, 3840 s.',
    }),
  ),
  rate_limit: s.nullable(
    s.integer({
      minimum: RATE_LIMIT_BOUNDS[0],
      maximum: RATE_LIMIT_BOUNDS[1],
      description:
        'Deliveries per second at most, across every dispatcher; jobs beyond it wait in the schedule. null (the default): unlimited.',
    }),
  ),
};
const SUBSCRIPTION_BODY = s.object({
  additionalProperties: false,
  required: ['nick', 'url', 'event_types', 'enabled'],
  properties: FIELDS,
});
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
    disabled_reason: {
      type: ['string', 'null'],
      enum: ['endpoint_failing', null],
      description:
        'Why the hub disabled it (`enabled` false): `endpoint_failing`, every attempt failed for the failure period (HUB_WEBHOOK_DISABLE_AFTER_S, 5 days by default). null while enabled or paused by its owner; PATCH {"enabled": true} clears it.',
    },
    health: {
      type: 'object',
      description:
        'Endpoint health: what its delivery attempts came to lately (docs/webhooks.md, Endpoint health).',
      properties: {
        circuit: {
          type: 'string',
          enum: ['closed', 'open', 'half_open'],
          description:
            'closed: delivered as usual; open: failing, its deliveries wait for the next probe; half_open: a probe is due or under way (one attempt at a time).',
        },
        consecutive_failures: { type: 'integer', description: 'Attempts failed since the last success.' },
        failing_since: {
          type: ['string', 'null'],
          description: 'When the first of those failed; null when the last attempt succeeded.',
        },
        last_success_at: { type: ['string', 'null'], description: 'When an attempt last succeeded.' },
        last_failure_at: { type: ['string', 'null'], description: 'When an attempt last failed.' },
        next_probe_at: {
          type: ['string', 'null'],
          description: 'While the circuit is open: when its next attempt (the probe) is due.',
        },
      },
    },
  },
};

/** The endpoint health as the API shows it, at `now`. */
export function healthRecord(h: EndpointHealth, s: Subscription, now = Date.now()) {
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  const { state, probeAt } = circuitOf(h, now, s.enabledAt);
  return {
    circuit: state,
    consecutive_failures: h.consecutiveFailures,
    failing_since: iso(h.failingSince),
    last_success_at: iso(h.lastSuccess),
    last_failure_at: iso(h.lastFailure),
    next_probe_at: state === 'closed' ? null : iso(probeAt),
  };
}

/** What the API shows; the signing secret only when just generated. */
export function subscriptionRecord(s: Subscription, secret?: string) {
  return {
    id: s.id,
    owner: s.ownerPrn,
    nick: s.nick,
    url: s.url,
    description: s.description,
    event_types: s.event_types,
    enabled: s.enabled,
    devices: s.devices,
    user_meta_keys: s.user_meta_keys,
    device_meta_keys: s.device_meta_keys,
    custom_headers: s.custom_headers,
    retry_policy: s.retry_policy,
    rate_limit: s.rate_limit,
    'time-created': new Date(s.created).toISOString(),
    'time-modified': new Date(s.modified).toISOString(),
    disabled_reason: s.disabledReason || null,
    ...(secret ? { secret } : {}),
  };
}

/**
 * Custom header values are as often as not the receiver's credentials (`Authorization: Bearer …`):
 * a token that may change the subscription sees them, a read-only one (a delegated reader, an app)
 * sees each value as REDACTED, in the subscription and in the recorded requests alike (where every
 * header but the protocol's own is masked: custom headers may have been renamed since).
 */
export const REDACTED = '[redacted]';
export const mayWrite = (ctx: Context) => grants(ctx.state.auth!.scopes, 'webhooks', 'write');
export const masked = (headers: Record<string, string>, keep: (name: string) => boolean) =>
  Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, keep(k.toLowerCase()) ? v : REDACTED]));

function subscriptionFor(ctx: Context, sub: Subscription, health: EndpointHealth) {
  const record = { ...subscriptionRecord(sub), health: healthRecord(health, sub) };
  return mayWrite(ctx) ? record : { ...record, custom_headers: masked(record.custom_headers, () => false) };
}

export function subscriptionRoutes({ hub, owned }: WebhookRoutes) {
  const egress = new Egress({
    allowHttp: hub.config.webhookAllowHttp,
    allowNetworks: hub.config.webhookAllowNetworks,
  });

  /** Why the egress refuses a URL, or nothing; a URL the subscription keeps (`kept`) is not
   * checked again (domain/subscriptions.ts says why). */
  async function urlProblem(url: string | undefined, kept?: string): Promise<string | undefined> {
    if (url === undefined || url === kept) return undefined;
    try {
      await egress.checkReachable(url);
      return undefined;
    } catch (err) {
      if (!(err instanceof EgressError)) throw err;
      return err.message;
    }
  }

  /** A subscription as a write answers it: its record (and secret, when just made) with its health. */
  const shown = async (sub: Subscription, secret?: string) => {
    const [health] = await hub.deliveries.health([sub.id]);
    return { ...subscriptionRecord(sub, secret), health: healthRecord(health!, sub) };
  };

  /** Decides on the subscription's state as the append finds it, and answers the state after it. */
  const update = (ctx: Context, id: string, decide: (s: Subscription) => DomainEvent[]) =>
    decideOn(hub, ctx, webhookStream(id), subscriptions, decide);

  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/webhooks/',
      tag: 'webhooks',
      summary: 'Your subscriptions, newest first (no secrets).',
      waitsForWrites: true,
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      query: s.object({ properties: PAGE_QUERY }),
      responses: { 200: { description: 'A page of subscriptions.', schema: pageSchema(SUBSCRIPTION) } },
      handler: async (ctx, { query: q }) => {
        await hub.consistency.readable(ctx, ['webhooks']);
        const rs = hub.readStore;
        const g = await rs.activeGeneration('webhooks');
        const key = webhookKeys.ofOwner(ctx.state.auth!.sub);
        const [ids, total] = await Promise.all([
          rs.range('webhooks', g, key, { reverse: true, offset: q.skip, limit: q.limit }),
          rs.count('webhooks', g, key),
        ]);
        const [subs, health] = await Promise.all([
          Promise.all(ids.map(async (id) => (await load(hub.store, webhookStream(id), subscriptions)).state)),
          hub.deliveries.health(ids),
        ]);
        const items = subs.map((sub, i) => subscriptionFor(ctx, sub, health[i]!));
        ctx.body = { items, total, limit: q.limit, skip: q.skip };
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/',
      tag: 'webhooks',
      summary:
        'Create a subscription; the answer carries its signing secret (shown only here and on rotation).',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      body: SUBSCRIPTION_BODY,
      responses: { 201: { description: 'The subscription, with `secret`.', schema: SUBSCRIPTION } },
      handler: async (ctx, { body }) => {
        const problem = await urlProblem(body.url);
        const id = randomBytes(12).toString('hex');
        const secret = newSigningSecret();
        const command = {
          id,
          ownerPrn: ctx.state.auth!.sub,
          fields: body,
          urlProblem: problem,
          secretSealed: seal(hub.keys.sealKey, secret),
        };
        const created = await update(ctx, id, (s) => decideCreate(command, s));
        ctx.status = 201;
        ctx.body = await shown(created, secret);
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'One subscription (no secret).',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        ctx.body = subscriptionFor(ctx, sub, (await hub.deliveries.health([sub.id]))[0]!);
      },
    });

    routes.add({
      method: 'put',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Replace a subscription wholesale (fields left out take their defaults).',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      body: SUBSCRIPTION_BODY,
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      authorize: owned,
      handler: async (ctx, { body, allowed: sub }) => {
        const command = { fields: body, urlProblem: await urlProblem(body.url, sub.url) };
        ctx.body = await shown(await update(ctx, sub.id, (s) => decideReplace(command, s)));
      },
    });

    routes.add({
      method: 'patch',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Merge the fields sent into the subscription.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      body: s.object({ additionalProperties: false, minProperties: 1, properties: FIELDS }),
      responses: { 200: { description: 'The subscription.', schema: SUBSCRIPTION } },
      authorize: owned,
      handler: async (ctx, { body, allowed: sub }) => {
        // Merged into the state the append finds, not the one read before the URL was checked.
        const command = { fields: body, urlProblem: await urlProblem(body.url, sub.url) };
        ctx.body = await shown(await update(ctx, sub.id, (s) => decidePatch(command, s)));
      },
    });

    routes.add({
      method: 'delete',
      path: '/webhooks/{id}',
      tag: 'webhooks',
      summary: 'Delete a subscription: its deliveries stop at once, scheduled retries included.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      responses: { 204: { description: 'Deleted.' } },
      handler: async (ctx) => {
        await update(ctx, (await owned(ctx)).id, decideDelete);
        ctx.status = 204;
      },
    });

    routes.add({
      method: 'post',
      path: '/webhooks/{id}/rotate-secret',
      tag: 'webhooks',
      summary: 'A new signing secret; the previous one keeps signing beside it until the next rotation.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      responses: { 200: { description: 'The subscription, with the new `secret`.', schema: SUBSCRIPTION } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        const secret = newSigningSecret();
        const command = { secretSealed: seal(hub.keys.sealKey, secret) };
        const rotated = await update(ctx, sub.id, (s) => decideRotateSecret(command, s));
        ctx.body = await shown(rotated, secret);
      },
    });
  };
}
