// Who may see or touch a device: shared by /devices, /trails and their tests of tenancy.
import type { Context } from 'koa';
import { DEVICE_PRN, type DeviceState, deviceStream, devices } from '../../domain/devices.ts';
import { cacheOf, load, nameOwner, type StateCache } from '../../infra/eventstore/aggregate.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { type Claims, changedSinceLogin, HUB_AUDIENCE } from '../auth/tokens.ts';
import { forbidden, notFound, unauthorized } from '../errors.ts';
import type { Viewer } from './records.ts';

export interface DeviceAccess {
  cache: StateCache<DeviceState>;
  /**
   * The device a reference (id, PRN or the caller's nick for it) names, and how the caller sees it.
   * 404 for anyone else's. `forOwnCommand`: the caller is about to run a command on its own
   * device (a device reporting); the state may then come from this process's cache unread, since
   * a device's PRN never changes and the command's append checks the stream's revision. Such a
   * state is `unverified`: the command decides on it again if it would refuse or change nothing.
   */
  resolve(
    ctx: Context,
    ref: string,
    options?: { forOwnCommand?: boolean },
  ): Promise<{ device: DeviceState; viewer: Viewer; unverified?: boolean }>;
}

export function deviceAccess(store: EventStore, admins: string[]): DeviceAccess {
  const cache = cacheOf(store, devices);
  const isAdmin = (claims: Claims) =>
    !claims.act && admins.some((a) => a.toLowerCase() === claims.nick.toLowerCase());
  return {
    cache,
    async resolve(ctx, ref, options) {
      const claims = ctx.state.auth!;
      let id = DEVICE_PRN.exec(ref)?.[1] ?? (/^[a-f0-9]{24}$/.test(ref) ? ref : '');
      if (options?.forOwnCommand && id && claims.type === 'DEVICE' && !store.exclusiveWriter) {
        const cached = cache.get(deviceStream(id))?.state;
        if (cached?.prn === claims.sub) {
          deviceLoginHolds(claims, cached);
          return { device: cached, viewer: 'device', unverified: true };
        }
      }
      const byNick = !id;
      if (byNick && claims.type === 'USER') {
        const ownerId = await nameOwner(store, 'prn', claims.sub);
        if (ownerId) id = (await nameOwner(store, `devnick-${ownerId}`, ref.toLowerCase())) ?? '';
      }
      const { state } = id
        ? await load(store, deviceStream(id), devices, cache)
        : { state: devices.initial() };
      if (!state.id) throw notFound('No such device.');
      // A deleted device gave up its nick, and its own token reaches nothing (as its login): only
      // its owner and admins still read it, by id or PRN. Mutations refuse it (the routes' update).
      if (state.garbage && (byNick || claims.type === 'DEVICE')) throw notFound('No such device.');
      if (claims.type === 'DEVICE' && claims.sub === state.prn) {
        deviceLoginHolds(claims, state);
        return { device: state, viewer: 'device' };
      }
      if (claims.type === 'USER' && state.ownerPrn && claims.sub === state.ownerPrn)
        return { device: state, viewer: 'owner' };
      if (claims.type === 'USER' && isAdmin(claims)) return { device: state, viewer: 'admin' };
      if (state.public && !state.garbage) return { device: state, viewer: 'public' };
      throw notFound('No such device.');
    },
  };
}

/** A device's login ends when its secret is rotated (401: it logs in again with the new one). */
export function deviceLoginHolds(claims: Claims, device: DeviceState): void {
  if (changedSinceLogin(device.secretChanged, claims))
    throw unauthorized("The device's secret changed since this login; log in again with the new one.");
}

/** Whether its owner's token `claims` is the owner's own full login: not a grant to a service or an
 * app, not an admin acting as the owner, not narrowed to some scopes. Of the owner's tokens only
 * these see (and rotate) a device's secret, with which anyone logs in as the device. */
export const ownFullLogin = (claims: Claims) =>
  claims.aud === HUB_AUDIENCE && !claims.azp && !claims.act && claims.scopes.includes('*');

/** Whether the caller sees the device's secret: the device itself, or its owner's own full login. */
export const seesSecret = (claims: Claims, viewer: Viewer) =>
  viewer === 'device' || (viewer === 'owner' && ownFullLogin(claims));

/** Mutations are the owner's. Whoever else sees the device (itself, an admin, anyone when it is
 * public) gets 403; the others were answered 404 by resolve: they must not learn it exists. */
export function ownerOnly(viewer: Viewer): void {
  if (viewer !== 'owner') throw forbidden('Only the owner may do this.');
}
