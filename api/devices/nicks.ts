// A device's nick, unique among its owner's devices (case-insensitively): reserved in the
// unique-name stream devnick-<owner id> before the command that records it, and given back when
// that command fails or the device gives it up.
import { randomBytes } from 'node:crypto';
import { type DeviceState, deviceStream, devices } from '../../domain/devices.ts';
import {
  claimName,
  load,
  NameTakenError,
  nameOwner,
  releaseName,
  type StateCache,
} from '../../infra/eventstore/aggregate.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { refuseIdShapedNick } from '../context.ts';
import { conflict, unprocessable } from '../errors.ts';

/** Nicks that are path segments under /devices (compared lower-cased, as paths are). */
const RESERVED_NICKS = new Set(['register']);

/** /devices/{id} takes an id, a PRN or a nick, in that order, and /devices/register is a path of
 * its own: a nick of 24 hex digits would be read as an id (another device's, or none), and
 * "register" would name no device. */
export function refuseReserved(nick: string, field: string): void {
  if (RESERVED_NICKS.has(nick.toLowerCase()))
    throw unprocessable(`The nick "${nick}" is reserved: it names a path.`, [
      { field, problem: 'is reserved' },
    ]);
  refuseIdShapedNick(nick, field);
}
const ADJECTIVES = [
  'amber',
  'brave',
  'calm',
  'eager',
  'fuzzy',
  'gentle',
  'happy',
  'jolly',
  'lucky',
  'mighty',
  'noble',
  'quiet',
  'rapid',
  'silent',
  'swift',
  'witty',
];
const NOUNS = [
  'badger',
  'crane',
  'falcon',
  'gecko',
  'heron',
  'ibis',
  'lynx',
  'marten',
  'otter',
  'panda',
  'quokka',
  'raven',
  'tapir',
  'walrus',
  'yak',
  'zebra',
];
const pick = (list: string[]) => list[randomBytes(1)[0]! % list.length]!;

/** A nick for a device that was given none: an adjective and an animal. */
export const generatedNick = () => `${pick(ADJECTIVES)}_${pick(NOUNS)}`;

export function deviceNicks(store: EventStore, cache: StateCache<DeviceState>) {
  /** A free nick among the owner's devices: the one asked for (409 when taken) or a generated one. */
  async function take(ownerId: string, deviceId: string, asked?: string, field = 'nick'): Promise<string> {
    if (asked) {
      refuseReserved(asked, field);
      for (let attempt = 0; ; attempt++) {
        try {
          await claimName(store, `devnick-${ownerId}`, asked.toLowerCase(), deviceId);
          return asked;
        } catch (err) {
          if (!(err instanceof NameTakenError)) throw err;
          // Devices deleted before deletion gave nicks back still hold theirs: such a nick is free.
          const holder = await nameOwner(store, `devnick-${ownerId}`, asked.toLowerCase());
          const held = holder ? (await load(store, deviceStream(holder), devices, cache)).state : undefined;
          if (attempt > 0 || !held?.garbage) throw conflict('You have a device with this nick already.');
          await releaseName(store, `devnick-${ownerId}`, asked.toLowerCase(), held.id);
        }
      }
    }
    for (let i = 0; ; i++) {
      const nick = `${generatedNick()}${i > 2 ? `_${randomBytes(2).toString('hex')}` : ''}`;
      try {
        await claimName(store, `devnick-${ownerId}`, nick, deviceId);
        return nick;
      } catch (err) {
        if (!(err instanceof NameTakenError)) throw err;
      }
    }
  }

  /**
   * After a command that took a nick failed with `err`: gives the nick back, unless the device holds
   * it now, and throws `err`. A nick is reserved for the device, not the request, so a concurrent
   * request for the same device and nick (a double-click on claim) shares the reservation, and may
   * be the one that succeeded; so may this one, if only its answer was lost.
   */
  async function giveBack(err: unknown, ownerId: string, nick: string, deviceId: string): Promise<never> {
    const { state } = await load(store, deviceStream(deviceId), devices);
    const holds =
      !state.garbage && state.ownerId === ownerId && state.nick.toLowerCase() === nick.toLowerCase();
    if (!holds) await release(ownerId, nick, deviceId);
    throw err;
  }

  /** The nick is free again for another of the owner's devices. */
  const release = (ownerId: string, nick: string, deviceId: string) =>
    releaseName(store, `devnick-${ownerId}`, nick.toLowerCase(), deviceId);

  return { take, giveBack, release };
}
