// The device aggregate (stream device-<id>): its state folded from its events, the one merge of
// its metadata maps, and a named decision per command. Pure: no I/O, no HTTP; a refusal is a
// DomainError. The trail of a device's steps is trails.ts.
import { refuse } from './errors.ts';
import type { DomainEvent, EventData, FoldedEvent } from './events.ts';

export type Meta = Record<string, string>;

/** How a device was enrolled: created by its owner with a user token, registered itself and
 * claimed with its challenge, or registered from an IDevID certificate signing request. */
export type Enrolment = 'owned' | 'claim' | 'idevid';

/** The Device record's `ovmode` (ownership verification): how the device was enrolled, what vouches
 * for it (its credentials secret, or the certificate the hub's device CA issued), and whether its
 * ownership is verified (it has an owner). The spec leaves the values open: docs/api.md. */
export function ovmode(enrolment: Enrolment, owned: boolean) {
  return {
    mode: enrolment,
    root_of_trust: enrolment === 'idevid' ? 'certificate' : 'secret',
    status: owned ? 'verified' : 'unverified',
  };
}

/** The enrolment a DeviceCreated event records. */
export function enrolmentOf(
  created: Pick<EventData['DeviceCreated'], 'certificate' | 'owner_id'>,
): Enrolment {
  return created.certificate ? 'idevid' : created.owner_id ? 'owned' : 'claim';
}

export interface DeviceState {
  id: string;
  prn: string;
  ownerId: string;
  ownerPrn: string;
  ownerNick: string;
  nick: string;
  secretSealed: string;
  /** When the secret was last rotated (0: never): the device's logins before it are over. */
  secretChanged: number;
  challenge: string;
  public: boolean;
  garbage: boolean;
  publicProcessed: boolean;
  /** When ownership, the public flag or the garbage mark last changed: what callbacks are about. */
  flagsModified: number;
  userMeta: Meta;
  deviceMeta: Meta;
  certificate: string | null;
  /** How the device was enrolled (the `ovmode.mode` of its record). */
  enrolment: Enrolment;
  created: number;
  modified: number;
}

export const deviceStream = (id: string) => `device-${id}`;
export const devicePrn = (id: string) => `prn:::devices:/${id}`;
export const DEVICE_PRN = /^prn:::devices:\/([a-f0-9]{24})$/;

export const devices = {
  snapshot: { kind: 'device', shape: 1 },
  initial: (): DeviceState => ({
    id: '',
    prn: '',
    ownerId: '',
    ownerPrn: '',
    ownerNick: '',
    nick: '',
    secretSealed: '',
    secretChanged: 0,
    challenge: '',
    public: false,
    garbage: false,
    publicProcessed: true,
    flagsModified: 0,
    userMeta: {},
    deviceMeta: {},
    certificate: null,
    enrolment: 'owned',
    created: 0,
    modified: 0,
  }),
  /** Folds one event of the device's stream; any other leaves the state as it is. */
  evolve(s: DeviceState, e: FoldedEvent): DeviceState {
    switch (e.type) {
      case 'DeviceCreated': {
        const d = e.data;
        return {
          ...s,
          id: d.device_id,
          prn: d.prn,
          ownerId: d.owner_id,
          ownerPrn: d.owner_prn,
          ownerNick: d.owner_nick,
          nick: d.nick,
          secretSealed: d.secret_sealed,
          challenge: d.challenge,
          userMeta: d.user_meta,
          deviceMeta: d.device_meta,
          certificate: d.certificate,
          enrolment: enrolmentOf(d),
          created: e.created,
          flagsModified: e.created,
          modified: e.created,
        };
      }
      case 'DeviceClaimed':
        return {
          ...s,
          ownerId: e.data.owner_id,
          ownerPrn: e.data.owner_prn,
          ownerNick: e.data.owner_nick,
          nick: e.data.nick,
          modified: e.created,
          flagsModified: e.created,
        };
      case 'DeviceRenamed':
        return { ...s, nick: e.data.nick, modified: e.created };
      case 'DeviceSecretRotated':
        return { ...s, secretSealed: e.data.secret_sealed, secretChanged: e.created };
      case 'DevicePublicSet':
        return {
          ...s,
          public: e.data.public,
          publicProcessed: false,
          modified: e.created,
          flagsModified: e.created,
        };
      case 'DevicePublicProcessed':
        return { ...s, publicProcessed: true, modified: e.created };
      case 'DeviceMarkedGarbage':
        return { ...s, garbage: true, modified: e.created, flagsModified: e.created };
      case 'DeviceMetaUpdated':
        return {
          ...s,
          deviceMeta: mergeMeta(s.deviceMeta, metaPatchOf(e.data.changed, e.data.removed)).meta,
          modified: e.created,
        };
      case 'UserMetaReplaced':
        return { ...s, userMeta: e.data.meta, modified: e.created };
      default:
        return s;
    }
  },
};

// ---------------------------------------------------------------- metadata

/** A change to a metadata map, as device-meta's PATCH sends it and the read models apply it: a
 * string sets the key, null removes it. */
export type MetaPatch = Record<string, string | null>;

/**
 * The one merge of metadata maps: `patch` applied to `current`. Answers the map after it and what
 * really changed: the keys set to another value than they had, and the keys removed that were
 * there (own keys: `constructor` is a key like any). device-meta's PATCH is such a patch, user-meta's
 * PUT one that removes the keys left out (`replacing`), and a DeviceMetaUpdated event one that its
 * fold, derivation and the read model apply (`metaPatchOf`).
 */
export function mergeMeta(current: Meta, patch: MetaPatch): { meta: Meta; changed: Meta; removed: string[] } {
  const set: [string, string][] = [];
  const removed: string[] = [];
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      if (Object.hasOwn(current, k)) removed.push(k);
    } else if (current[k] !== v) {
      set.push([k, v]);
    }
  }
  // Built as data properties (fromEntries, spread): any key is a key, `__proto__` too.
  const changed: Meta = Object.fromEntries(set);
  const meta = { ...current, ...changed };
  for (const k of removed) delete meta[k];
  return { meta, changed, removed };
}

/** The patch of an event's change: the keys it set and the keys it removed. */
export function metaPatchOf(changed: Meta, removed: string[]): MetaPatch {
  return { ...changed, ...Object.fromEntries(removed.map((k) => [k, null])) };
}

/** The patch that makes `current` into `next`: a replacement of the whole map. */
export function replacing(current: Meta, next: Meta): MetaPatch {
  return metaPatchOf(
    next,
    Object.keys(current).filter((k) => !Object.hasOwn(next, k)),
  );
}

/** A map holds at most `maxKeys` keys (HUB_META_MAX_KEYS). */
function refuseOversized(meta: Meta, maxKeys: number): void {
  if (Object.keys(meta).length > maxKeys) throw refuse.tooLarge(`Metadata may hold at most ${maxKeys} keys.`);
}

// ---------------------------------------------------------------- decisions

/** Every command but a creation is on a device that exists and is not deleted (garbage): 404
 * otherwise. Deleting one again is the exception (decideDelete). */
export function refuseGone(d: DeviceState): void {
  if (!d.id || d.garbage) throw refuse.notFound('No such device.');
}

/** The account that owns a device: a user's. */
export interface Owner {
  id: string;
  prn: string;
  nick: string;
}

export interface CreateDevice {
  id: string;
  /** The creating user; none for a device registering itself (unowned until claimed). */
  owner: Owner | undefined;
  /** Already reserved among the owner's devices (unique names are their own streams). */
  nick: string;
  secretSealed: string;
  /** A fresh challenge: an unowned device is claimed with it; an owned one keeps none. */
  challenge: string;
  userMeta: Meta;
  deviceMeta: Meta;
  /** PEM of the certificate issued from an IDevID CSR. */
  certificate: string | null;
  maxMetaKeys: number;
}

/**
 * The rules of a new device that its stream has no part in: user-meta is the owner's (the spec:
 * "set by the user"), so a device registering itself sets device-meta only; each map within the
 * size limit. decideCreate applies them; the routes ask them first too, before reserving a nick for
 * a device that would be refused.
 */
export function checkNewDevice(
  c: Pick<CreateDevice, 'owner' | 'userMeta' | 'deviceMeta' | 'maxMetaKeys'>,
): void {
  if (!c.owner && Object.keys(c.userMeta).length > 0)
    throw refuse.invalid('A device registering itself sets device-meta; user-meta is its owner’s.', [
      { field: 'user-meta', problem: 'is set by the owner, not by a device registering itself' },
    ]);
  refuseOversized(c.userMeta, c.maxMetaKeys);
  refuseOversized(c.deviceMeta, c.maxMetaKeys);
}

/** Create (by its owner, from a CSR, or a device registering itself): the stream is new. */
export function decideCreate(c: CreateDevice, d: DeviceState): DomainEvent<'DeviceCreated'>[] {
  if (d.id) throw refuse.conflict('The device exists already.');
  checkNewDevice(c);
  return [
    {
      type: 'DeviceCreated',
      data: {
        device_id: c.id,
        prn: devicePrn(c.id),
        owner_id: c.owner?.id ?? '',
        owner_prn: c.owner?.prn ?? '',
        owner_nick: c.owner?.nick ?? '',
        nick: c.nick,
        secret_sealed: c.secretSealed,
        challenge: c.owner ? '' : c.challenge,
        user_meta: c.userMeta,
        device_meta: c.deviceMeta,
        certificate: c.certificate,
      },
    },
  ];
}

const NOT_CLAIMABLE = 'No unowned device with this id and challenge.';

/** Whether the device can be claimed with `challenge`: one answer (404) for every failure (none,
 * deleted, owned already, another challenge), so that challenges cannot be probed device by
 * device. The claim route asks it before reserving the claimant's nick. */
export function refuseUnclaimable(challenge: string, d: DeviceState): void {
  if (!d.id || d.garbage || d.ownerId || d.challenge !== challenge) throw refuse.notFound(NOT_CLAIMABLE);
}

export interface ClaimDevice {
  challenge: string;
  owner: Owner;
  /** The nick under its new owner, already reserved among the owner's devices. */
  nick: string;
}

/** Claim an unowned device. Decided once the nick is reserved: a device deleted or claimed since
 * the claimant was told it can be is answered as such (404, 409). */
export function decideClaim(c: ClaimDevice, d: DeviceState): DomainEvent<'DeviceClaimed'>[] {
  refuseGone(d);
  if (d.challenge !== c.challenge) throw refuse.notFound(NOT_CLAIMABLE);
  if (d.ownerId) throw refuse.conflict('The device was claimed meanwhile.');
  return [
    {
      type: 'DeviceClaimed',
      data: {
        device_id: d.id,
        owner_id: c.owner.id,
        owner_prn: c.owner.prn,
        owner_nick: c.owner.nick,
        nick: c.nick,
        previous_nick: d.nick,
      },
    },
  ];
}

export interface RenameDevice {
  /** Already reserved among the owner's devices when it differs from the old one in more than case. */
  nick: string;
}

/** Rename (the owner). */
export function decideRename(c: RenameDevice, d: DeviceState): DomainEvent<'DeviceRenamed'>[] {
  refuseGone(d);
  if (d.nick === c.nick) return [];
  return [
    {
      type: 'DeviceRenamed',
      data: { device_id: d.id, owner_prn: d.ownerPrn, nick: c.nick, previous_nick: d.nick },
    },
  ];
}

export interface SetPublic {
  public: boolean;
}

/** Make the device public or private (the owner): recorded only when the flag flips. */
export function decideSetPublic(c: SetPublic, d: DeviceState): DomainEvent<'DevicePublicSet'>[] {
  refuseGone(d);
  if (d.public === c.public) return [];
  return [{ type: 'DevicePublicSet', data: { device_id: d.id, owner_prn: d.ownerPrn, public: c.public } }];
}

/** Delete (the owner): marked garbage, its nick given back. Deleting again changes nothing. */
export function decideDelete(d: DeviceState): DomainEvent<'DeviceMarkedGarbage'>[] {
  if (!d.id) throw refuse.notFound('No such device.');
  if (d.garbage) return [];
  return [{ type: 'DeviceMarkedGarbage', data: { device_id: d.id, owner_prn: d.ownerPrn, nick: d.nick } }];
}

export interface RotateSecret {
  /** The new secret, sealed (AES-256-GCM; the key never leaves the server). */
  secretSealed: string;
}

/** Replace the login secret (the owner or the device): the logins made before end. */
export function decideRotateSecret(c: RotateSecret, d: DeviceState): DomainEvent<'DeviceSecretRotated'>[] {
  refuseGone(d);
  return [
    {
      type: 'DeviceSecretRotated',
      data: { device_id: d.id, owner_prn: d.ownerPrn, secret_sealed: c.secretSealed },
    },
  ];
}

export interface ReportDeviceMeta {
  patch: MetaPatch;
  maxMetaKeys: number;
}

/** The device reports its metadata: merged; only real changes are recorded, and none when there
 * are none. The merged map within the size limit (413). */
export function decideReportDeviceMeta(
  c: ReportDeviceMeta,
  d: DeviceState,
): DomainEvent<'DeviceMetaUpdated'>[] {
  refuseGone(d);
  const { meta, changed, removed } = mergeMeta(d.deviceMeta, c.patch);
  if (Object.keys(changed).length === 0 && removed.length === 0) return [];
  refuseOversized(meta, c.maxMetaKeys);
  return [{ type: 'DeviceMetaUpdated', data: { device_id: d.id, owner_prn: d.ownerPrn, changed, removed } }];
}

export interface ReplaceUserMeta {
  meta: Meta;
  maxMetaKeys: number;
}

/** The owner replaces the user metadata (tags, labels): recorded with the keys added or changed
 * and the keys removed, and not at all when nothing changes. */
export function decideReplaceUserMeta(c: ReplaceUserMeta, d: DeviceState): DomainEvent<'UserMetaReplaced'>[] {
  refuseOversized(c.meta, c.maxMetaKeys); // the map asked for, whatever the device's state
  refuseGone(d);
  const { changed, removed } = mergeMeta(d.userMeta, replacing(d.userMeta, c.meta));
  if (Object.keys(changed).length === 0 && removed.length === 0) return [];
  return [
    {
      type: 'UserMetaReplaced',
      data: {
        device_id: d.id,
        owner_prn: d.ownerPrn,
        meta: c.meta,
        changed_keys: Object.keys(changed),
        removed_keys: removed,
      },
    },
  ];
}

export interface MarkPublicProcessed {
  deviceId: string;
  /** How many of its steps the carrying of its flags marked public, and non-public. */
  markedPublic: number;
  markedNonPublic: number;
}

/** The device's flags were carried to its steps (trails.ts decideCarryPublicity): recorded unless
 * it was processed already and no step changed. */
export function decideMarkPublicProcessed(
  c: MarkPublicProcessed,
  d: DeviceState,
): DomainEvent<'DevicePublicProcessed'>[] {
  if (d.publicProcessed && c.markedPublic + c.markedNonPublic === 0) return [];
  return [
    {
      type: 'DevicePublicProcessed',
      data: {
        device_id: c.deviceId,
        public: d.public,
        steps_marked_public: c.markedPublic,
        steps_marked_non_public: c.markedNonPublic,
      },
    },
  ];
}
