// Sends the emails that events ask for: account ones (verification, password reset) and the
// notice to a subscription's owner that the hub disabled it. The event store is the outbox: this
// follows it from a durable checkpoint, so an email is sent at least once for every request
// stored, also across crashes; requests that expired meanwhile are skipped.

import { accountStream, accounts } from '../../domain/accounts.ts';
import type { EventData } from '../../domain/events.ts';
import { subscriptions, webhookStream } from '../../domain/subscriptions.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import { load, nameOwner } from '../../infra/eventstore/aggregate.ts';
import type { EventStore, RecordedEvent, SubscribeOptions } from '../../infra/eventstore/port.ts';
import type { Mail, Mailer } from '../../infra/mail.ts';
import { emailedToken } from '../../infra/secrets.ts';
import type { Logger } from '../../infra/telemetry.ts';
import { EventFollower } from './follower.ts';

export interface MailerOptions {
  store: EventStore;
  checkpoints: CheckpointStore;
  mailer: Mailer;
  hmacKey: Buffer;
  publicUrl: () => string;
  logger: Logger;
  /** How it follows the store (batch size, linger). */
  follow?: SubscribeOptions;
}

export function mailFor(event: RecordedEvent, hmacKey: Buffer, publicUrl: string): Mail | undefined {
  const d = event.data as { account_id: string; email: string; nonce: string; expires: number };
  if (d.expires !== undefined && d.expires < Date.now()) return undefined;
  if (event.type === 'VerificationEmailRequested') {
    const link = `${publicUrl}/auth/verify?token=${emailedToken(hmacKey, 'verify', d.account_id, d.nonce)}`;
    return {
      to: d.email,
      subject: 'Verify your Device Hub account',
      text: `Welcome to Device Hub.\n\nOpen this link to verify your email address and activate your account:\n\n${link}\n\nThe link expires in 48 hours. If you did not register, ignore this email.\n`,
    };
  }
  if (event.type === 'PasswordResetRequested') {
    const token = emailedToken(hmacKey, 'reset', d.account_id, d.nonce);
    return {
      to: d.email,
      subject: 'Reset your Device Hub password',
      text: `Someone asked to reset the password of your Device Hub account.\n\nTo choose a new one, POST it with this token to ${publicUrl}/auth/password:\n\n  {"token": "${token}", "password": "<new password>"}\n\nor open ${publicUrl}/auth/reset?token=${token}\n\nThe token works once and expires in one hour. If it was not you, ignore this email.\n`,
    };
  }
  return undefined;
}

/** The notice of a subscription the hub disabled, to its owner's email as the account has it now
 * (none for an account gone). The URL shows without its query or credentials: they may be secret. */
export async function disabledMail(
  store: EventStore,
  event: RecordedEvent,
  publicUrl: string,
): Promise<Mail | undefined> {
  if (event.type !== 'WebhookAutoDisabled') return undefined;
  const d = event.data as EventData['WebhookAutoDisabled'];
  const accountId = await nameOwner(store, 'prn', d.owner_prn);
  const owner = accountId ? (await load(store, accountStream(accountId), accounts)).state : undefined;
  if (!owner?.email) return undefined;
  const sub = (await load(store, webhookStream(d.webhook_id), subscriptions)).state;
  let shown = '';
  try {
    const url = new URL(sub.url);
    shown = `${url.protocol}//${url.host}${url.pathname}`;
  } catch {}
  const iso = (ms: number | null) => (ms === null ? 'never' : new Date(ms).toISOString());
  return {
    to: owner.email,
    subject: `Device Hub disabled your webhook subscription ${sub.nick || d.webhook_id}`,
    text: `Every delivery attempt to your webhook subscription "${sub.nick}" (${d.webhook_id}) at ${shown} has failed since ${iso(d.failing_since)} (last success: ${iso(d.last_success)}), so Device Hub has disabled it: no more events are delivered to it.\n\nIts delivery log shows what the endpoint answered:\n\n  GET ${publicUrl}/webhooks/${d.webhook_id}/deliveries?status=failed\n\nOnce the endpoint works again, enable the subscription:\n\n  PATCH ${publicUrl}/webhooks/${d.webhook_id}\n  {"enabled": true}\n`,
  };
}

/** The mailer: an event follower that sends the emails events ask for. */
export function mailProcessor(o: MailerOptions): EventFollower {
  return new EventFollower({
    name: 'mailer',
    ...o.follow,
    store: o.store,
    checkpoints: o.checkpoints,
    logger: o.logger,
    handle: async (batch) => {
      for (const event of batch) {
        const mail =
          mailFor(event, o.hmacKey, o.publicUrl()) ?? (await disabledMail(o.store, event, o.publicUrl()));
        if (mail) await o.mailer.send(mail);
      }
    },
  });
}
