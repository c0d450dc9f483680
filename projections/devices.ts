// Devices for listing and lookups: the record (never the secret or challenge), the two metadata
// maps as documents of their own (so a metadata event writes only its keys), each owner's device
// index and an index by nick (for the operator callbacks).
import { enrolmentOf, metaPatchOf, ovmode } from '../domain/devices.ts';
import type { StoredEvent } from '../infra/eventstore/port.ts';
import type { Write } from '../infra/readstore/port.ts';
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const deviceKeys = {
  record: (id: string) => `device:${id}`,
  userMeta: (id: string) => `user-meta:${id}`,
  deviceMeta: (id: string) => `device-meta:${id}`,
  /** An owner's devices, by creation (or claim). */
  ofOwner: (ownerPrn: string) => `devices-of:${ownerPrn}`,
  /** The devices a nick names, in any case. */
  byNick: (nick: string) => `by-nick:${nick.toLowerCase()}`,
};

export const deviceList: Projection = {
  name: 'devices',
  // 2: records carry ovmode. (Deleted devices leave the index by nick since their event records the
  // nick; older deletions cannot, so the callbacks skip garbage devices: no replay is needed.)
  version: 2,
  description: "Device records, their metadata maps, owners' indexes and an index by nick.",
  project(e: StoredEvent) {
    const id = 'device_id' in e.data ? e.data.device_id : '';
    if (!id) return [];
    const key = deviceKeys.record(id);
    const modified = { 'time-modified': new Date(e.created).toISOString() };
    const nickIndex = deviceKeys.byNick;
    switch (e.type) {
      case 'DeviceCreated': {
        const d = e.data;
        const writes: Write[] = [
          {
            op: 'set',
            key,
            doc: {
              id,
              prn: d.prn,
              nick: d.nick,
              owner: d.owner_prn,
              'owner-nick': d.owner_nick,
              public: false,
              garbage: false,
              mark_public_processed: true,
              ownership_unverified: d.owner_id === '',
              ovmode: ovmode(enrolmentOf(d), d.owner_id !== ''),
              'time-created': modified['time-modified'],
              ...modified,
            },
          },
          { op: 'set', key: deviceKeys.userMeta(id), doc: d.user_meta },
          { op: 'set', key: deviceKeys.deviceMeta(id), doc: d.device_meta },
          { op: 'zadd', key: nickIndex(d.nick), member: id, score: e.position },
        ];
        if (d.owner_prn)
          writes.push({ op: 'zadd', key: deviceKeys.ofOwner(d.owner_prn), member: id, score: e.position });
        return writes;
      }
      case 'DeviceClaimed': {
        const d = e.data;
        return [
          {
            op: 'patch',
            key,
            doc: {
              owner: d.owner_prn,
              'owner-nick': d.owner_nick,
              nick: d.nick,
              ownership_unverified: false,
              ovmode: ovmode('claim', true), // only a device that registered itself is claimed
              ...modified,
            },
          },
          { op: 'zadd', key: deviceKeys.ofOwner(d.owner_prn), member: id, score: e.position },
          { op: 'zrem', key: nickIndex(d.previous_nick), member: id },
          { op: 'zadd', key: nickIndex(d.nick), member: id, score: e.position },
        ];
      }
      case 'DeviceRenamed':
        return [
          { op: 'patch', key, doc: { nick: e.data.nick, ...modified } },
          { op: 'zrem', key: nickIndex(e.data.previous_nick), member: id },
          { op: 'zadd', key: nickIndex(e.data.nick), member: id, score: e.position },
        ];
      case 'DevicePublicSet':
        return [
          { op: 'patch', key, doc: { public: e.data.public, mark_public_processed: false, ...modified } },
        ];
      case 'DevicePublicProcessed':
        return [{ op: 'patch', key, doc: { mark_public_processed: true, ...modified } }];
      case 'DeviceMarkedGarbage':
        return [
          { op: 'patch', key, doc: { garbage: true, ...modified } },
          { op: 'zrem', key: deviceKeys.ofOwner(e.data.owner_prn), member: id },
          // Recorded since deleting gives the nick back; a garbage device is named by its id.
          ...(e.data.nick ? [{ op: 'zrem' as const, key: nickIndex(e.data.nick), member: id }] : []),
        ];
      case 'DeviceMetaUpdated':
        return [
          // The read store applies the patch: the one metadata merge's, a null removing the key.
          { op: 'patch', key: deviceKeys.deviceMeta(id), doc: metaPatchOf(e.data.changed, e.data.removed) },
          { op: 'patch', key, doc: modified },
        ];
      case 'UserMetaReplaced':
        return [
          { op: 'set', key: deviceKeys.userMeta(id), doc: e.data.meta },
          { op: 'patch', key, doc: modified },
        ];
      default:
        return [];
    }
  },
};
