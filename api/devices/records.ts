// What the API shows of a device and its steps: the Device record by who sees it, a step's record
// and its bookkeeping record, and a step's rev as paths spell it. The aggregates are domain/.
import { type DeviceState, ovmode } from '../../domain/devices.ts';
import type { Step } from '../../domain/trails.ts';

/** A step's rev as paths spell it: decimal, no sign, no leading zero (`01`, `1e0` name no step). */
export const REV = /^(?:0|[1-9]\d{0,8})$/;

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
