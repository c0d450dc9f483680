// The bulk recovery aggregate (stream recovery-<id>): a request to resend a subscription's failed
// deliveries of a window, and once they are selected and queued (processors/delivery/recovery.ts),
// how many. Its id is its window's: the same subscription and window is the same recovery, so a
// request repeated (a retried POST, a double click) finds it and sends nothing more. Pure.
import { createHash } from 'node:crypto';
import { refuse } from './errors.ts';
import type { DomainEvent, FoldedEvent } from './events.ts';

export interface Recovery {
  id: string;
  webhookId: string;
  ownerPrn: string;
  /** The window, ms: `since` inclusive, `until` exclusive. */
  since: number;
  until: number;
  /** When it was asked for, ms. */
  requested: number;
  /** The deliveries queued; null until they are. */
  total: number | null;
  /** When they were queued, ms (0: not yet). */
  queued: number;
}

export const recoveryStream = (id: string) => `recovery-${id}`;

/** The recovery of a subscription's window: `until` absent (up to the request) is a window of its
 * own, so that repeating a request without one finds the first. */
export function recoveryId(webhookId: string, since: number, until: number | undefined): string {
  const window = `${webhookId}\n${since}\n${until ?? 'open'}`;
  return `rcv_${createHash('sha256').update(window).digest('hex').slice(0, 24)}`;
}

export const recoveries = {
  initial: (): Recovery => ({
    id: '',
    webhookId: '',
    ownerPrn: '',
    since: 0,
    until: 0,
    requested: 0,
    total: null,
    queued: 0,
  }),
  evolve(s: Recovery, e: FoldedEvent): Recovery {
    switch (e.type) {
      case 'WebhookRecoveryRequested':
        return {
          ...s,
          id: e.data.recovery_id,
          webhookId: e.data.webhook_id,
          ownerPrn: e.data.owner_prn,
          since: e.data.since_ms,
          until: e.data.until_ms,
          requested: e.created,
        };
      case 'WebhookRecoveryQueued':
        return { ...s, total: e.data.total, queued: e.created };
      default:
        return s;
    }
  },
};

export interface RequestRecovery {
  webhookId: string;
  ownerPrn: string;
  since: number;
  /** Absent: up to `now`. */
  until?: number | undefined;
  now: number;
}

/** Request (the subscription's owner): a window that ends after it starts, not in the future. The
 * same window again is the recovery asked for before: nothing new. */
export function decideRequest(c: RequestRecovery, s: Recovery): DomainEvent<'WebhookRecoveryRequested'>[] {
  if (s.id) return [];
  const until = c.until ?? c.now;
  if (until > c.now)
    throw refuse.invalid('until may not be in the future.', [{ field: 'until', problem: 'in the future' }]);
  if (c.since >= until)
    throw refuse.invalid('since must be before until.', [{ field: 'since', problem: 'not before until' }]);
  return [
    {
      type: 'WebhookRecoveryRequested',
      data: {
        recovery_id: recoveryId(c.webhookId, c.since, c.until),
        webhook_id: c.webhookId,
        owner_prn: c.ownerPrn,
        since_ms: c.since,
        until_ms: until,
      },
    },
  ];
}

/** Its deliveries are queued: recorded once (a selection run again after a crash adds nothing). */
export function decideQueued(c: { total: number }, s: Recovery): DomainEvent<'WebhookRecoveryQueued'>[] {
  if (!s.id) throw refuse.notFound('No such recovery.');
  if (s.total !== null) return [];
  return [
    {
      type: 'WebhookRecoveryQueued',
      data: { recovery_id: s.id, webhook_id: s.webhookId, owner_prn: s.ownerPrn, total: c.total },
    },
  ];
}
