// The webhook subscription aggregate (stream webhook-<id>): its state folded from its events, the
// rules of its fields and of its retries, and a named decision per command. Pure: no I/O, no HTTP
// (the URL's reachability is the egress's to check, before deciding); a refusal is a DomainError.
import { refuse } from './errors.ts';
import type { DomainEvent, EventData, FoldedEvent, RetryPolicy } from './events.ts';

export type { RetryPolicy };

/** The specification's schedule: 8 attempts, retries after 60 s doubling to 3,840 s. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  max_attempts: 8,
  delays_s: [60, 120, 240, 480, 960, 1920, 3840],
};

/** What a client sets of a subscription: every field a WebhookUpdated records. */
export type SubscriptionFields = Omit<EventData['WebhookUpdated'], 'webhook_id' | 'owner_prn'>;

export interface Subscription extends SubscriptionFields {
  id: string;
  ownerPrn: string;
  secretSealed: string;
  /** Signs beside the new secret until the rotation window ends or the next rotation ('' when none). */
  previousSealed: string;
  /** When the secret was last rotated (0: never). */
  rotated: number;
  /** Why the hub disabled it (WebhookAutoDisabled): '' while enabled, or paused by its owner. */
  disabledReason: string;
  /** When it was last enabled (created enabled, or enabled again), ms; 0 while never. A failure
   * period, and the circuit's wait for its next probe, count from here at the earliest. */
  enabledAt: number;
  deleted: boolean;
  created: number;
  modified: number;
}

export const webhookStream = (id: string) => `webhook-${id}`;

export const subscriptions = {
  snapshot: { kind: 'webhook', shape: 2 },
  initial: (): Subscription => ({
    id: '',
    ownerPrn: '',
    ...subscriptionFields({}),
    enabled: false,
    secretSealed: '',
    previousSealed: '',
    rotated: 0,
    disabledReason: '',
    enabledAt: 0,
    deleted: false,
    created: 0,
    modified: 0,
  }),
  /** Folds one event of the subscription's stream; any other leaves the state as it is. */
  evolve(s: Subscription, e: FoldedEvent): Subscription {
    switch (e.type) {
      case 'WebhookCreated':
        return {
          ...s,
          ...subscriptionFields(e.data),
          id: e.data.webhook_id,
          ownerPrn: e.data.owner_prn,
          secretSealed: e.data.secret_sealed,
          enabledAt: e.data.enabled ? e.created : 0,
          created: e.created,
          modified: e.created,
        };
      case 'WebhookUpdated':
        return {
          ...s,
          ...subscriptionFields(e.data),
          ...enabling(s, e.data.enabled, e.created),
          modified: e.created,
        };
      case 'WebhookAutoDisabled':
        return { ...s, enabled: false, disabledReason: e.data.reason, modified: e.created };
      case 'WebhookSecretRotated':
        return {
          ...s,
          secretSealed: e.data.secret_sealed,
          previousSealed: e.data.previous_sealed,
          rotated: e.created,
          modified: e.created,
        };
      case 'WebhookDeleted':
        return { ...s, deleted: true, enabled: false, modified: e.created };
      default:
        return s;
    }
  },
};

/** What an update's `enabled` changes beside the flag: enabled (again), the hub's reason for
 * disabling it is cleared and the failure period starts over. */
function enabling(s: Subscription, enabled: boolean, at: number): Partial<Subscription> {
  if (!enabled) return {};
  return { disabledReason: '', enabledAt: s.enabled ? s.enabledAt : at };
}

/**
 * The fields of a subscription: those `sent`, the others `base`'s (a PATCH merges into the
 * subscription), or without a base their defaults (a creation, a PUT: enabled, no filters, the
 * default retry policy, no rate limit). Picks the fields alone out of an event's data or a state.
 */
export function subscriptionFields(
  sent: Partial<SubscriptionFields>,
  base?: SubscriptionFields,
): SubscriptionFields {
  return {
    nick: sent.nick ?? base?.nick ?? '',
    url: sent.url ?? base?.url ?? '',
    description: sent.description ?? base?.description ?? '',
    event_types: sent.event_types ?? base?.event_types ?? [],
    enabled: sent.enabled ?? base?.enabled ?? true,
    devices: sent.devices ?? base?.devices ?? [],
    user_meta_keys: sent.user_meta_keys ?? base?.user_meta_keys ?? [],
    device_meta_keys: sent.device_meta_keys ?? base?.device_meta_keys ?? [],
    custom_headers: sent.custom_headers ?? base?.custom_headers ?? {},
    retry_policy: sent.retry_policy === undefined ? (base?.retry_policy ?? null) : sent.retry_policy,
    rate_limit: sent.rate_limit === undefined ? (base?.rate_limit ?? null) : sent.rate_limit,
  };
}

/** The bounds of `rate_limit`, deliveries per second (null: unlimited). */
export const RATE_LIMIT_BOUNDS = [1, 10_000] as const;

/** When attempt `n` (1-based) has failed: the delay before the next one, or null when spent. */
export function nextDelayS(policy: RetryPolicy | null, attempt: number): number | null {
  const p = policy ?? DEFAULT_RETRY_POLICY;
  if (attempt >= p.max_attempts) return null;
  return p.delays_s[Math.min(attempt - 1, p.delays_s.length - 1)] ?? null;
}

// ---------------------------------------------------------------- decisions

/** Headers the dispatcher sets itself, or that would change how the request is framed. */
const RESERVED =
  /^(webhook-.*|content-type|content-length|content-encoding|transfer-encoding|user-agent|host|connection|keep-alive|upgrade|te|trailer|expect|proxy-.*)$/i;

/**
 * The fields' problems that the published JSON Schema does not express, the URL's first when the
 * egress refused it (`urlProblem`): one refusal naming each, the first in its message.
 */
function refuseProblems(f: SubscriptionFields, urlProblem: string | undefined): void {
  const problems: [string, string][] = urlProblem ? [['url', urlProblem]] : [];
  for (const name of Object.keys(f.custom_headers)) {
    if (RESERVED.test(name)) problems.push([`custom_headers.${name}`, 'is a reserved header name']);
  }
  const [first] = problems;
  if (first)
    throw refuse.invalid(
      `${first[0]} ${first[1]}.`,
      problems.map(([field, problem]) => ({ field, problem })),
    );
}

/** Every command but a creation is on a subscription that exists and is not deleted. */
function refuseGone(s: Subscription): void {
  if (!s.id || s.deleted) throw refuse.notFound('No such subscription.');
}

/** What the egress said of a new URL, found before deciding (it resolves names): why it may not
 * be called, or nothing. A URL kept is not checked again: it was when it was set, and every
 * delivery checks it anew, so a subscription whose receiver stopped resolving can be edited. */
interface UrlChecked {
  urlProblem?: string | undefined;
}

export interface CreateSubscription extends UrlChecked {
  id: string;
  ownerPrn: string;
  /** The fields sent; the others take their defaults. */
  fields: Partial<SubscriptionFields>;
  /** The signing secret, sealed (AES-256-GCM; the key never leaves the server). */
  secretSealed: string;
}

/** Create (the owner): the stream is new. */
export function decideCreate(c: CreateSubscription, s: Subscription): DomainEvent<'WebhookCreated'>[] {
  if (s.id) throw refuse.conflict('The subscription exists already.');
  const fields = subscriptionFields(c.fields);
  refuseProblems(fields, c.urlProblem);
  return [
    {
      type: 'WebhookCreated',
      data: { webhook_id: c.id, owner_prn: c.ownerPrn, ...fields, secret_sealed: c.secretSealed },
    },
  ];
}

export interface ReplaceSubscription extends UrlChecked {
  /** The fields sent; the others take their defaults. */
  fields: Partial<SubscriptionFields>;
}

/** Replace wholesale (PUT): every field as sent or its default. */
export function decideReplace(c: ReplaceSubscription, s: Subscription): DomainEvent<'WebhookUpdated'>[] {
  refuseGone(s);
  return updated(s, subscriptionFields(c.fields), c.urlProblem);
}

export interface PatchSubscription extends UrlChecked {
  /** The fields to change; pausing and resuming is `enabled`. */
  fields: Partial<SubscriptionFields>;
}

/** Merge the fields sent (PATCH) into the subscription as it is now: two concurrent patches of
 * different fields both hold. */
export function decidePatch(c: PatchSubscription, s: Subscription): DomainEvent<'WebhookUpdated'>[] {
  refuseGone(s);
  return updated(s, subscriptionFields(c.fields, s), c.urlProblem);
}

function updated(
  s: Subscription,
  fields: SubscriptionFields,
  urlProblem: string | undefined,
): DomainEvent<'WebhookUpdated'>[] {
  refuseProblems(fields, urlProblem);
  return [{ type: 'WebhookUpdated', data: { webhook_id: s.id, owner_prn: s.ownerPrn, ...fields } }];
}

/** Delete (the owner): its deliveries stop. Deleting again changes nothing. */
export function decideDelete(s: Subscription): DomainEvent<'WebhookDeleted'>[] {
  if (!s.id) throw refuse.notFound('No such subscription.');
  if (s.deleted) return [];
  return [{ type: 'WebhookDeleted', data: { webhook_id: s.id, owner_prn: s.ownerPrn } }];
}

export interface RotateSigningSecret {
  /** The new secret, sealed. */
  secretSealed: string;
}

/** A new signing secret: the current one becomes the previous, which keeps signing beside it
 * until the next rotation (or the rotation window's end, the dispatcher's to apply). */
export function decideRotateSecret(
  c: RotateSigningSecret,
  s: Subscription,
): DomainEvent<'WebhookSecretRotated'>[] {
  refuseGone(s);
  return [
    {
      type: 'WebhookSecretRotated',
      data: {
        webhook_id: s.id,
        owner_prn: s.ownerPrn,
        secret_sealed: c.secretSealed,
        previous_sealed: s.secretSealed,
      },
    },
  ];
}

/** The reason a subscription's `disabled_reason` gives when the hub disabled it for failing. */
export const ENDPOINT_FAILING = 'endpoint_failing';

export interface AutoDisable {
  /** When the first of the attempts failed since the last success ended, ms (the delivery store's
   * endpoint health). */
  failingSince: number;
  /** When an attempt last succeeded, ms, if ever. */
  lastSuccess: number | null;
  /** When the dispatcher decides, ms. */
  now: number;
  /** The failure period (HUB_WEBHOOK_DISABLE_AFTER_S), ms; 0: never disabled. */
  periodMs: number;
}

/**
 * The hub disables a subscription whose every attempt has failed for the failure period, counted
 * from the first failure or from when it was last enabled, whichever is later: one enabled again
 * gets a whole period before it is disabled again. A subscription disabled or paused already is
 * left as it is (its owner's pause keeps no reason); a deleted one is not found.
 */
export function decideAutoDisable(c: AutoDisable, s: Subscription): DomainEvent<'WebhookAutoDisabled'>[] {
  refuseGone(s);
  if (!s.enabled || c.periodMs <= 0) return [];
  if (c.now - Math.max(c.failingSince, s.enabledAt) < c.periodMs) return [];
  return [
    {
      type: 'WebhookAutoDisabled',
      data: {
        webhook_id: s.id,
        owner_prn: s.ownerPrn,
        reason: ENDPOINT_FAILING,
        failing_since: c.failingSince,
        last_success: c.lastSuccess,
      },
    },
  ];
}
