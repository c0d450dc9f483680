// The trail of a device's steps (revisions; stream trail-<device id>): its state folded from its
// events, and a named decision per command. Pure: no I/O, no HTTP; a refusal is a DomainError.
import type { DeviceState } from './devices.ts';
import { refuse } from './errors.ts';
import type { DomainEvent, FoldedEvent } from './events.ts';

export const STEP_STATUSES = ['NEW', 'STARTED', 'DONE', 'UPDATED', 'WONTGO', 'ERROR'] as const;
export type StepStatus = (typeof STEP_STATUSES)[number];

export interface Step {
  rev: number;
  state: string;
  commitMsg: string;
  objects: string[];
  progress: number;
  /** One of STEP_STATUSES (the route's schema checks it; the event records a string). */
  status: string;
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

export const trailStream = (id: string) => `trail-${id}`;

export const trails = {
  snapshot: { kind: 'trail', shape: 1 },
  initial: (): TrailState => ({ deviceId: '', steps: new Map(), lastRev: -1 }),
  /** Folds one event of the trail's stream; any other leaves the state as it is. */
  evolve(t: TrailState, e: FoldedEvent): TrailState {
    switch (e.type) {
      case 'StepPushed': {
        const d = e.data;
        const step: Step = {
          rev: d.rev,
          state: d.state,
          commitMsg: d.commit_msg,
          objects: d.objects,
          progress: 0,
          status: 'NEW',
          statusMsg: '',
          public: d.public,
          garbage: false,
          created: e.created,
          modified: e.created,
          flagsModified: e.created,
        };
        return {
          deviceId: d.device_id,
          steps: new Map(t.steps).set(d.rev, step),
          lastRev: Math.max(t.lastRev, d.rev),
        };
      }
      case 'StepProgressReported':
      case 'StepPublicitySet': {
        const step = t.steps.get(e.data.rev);
        if (!step) return t;
        const next =
          e.type === 'StepProgressReported'
            ? { ...step, progress: e.data.progress, status: e.data.status, statusMsg: e.data.status_msg }
            : { ...step, public: e.data.public, garbage: e.data.garbage, flagsModified: e.created };
        return { ...t, steps: new Map(t.steps).set(step.rev, { ...next, modified: e.created }) };
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

/** The steps whose public and garbage flags differ from their device's: what a publicity sync writes. */
export function stepsToMark(
  device: Pick<DeviceState, 'public' | 'garbage'>,
  trail: TrailState,
): { rev: number; public: boolean; garbage: boolean }[] {
  return [...trail.steps.values()]
    .filter((s) => s.public !== device.public || s.garbage !== device.garbage)
    .map((s) => ({ rev: s.rev, public: device.public, garbage: device.garbage }));
}

// ---------------------------------------------------------------- decisions

export interface PushStep {
  /** The device the trail is of, as its stream has it. */
  device: Pick<DeviceState, 'id' | 'ownerPrn' | 'public' | 'garbage'>;
  /** The rev asked for; the next one when absent. */
  rev: number | undefined;
  state: Record<string, unknown>;
  commitMsg: string;
}

/** Push a new step (the owner or the device): the next rev only (409 otherwise), public as its
 * device is; a deleted device takes none. */
export function decidePushStep(c: PushStep, t: TrailState): DomainEvent<'StepPushed'>[] {
  if (c.device.garbage) throw refuse.notFound('No such device.');
  const rev = c.rev ?? t.lastRev + 1;
  if (rev !== t.lastRev + 1) throw refuse.conflict(`The next step of this trail is rev ${t.lastRev + 1}.`);
  return [
    {
      type: 'StepPushed',
      data: {
        device_id: c.device.id,
        owner_prn: c.device.ownerPrn,
        rev,
        state: JSON.stringify(c.state),
        commit_msg: c.commitMsg,
        objects: referencedObjects(c.state),
        public: c.device.public,
      },
    },
  ];
}

export interface ReportProgress {
  device: Pick<DeviceState, 'id' | 'ownerPrn'>;
  rev: number;
  progress: number;
  status: StepStatus;
  statusMsg: string;
}

/** The device reports progress on a step: recorded with what it was before, and not at all when
 * nothing changes. */
export function decideReportProgress(
  c: ReportProgress,
  t: TrailState,
): DomainEvent<'StepProgressReported'>[] {
  const step = t.steps.get(c.rev);
  if (!step) throw refuse.notFound('No such step.');
  if (step.progress === c.progress && step.status === c.status && step.statusMsg === c.statusMsg) return [];
  return [
    {
      type: 'StepProgressReported',
      data: {
        device_id: c.device.id,
        owner_prn: c.device.ownerPrn,
        rev: c.rev,
        progress: c.progress,
        status: c.status,
        status_msg: c.statusMsg,
        prev_progress: step.progress,
        prev_status: step.status,
      },
    },
  ];
}

export interface CarryPublicity {
  deviceId: string;
  /** The device's flags, which its steps take. */
  public: boolean;
  garbage: boolean;
  /** One step only (the step callback); every step when absent. */
  rev?: number;
}

/** Carry the device's public and garbage flags to its steps (the callbacks and the pipeline): the
 * steps whose flags differ are marked. */
export function decideCarryPublicity(c: CarryPublicity, t: TrailState): DomainEvent<'StepPublicitySet'>[] {
  if (c.rev !== undefined && !t.steps.has(c.rev)) throw refuse.notFound('No such step.');
  return stepsToMark(c, t)
    .filter((m) => c.rev === undefined || m.rev === c.rev)
    .map((m) => ({ type: 'StepPublicitySet', data: { device_id: c.deviceId, ...m } }));
}
