// Webhook subscriptions for listing and for the stream processor's matching: each subscription's
// record (never its secret) and, per owner, an index by creation.
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const webhookKeys = {
  record: (id: string) => `webhook:${id}`,
  /** An owner's subscriptions, by creation. */
  ofOwner: (ownerPrn: string) => `webhooks-of:${ownerPrn}`,
};

export const webhookList: Projection = {
  name: 'webhooks',
  version: 1,
  description: "Every webhook subscription (no secret) and an index of each owner's subscriptions.",
  project(e: StoredEvent) {
    const at = new Date(e.created).toISOString();
    switch (e.type) {
      case 'WebhookCreated': {
        const { secret_sealed: _secret, webhook_id: id, ...fields } = e.data;
        const owner = fields.owner_prn;
        return [
          {
            op: 'set',
            key: webhookKeys.record(id),
            doc: { id, ...fields, owner, 'time-created': at, 'time-modified': at },
          },
          { op: 'zadd', key: webhookKeys.ofOwner(owner), member: id, score: e.position },
        ];
      }
      case 'WebhookUpdated': {
        const { webhook_id: id, ...fields } = e.data;
        return [
          {
            op: 'patch',
            key: webhookKeys.record(id),
            doc: { ...fields, owner: fields.owner_prn, 'time-modified': at },
          },
        ];
      }
      case 'WebhookAutoDisabled':
        // The processor's matching reads `enabled` here: no more jobs for it.
        return [
          {
            op: 'patch',
            key: webhookKeys.record(e.data.webhook_id),
            doc: { enabled: false, 'time-modified': at },
          },
        ];
      case 'WebhookDeleted':
        return [
          { op: 'del', key: webhookKeys.record(e.data.webhook_id) },
          { op: 'zrem', key: webhookKeys.ofOwner(e.data.owner_prn), member: e.data.webhook_id },
        ];
      default:
        return [];
    }
  },
};
