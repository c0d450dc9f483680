// Webhook subscriptions for listing and for the stream processor's matching: each subscription's
// record (never its secret) and, per owner, an index by creation.
import type { Projection } from './runner.ts';

export const webhookList: Projection = {
  name: 'webhooks',
  version: 1,
  description: "Every webhook subscription (no secret) and an index of each owner's subscriptions.",
  project(e) {
    if (!e.type.startsWith('Webhook')) return [];
    const { secret_sealed: _secret, webhook_id: id, ...fields } = e.data as Record<string, unknown>;
    const key = `webhook:${id}`;
    const owner = fields.owner_prn as string;
    const at = new Date(e.created).toISOString();
    switch (e.type) {
      case 'WebhookCreated':
        return [
          {
            op: 'set',
            key,
            doc: { id, ...fields, owner, 'time-created': at, 'time-modified': at },
          },
          { op: 'zadd', key: `webhooks-of:${owner}`, member: id as string, score: e.position },
        ];
      case 'WebhookUpdated':
        return [{ op: 'patch', key, doc: { ...fields, owner, 'time-modified': at } }];
      case 'WebhookDeleted':
        return [
          { op: 'del', key },
          { op: 'zrem', key: `webhooks-of:${owner}`, member: id as string },
        ];
      default:
        return [];
    }
  },
};
