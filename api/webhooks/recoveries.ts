// Bulk recovery: resend every delivery of a subscription that failed in a window, and read how far
// it has got. The request is recorded at once (domain/recoveries.ts); the projector's follower
// selects and queues the deliveries (processors/delivery/recovery.ts).
import {
  decideRequest,
  type Recovery,
  recoveries,
  recoveryId,
  recoveryStream,
} from '../../domain/recoveries.ts';
import { load } from '../../infra/eventstore/aggregate.ts';
import { recoveryProgress } from '../../processors/delivery/recovery.ts';
import { requireScope } from '../auth/middleware.ts';
import { decideOn } from '../context.ts';
import { notFound } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { parseTime } from './deliveries.ts';
import type { WebhookRoutes } from './routes.ts';

const TIME = 'RFC 3339 timestamp (e.g. `2026-11-21T10:00:00Z`) or Unix seconds.';
const RECOVERY = {
  type: 'object',
  properties: {
    id: { type: 'string', description: '`rcv_<id>`: the same for the same subscription and window.' },
    subscription_id: { type: 'string' },
    since: { type: 'string', format: 'date-time' },
    until: {
      type: 'string',
      format: 'date-time',
      description: 'The time of the first request when none was sent.',
    },
    status: {
      enum: ['selecting', 'sending', 'done'],
      description:
        '`selecting`: the deliveries are being chosen; `sending`: queued, some not finished; `done`: each succeeded or was dead-lettered.',
    },
    total: { type: ['integer', 'null'], description: 'Deliveries queued; null while selecting.' },
    sent: { type: 'integer', description: 'Of them, attempted at least once.' },
    succeeded: { type: 'integer' },
    dead_lettered: { type: 'integer' },
    pending: { type: ['integer', 'null'], description: 'total - succeeded - dead_lettered.' },
    'time-created': { type: 'string', format: 'date-time' },
  },
};

export function recoveryRoutes({ hub, owned }: WebhookRoutes) {
  async function view(r: Recovery) {
    const p = await recoveryProgress(hub.deliveries, r);
    return {
      id: r.id,
      subscription_id: r.webhookId,
      since: new Date(r.since).toISOString(),
      until: new Date(r.until).toISOString(),
      ...p,
      pending: p.total === null ? null : p.total - p.succeeded - p.dead_lettered,
      'time-created': new Date(r.requested).toISOString(),
    };
  }

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/webhooks/{id}/recover',
      tag: 'webhooks',
      summary:
        'Resends every delivery of this subscription that failed in a window and has not succeeded since.',
      description:
        'Answers at once; the deliveries are queued as new attempts of kind `recover`, through the schedule (the in-flight and rate limits hold). `since` inclusive, `until` exclusive (default: now), compared with the failed attempts’ start. Idempotent: the same subscription and window (`until` left out is a window of its own) is the same recovery, answered again and sent once.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'write'),
      body: s.object({
        additionalProperties: false,
        required: ['since'],
        properties: {
          since: s.string({ minLength: 1, maxLength: 64, description: TIME }),
          until: s.string({ minLength: 1, maxLength: 64, description: `${TIME} Default: now.` }),
        },
      }),
      responses: { 202: { description: 'The recovery, new or asked for before.', schema: RECOVERY } },
      authorize: owned,
      handler: async (ctx, { body, allowed: sub }) => {
        const since = parseTime('since', body.since)!;
        const until = parseTime('until', body.until);
        const command = { webhookId: sub.id, ownerPrn: sub.ownerPrn, since, until, now: Date.now() };
        const id = recoveryId(sub.id, since, until);
        const recovery = await decideOn(hub, ctx, recoveryStream(id), recoveries, (r) =>
          decideRequest(command, r),
        );
        ctx.status = 202;
        ctx.set('Location', `/webhooks/${sub.id}/recoveries/${id}`);
        ctx.body = await view(recovery);
      },
    });

    routes.add({
      method: 'get',
      path: '/webhooks/{id}/recoveries/{rid}',
      tag: 'webhooks',
      summary: 'A recovery’s progress: its deliveries queued, attempted, succeeded and dead-lettered.',
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      responses: { 200: { description: 'The recovery.', schema: RECOVERY } },
      handler: async (ctx) => {
        const sub = await owned(ctx);
        const rid = ctx.params.rid!;
        if (!/^rcv_[a-f0-9]{24}$/.test(rid)) throw notFound('No such recovery.');
        const { state } = await load(hub.store, recoveryStream(rid), recoveries);
        if (!state.id || state.webhookId !== sub.id) throw notFound('No such recovery.');
        ctx.body = await view(state);
      },
    });
  };
}
