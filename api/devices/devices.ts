// The device aggregate (stream device-<id>) and the trail of its steps (stream trail-<id>):
// state folded from events, the pure decisions of metadata changes, and the records the API
// shows. No I/O here.
import type { RecordedEvent } from '../../infra/eventstore/port.ts';

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
export function enrolmentOf(created: Record<string, unknown>): Enrolment {
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
export const trailStream = (id: string) => `trail-${id}`;
export const devicePrn = (id: string) => `prn:::devices:/${id}`;
export const DEVICE_PRN = /^prn:::devices:\/([a-f0-9]{24})$/;
/** A step's rev as paths spell it: decimal, no sign, no leading zero (`01`, `1e0` name no step). */
export const REV = /^(?:0|[1-9]\d{0,8})$/;

type Ev = Pick<RecordedEvent, 'type' | 'data' | 'created'>;

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
  evolve(s: DeviceState, e: Ev): DeviceState {
    const d = e.data as Record<string, unknown>;
    switch (e.type) {
      case 'DeviceCreated':
        return {
          ...s,
          id: d.device_id as string,
          prn: d.prn as string,
          ownerId: d.owner_id as string,
          ownerPrn: d.owner_prn as string,
          ownerNick: d.owner_nick as string,
          nick: d.nick as string,
          secretSealed: d.secret_sealed as string,
          challenge: d.challenge as string,
          userMeta: d.user_meta as Meta,
          deviceMeta: d.device_meta as Meta,
          certificate: (d.certificate as string | null) ?? null,
          enrolment: enrolmentOf(d),
          created: e.created,
          flagsModified: e.created,
          modified: e.created,
        };
      case 'DeviceClaimed':
        return {
          ...s,
          ownerId: d.owner_id as string,
          ownerPrn: d.owner_prn as string,
          ownerNick: d.owner_nick as string,
          nick: d.nick as string,
          modified: e.created,
          flagsModified: e.created,
        };
      case 'DeviceRenamed':
        return { ...s, nick: d.nick as string, modified: e.created };
      case 'DeviceSecretRotated':
        return { ...s, secretSealed: d.secret_sealed as string, secretChanged: e.created };
      case 'DevicePublicSet':
        return {
          ...s,
          public: d.public as boolean,
          publicProcessed: false,
          modified: e.created,
          flagsModified: e.created,
        };
      case 'DevicePublicProcessed':
        return { ...s, publicProcessed: true, modified: e.created };
      case 'DeviceMarkedGarbage':
        return { ...s, garbage: true, modified: e.created, flagsModified: e.created };
      case 'DeviceMetaUpdated': {
        const meta = { ...s.deviceMeta, ...(d.changed as Meta) };
        for (const k of d.removed as string[]) delete meta[k];
        return { ...s, deviceMeta: meta, modified: e.created };
      }
      case 'UserMetaReplaced':
        return { ...s, userMeta: d.meta as Meta, modified: e.created };
      default:
        return s;
    }
  },
};

/** device-meta PATCH: merges; a null value removes a key. Only real changes are recorded. */
export function metaPatch(
  current: Meta,
  patch: Record<string, string | null>,
): { changed: Meta; removed: string[] } {
  const changed: Meta = {};
  const removed: string[] = [];
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) {
      if (Object.hasOwn(current, k)) removed.push(k); // own keys: `constructor` is a key like any
    } else if (current[k] !== v) {
      changed[k] = v;
    }
  }
  return { changed, removed };
}

/** user-meta PUT: replaces; the keys added or changed and the keys removed. */
export function metaReplace(current: Meta, next: Meta): { changedKeys: string[]; removedKeys: string[] } {
  return {
    changedKeys: Object.keys(next).filter((k) => current[k] !== next[k]),
    removedKeys: Object.keys(current).filter((k) => !Object.hasOwn(next, k)),
  };
}

export type Viewer = 'owner' | 'device' | 'admin' | 'public';

/** The Device record; `challenge` only for the owner and the device itself, and `secret` when the
 * caller passes it (only to the owner's own login and the device: access.ts `seesSecret`). */
export function deviceRecord(s: DeviceState, viewer: Viewer, secret?: () => string): Record<string, unknown> {
  const trusted = viewer === 'owner' || viewer === 'device';
  return {
    id: s.id,
    prn: s.prn,
    nick: s.nick,
    owner: s.ownerPrn,
    'owner-nick': s.ownerNick,
    public: s.public,
    garbage: s.garbage,
    mark_public_processed: s.publicProcessed,
    ownership_unverified: s.ownerId === '',
    ovmode: ovmode(s.enrolment, s.ownerId !== ''),
    'user-meta': s.userMeta,
    'device-meta': s.deviceMeta,
    ...(secret ? { secret: secret() } : {}),
    ...(trusted && s.ownerId === '' ? { challenge: s.challenge } : {}),
    'time-created': new Date(s.created).toISOString(),
    'time-modified': new Date(s.modified).toISOString(),
  };
}

// ---------------------------------------------------------------- trails and steps

export const STEP_STATUSES = ['NEW', 'STARTED', 'DONE', 'UPDATED', 'WONTGO', 'ERROR'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

export interface Step {
  rev: number;
  state: string;
  commitMsg: string;
  objects: string[];
  progress: number;
  status: StepStatus;
  statusMsg: string;
  public: boolean;
  garbage: boolean;
  created: number;
  modified: number;
  /** When the step was pushed or its public and garbage flags last set. */
  flagsModified: number;
}

export interface TrailState {
  deviceId: string;
  steps: Map<number, Step>;
  lastRev: number;
}

export const trails = {
  snapshot: { kind: 'trail', shape: 1 },
  initial: (): TrailState => ({ deviceId: '', steps: new Map(), lastRev: -1 }),
  evolve(t: TrailState, e: Ev): TrailState {
    const d = e.data as Record<string, unknown>;
    const rev = d.rev as number;
    switch (e.type) {
      case 'StepPushed': {
        const step: Step = {
          rev,
          state: d.state as string,
          commitMsg: d.commit_msg as string,
          objects: d.objects as string[],
          progress: 0,
          status: 'NEW',
          statusMsg: '',
          public: d.public as boolean,
          garbage: false,
          created: e.created,
          modified: e.created,
          flagsModified: e.created,
        };
        return {
          deviceId: d.device_id as string,
          steps: new Map(t.steps).set(rev, step),
          lastRev: Math.max(t.lastRev, rev),
        };
      }
      case 'StepProgressReported':
      case 'StepPublicitySet': {
        const step = t.steps.get(rev);
        if (!step) return t;
        const next =
          e.type === 'StepProgressReported'
            ? {
                ...step,
                progress: d.progress as number,
                status: d.status as StepStatus,
                statusMsg: d.status_msg as string,
              }
            : {
                ...step,
                public: d.public as boolean,
                garbage: d.garbage as boolean,
                flagsModified: e.created,
              };
        return { ...t, steps: new Map(t.steps).set(rev, { ...next, modified: e.created }) };
      }
      default:
        return t;
    }
  },
};

const SHA256 = /^[a-f0-9]{64}$/;

/** The sha256 of every object a step state references: each string value that is a sha256 hex digest. */
export function referencedObjects(state: unknown): string[] {
  const found = new Set<string>();
  const walk = (v: unknown) => {
    if (typeof v === 'string') {
      if (SHA256.test(v)) found.add(v);
    } else if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') Object.values(v).forEach(walk);
  };
  walk(state);
  return [...found].sort();
}

export function stepRecord(device: DeviceState, step: Step): Record<string, unknown> {
  return {
    id: `${device.id}-${step.rev}`,
    device: device.prn,
    owner: device.ownerPrn,
    rev: step.rev,
    state: JSON.parse(step.state),
    'commit-msg': step.commitMsg,
    objects: step.objects,
    progress: { progress: step.progress, status: step.status, 'status-msg': step.statusMsg },
    public: step.public,
    garbage: step.garbage,
    'time-created': new Date(step.created).toISOString(),
    'time-modified': new Date(step.modified).toISOString(),
  };
}

/** What the step callback answers: the step's bookkeeping record. */
export function stepBookkeeping(device: DeviceState, step: Step): Record<string, unknown> {
  return {
    id: `${device.id}-${step.rev}`,
    owner: device.ownerPrn,
    device: device.prn,
    objects: step.objects,
    public: step.public,
    garbage: step.garbage,
  };
}

/** The steps whose public and garbage flags differ from their device's: what a publicity sync writes. */
export function stepsToMark(
  device: DeviceState,
  trail: TrailState,
): { rev: number; public: boolean; garbage: boolean }[] {
  return [...trail.steps.values()]
    .filter((s) => s.public !== device.public || s.garbage !== device.garbage)
    .map((s) => ({ rev: s.rev, public: device.public, garbage: device.garbage }));
}
