// Derivation of the webhook events of the specification (section Events) from the change stream:
// a pure function of a device actor's state and one stored event. No I/O here.
import { createHash } from 'node:crypto';
import { type Meta, mergeMeta, metaPatchOf } from '../../domain/devices.ts';
import type { DomainEvent } from '../../domain/events.ts';
import { WEBHOOK_EVENTS, type WebhookEventType } from '../../schemas/webhook-events.ts';

/** The `api_version` of every event payload this code derives. */
export const API_VERSION = '2026-11-01';

/** Each event type, with when it fires: the catalogue's (schemas/webhook-events.ts, which also
 * holds the schema of each type's `data` and an example). */
export const EVENT_TYPES = Object.fromEntries(
  Object.entries(WEBHOOK_EVENTS).map(([type, e]) => [type, e.description]),
) as Record<WebhookEventType, string>;
export type EventType = WebhookEventType;

/** One stored event as the change stream carries it: its data typed by its type (domain/events.ts;
 * the store checked it against its schema). */
export type Change = {
  id: string;
  stream: string;
  position: number;
  /** Milliseconds since the epoch, when stored. */
  created: number;
} & DomainEvent;

/** The Event resource of the specification, less the per-attempt `request_id`. */
export interface WebhookEvent {
  id: string;
  type: EventType;
  api_version: string;
  /** Unix seconds. */
  created: number;
  owner: string;
  /** The device the event is about (for filters and the log; not in delivered payloads). */
  resource_prn: string;
  livemode: boolean;
  data: Record<string, unknown>;
  /** Store position of the change it came from (orders the log; not in delivered payloads). */
  source_position: number;
  /** Index among the events derived from that change. */
  sequence: number;
  /** When the change was stored, ms (`created` in full; for end-to-end latency). */
  created_ms: number;
}

/** What a device actor remembers between changes. */
export interface DeviceActor {
  /** Position of the last change applied: anything at or below it is a replay, and skipped. */
  position: number;
  owner: string;
  prn: string;
  nick: string;
  public: boolean;
  garbage: boolean;
  deviceMeta: Meta;
  userMeta: Meta;
  /** rev → [progress, status] */
  steps: Record<string, [number, string]>;
}

export const initialActor = (): DeviceActor => ({
  position: 0,
  owner: '',
  prn: '',
  nick: '',
  public: false,
  garbage: false,
  deviceMeta: {},
  userMeta: {},
  steps: {},
});

/**
 * Changes stored from this time on give events and jobs ids led by the change's stored time; those
 * stored before keep the ids they were given then (a hash alone): the embedded hub derives its
 * event log again at each start, and deliveries already recorded name the old ids.
 */
export const TIME_LED_IDS_FROM = Date.parse('2026-11-22T00:00:00Z');

/**
 * `<prefix>_` and 32 hex digits, deterministic: the same text and time give the same id in every
 * process, every time. From the cut-over on, the change's stored time (48 bits, 12 digits) leads,
 * then 80 bits of the text's hash, so the indexes by these ids grow at their ends instead of taking
 * each id at a random place; before it, the hash alone.
 */
function derivedId(prefix: string, text: string, createdMs: number): string {
  const hash = createHash('sha256').update(text).digest('hex');
  const lead = createdMs >= TIME_LED_IDS_FROM ? createdMs.toString(16).padStart(12, '0').slice(-12) : '';
  return `${prefix}_${lead}${hash.slice(0, 32 - lead.length)}`;
}

/** An event's id, from its change and type (the delivery log is indexed by it). */
export const eventId = (sourceId: string, type: string, createdMs = 0): string =>
  derivedId('evt', `${sourceId}\n${type}`, createdMs);

/** A job's id, stable across its attempts and across reprocessing (the schedule is indexed by it:
 * finished jobs stay for the retention). */
export const jobId = (eventId: string, subscriptionId: string, createdMs = 0): string =>
  derivedId('job', `${eventId}\n${subscriptionId}`, createdMs);

/** The key of a stored event on the change stream: the device of device and trail streams. */
export function aggregateKey(stream: string): string {
  const dash = stream.indexOf('-');
  const kind = stream.slice(0, dash);
  return kind === 'device' || kind === 'trail' ? stream.slice(dash + 1) : stream;
}

/** Applies one change; the events it gives, in order. A change already applied gives none. */
export function derive(state: DeviceActor, change: Change): { state: DeviceActor; events: WebhookEvent[] } {
  if (change.position <= state.position) return { state, events: [] };
  const s: DeviceActor = { ...state, position: change.position };
  const events: WebhookEvent[] = [];
  const emit = (type: EventType, data: Record<string, unknown>, owner = s.owner) => {
    if (!owner) return; // an unowned device has nobody to tell
    // device.deleted is a device's last event: a step pushed or reported in a race with the
    // deletion (its trail is a stream of its own) is recorded, marked garbage, and told nobody.
    if (state.garbage) return;
    events.push({
      id: eventId(change.id, type, change.created),
      type,
      api_version: API_VERSION,
      created: Math.floor(change.created / 1000),
      owner,
      resource_prn: s.prn,
      livemode: true,
      data,
      source_position: change.position,
      sequence: events.length,
      created_ms: change.created,
    });
  };
  const device = () => ({
    id: deviceIdOf(s.prn),
    prn: s.prn,
    nick: s.nick,
    owner: s.owner,
    public: s.public,
    user_meta: s.userMeta,
    device_meta: s.deviceMeta,
  });
  switch (change.type) {
    case 'DeviceCreated': {
      const d = change.data;
      s.prn = d.prn;
      s.owner = d.owner_prn;
      s.nick = d.nick;
      s.userMeta = { ...d.user_meta };
      s.deviceMeta = { ...d.device_meta };
      emit('device.created', device());
      break;
    }
    case 'DeviceClaimed':
      // The new owner observes the device for the first time.
      s.owner = change.data.owner_prn;
      s.nick = change.data.nick;
      emit('device.created', device());
      break;
    case 'DeviceRenamed': {
      const { nick } = change.data;
      if (nick === s.nick) break;
      emit('device.updated', { device: s.prn, changed: { nick }, previous: { nick: s.nick } });
      s.nick = nick;
      break;
    }
    case 'DevicePublicSet':
      if (change.data.public === s.public) break;
      s.public = change.data.public;
      emit('device.public.toggled', { device: s.prn, public: s.public });
      break;
    case 'DeviceMarkedGarbage':
      if (s.garbage) break;
      s.garbage = true;
      emit('device.deleted', { device: s.prn, nick: s.nick });
      break;
    case 'DeviceMetaUpdated': {
      const { changed } = change.data;
      // Told as recorded; of the keys removed, those the device had.
      const { meta, removed } = mergeMeta(s.deviceMeta, metaPatchOf(changed, change.data.removed));
      s.deviceMeta = meta;
      emit('device.device_meta.updated', metaData(s.prn, changed, removed, meta, 'device_meta'));
      break;
    }
    case 'UserMetaReplaced': {
      const { meta, changed_keys, removed_keys } = change.data;
      const changed = Object.fromEntries(changed_keys.map((k) => [k, meta[k] ?? '']));
      s.userMeta = { ...meta };
      emit('device.user_meta.updated', metaData(s.prn, changed, removed_keys, meta, 'user_meta'));
      break;
    }
    case 'StepPushed': {
      const { rev, commit_msg } = change.data;
      if (s.steps[rev]) break;
      s.steps = { ...s.steps, [rev]: [0, 'NEW'] };
      emit('step.created', { device: s.prn, rev, commit_msg, progress: 0, status: 'NEW' });
      break;
    }
    case 'StepProgressReported': {
      const d = change.data;
      const rev = d.rev;
      const [progress, status] = s.steps[rev] ?? [d.prev_progress, d.prev_status];
      s.steps = { ...s.steps, [rev]: [d.progress, d.status] };
      if (d.progress !== progress)
        emit('step.progress.changed', { device: s.prn, rev, progress: d.progress, prev_progress: progress });
      if (d.status !== status) emit('step.status.changed', { rev, status: d.status, prev_status: status });
      break;
    }
    // DevicePublicProcessed, StepPublicitySet and the rest: bookkeeping, no event.
  }
  return { state: s, events };
}

function metaData(prn: string, changed: Meta, removed: string[], meta: Meta, field: string) {
  return {
    device: prn,
    keys: [...Object.keys(changed), ...removed].sort(),
    changed,
    removed,
    [field]: meta,
  };
}

const deviceIdOf = (prn: string) => prn.slice(prn.lastIndexOf('/') + 1);
