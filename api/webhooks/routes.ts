// /webhooks: the catalog of event types and the account-wide event log, its live stream
// (stream.ts), the subscriptions (subscriptions.ts), the delivery log with its operations
// (deliveries.ts: test, replay, redeliver) and bulk recovery (recoveries.ts). This file gives them
// what they share: the caller's subscription.
import type { Context } from 'koa';
import { type Subscription, subscriptions, webhookStream } from '../../domain/subscriptions.ts';
import { load } from '../../infra/eventstore/aggregate.ts';
import type { HubContext } from '../context.ts';
import { notFound } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { deliveryRoutes, eventLogRoutes } from './deliveries.ts';
import { recoveryRoutes } from './recoveries.ts';
import { eventStreamRoutes } from './stream.ts';
import { subscriptionRoutes } from './subscriptions.ts';

const WEBHOOK_ID = /^[a-f0-9]{24}$/;

/** What the routes of /webhooks share. */
export interface WebhookRoutes {
  hub: HubContext;
  /** The caller's subscription, or 404 (unknown, deleted, or another account's). */
  owned(ctx: Context): Promise<Subscription>;
}

export function webhookRoutes(hub: HubContext) {
  const shared: WebhookRoutes = {
    hub,
    async owned(ctx) {
      const id = ctx.params.id!;
      if (!WEBHOOK_ID.test(id)) throw notFound('No such subscription.');
      const { state } = await load(hub.store, webhookStream(id), subscriptions);
      if (!state.id || state.deleted || state.ownerPrn !== ctx.state.auth!.sub)
        throw notFound('No such subscription.');
      return state;
    },
  };
  const events = eventLogRoutes(shared);
  const stream = eventStreamRoutes(shared);
  const subs = subscriptionRoutes(shared);
  const deliveries = deliveryRoutes(shared);
  const recovery = recoveryRoutes(shared);
  // In this order: /webhooks/events and /webhooks/event-types before /webhooks/{id} takes them.
  return (routes: Routes) => {
    events(routes);
    stream(routes);
    subs(routes);
    deliveries(routes);
    recovery(routes);
  };
}
