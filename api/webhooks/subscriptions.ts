// The webhook subscription aggregate (stream webhook-<id>): state folded from its events, the
// rules of its fields, and the record the API shows. No I/O here.
import type { RecordedEvent } from '../../infra/eventstore/port.ts';
import { EVENT_TYPES } from '../../processors/stream/derive.ts';

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  max_attempts: number;
  /** Delay before each retry, seconds; the last one repeats when there are fewer than retries. */
  delays_s: number[];
}

/** The specification's schedule: 8 attempts, retries after 60 s doubling to 3,840 s. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  max_attempts: 8,
  delays_s: [60, 120, 240, 480, 960, 1920, 3840],
};

export interface SubscriptionFields {
  nick: string;
  url: string;
  description: string;
  event_types: string[];
  enabled: boolean;
  devices: string[];
  user_meta_keys: string[];
  device_meta_keys: string[];
  custom_headers: Record<string, string>;
  retry_policy: RetryPolicy | null;
}

export interface Subscription extends SubscriptionFields {
  id: string;
  ownerPrn: string;
  secretSealed: string;
  /** Signs beside the new secret until the rotation window ends or the next rotation ('' when none). */
  previousSealed: string;
  /** When the secret was last rotated (0: never). */
  rotated: number;
  deleted: boolean;
  created: number;
  modified: number;
}

export const webhookStream = (id: string) => `webhook-${id}`;

type Ev = Pick<RecordedEvent, 'type' | 'data' | 'created'>;

export const subscriptions = {
  snapshot: { kind: 'webhook', shape: 1 },
  initial: (): Subscription => ({
    id: '',
    ownerPrn: '',
    nick: '',
    url: '',
    description: '',
    event_types: [],
    enabled: false,
    devices: [],
    user_meta_keys: [],
    device_meta_keys: [],
    custom_headers: {},
    retry_policy: null,
    secretSealed: '',
    previousSealed: '',
    rotated: 0,
    deleted: false,
    created: 0,
    modified: 0,
  }),
  evolve(s: Subscription, e: Ev): Subscription {
    const d = e.data as Record<string, unknown>;
    switch (e.type) {
      case 'WebhookCreated':
        return {
          ...s,
          ...fieldsOf(d),
          id: d.webhook_id as string,
          ownerPrn: d.owner_prn as string,
          secretSealed: d.secret_sealed as string,
          created: e.created,
          modified: e.created,
        };
      case 'WebhookUpdated':
        return { ...s, ...fieldsOf(d), modified: e.created };
      case 'WebhookSecretRotated':
        return {
          ...s,
          secretSealed: d.secret_sealed as string,
          previousSealed: d.previous_sealed as string,
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

export function fieldsOf(d: Record<string, unknown>): SubscriptionFields {
  return {
    nick: d.nick as string,
    url: d.url as string,
    description: (d.description as string) ?? '',
    event_types: d.event_types as string[],
    enabled: d.enabled as boolean,
    devices: (d.devices as string[]) ?? [],
    user_meta_keys: (d.user_meta_keys as string[]) ?? [],
    device_meta_keys: (d.device_meta_keys as string[]) ?? [],
    custom_headers: (d.custom_headers as Record<string, string>) ?? {},
    retry_policy: (d.retry_policy as RetryPolicy | null) ?? null,
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
    'time-created': new Date(s.created).toISOString(),
    'time-modified': new Date(s.modified).toISOString(),
    ...(secret ? { secret } : {}),
  };
}

/** Headers the dispatcher sets itself, or that would change how the request is framed. */
const RESERVED =
  /^(webhook-.*|content-type|content-length|content-encoding|transfer-encoding|user-agent|host|connection|keep-alive|upgrade|te|trailer|expect|proxy-.*)$/i;

/** Problems with the fields that the published JSON Schema does not express: [field, problem]. */
export function fieldProblems(f: SubscriptionFields): [string, string][] {
  const problems: [string, string][] = [];
  for (const name of Object.keys(f.custom_headers)) {
    if (RESERVED.test(name)) problems.push([`custom_headers.${name}`, 'is a reserved header name']);
  }
  return problems;
}

/** When attempt `n` (1-based) has failed: the delay before the next one, or null when spent. */
export function nextDelayS(policy: RetryPolicy | null, attempt: number): number | null {
  const p = policy ?? DEFAULT_RETRY_POLICY;
  if (attempt >= p.max_attempts) return null;
  return p.delays_s[Math.min(attempt - 1, p.delays_s.length - 1)] ?? null;
}

export const EVENT_TYPE_NAMES = Object.keys(EVENT_TYPES);
