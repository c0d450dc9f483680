// Webhook subscriptions for listing and for the stream processor's matching: each subscription's
// record (never its secret) and, per owner, an index by creation.
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Projection } from './runner.ts';

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
            key: `webhook:${id}`,
            doc: { id, ...fields, owner, 'time-created': at, 'time-modified': at },
          },
          { op: 'zadd', key: `webhooks-of:${owner}`, member: id, score: e.position },
        ];
      }
      case 'WebhookUpdated': {
        const { webhook_id: id, ...fields } = e.data;
        return [
          {
            op: 'patch',
            key: `webhook:${id}`,
            doc: { ...fields, owner: fields.owner_prn, 'time-modified': at },
          },
        ];
      }
      case 'WebhookDeleted':
        return [
          { op: 'del', key: `webhook:${e.data.webhook_id}` },
          { op: 'zrem', key: `webhooks-of:${e.data.owner_prn}`, member: e.data.webhook_id },
        ];
      default:
        return [];
    }
  },
};
