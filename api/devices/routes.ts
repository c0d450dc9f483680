// /devices: devices of their owners, the devices themselves, and their two metadata maps.
// device-meta is the highest-volume write of the system: its path loads the device from a cached
// state plus the stream's tail, appends nothing when nothing changed, and answers one record.

import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import { LRUCache } from 'lru-cache';
import { accountStream, accounts } from '../../domain/accounts.ts';
import {
  type CreateDevice,
  checkNewDevice,
  DEVICE_PRN,
  type DeviceState,
  decideClaim,
  decideCreate,
  decideDelete,
  decideRename,
  decideReplaceUserMeta,
  decideReportDeviceMeta,
  decideRotateSecret,
  decideSetPublic,
  devicePrn,
  deviceStream,
  devices,
  type Owner,
  refuseGone,
  refuseUnclaimable,
} from '../../domain/devices.ts';
import type { DomainEvent } from '../../domain/events.ts';
import { claimName, load, nameOwner } from '../../infra/eventstore/aggregate.ts';
import { seal, secretToken, unseal } from '../../infra/secrets.ts';
import { deviceKeys } from '../../projections/devices.ts';
import { requireAccountType, requireScope } from '../auth/middleware.ts';
import type { HubContext } from '../context.ts';
import { decideOn, NICK, PAGE_QUERY, pageSchema } from '../context.ts';
import { forbidden, unprocessable } from '../errors.ts';
import { fixedWindowLimit } from '../http.ts';
import { NOT_PROTO, type Routes } from '../routes.ts';
import { type Schema, s } from '../schema.ts';
import { deviceAccess, deviceLoginHolds, ownerOnly, ownFullLogin, seesSecret } from './access.ts';
import { CsrError } from './ca.ts';
import { deviceNicks, generatedNick, refuseReserved } from './nicks.ts';
import { deviceRecord, type Viewer } from './records.ts';

const DEVICE_RECORD = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    prn: { type: 'string' },
    nick: { type: 'string' },
    owner: { type: 'string' },
    'owner-nick': { type: 'string' },
    public: { type: 'boolean' },
    garbage: { type: 'boolean' },
    mark_public_processed: { type: 'boolean' },
    ownership_unverified: {
      type: 'boolean',
      description: 'True while the device has no owner (registered itself, not claimed yet).',
    },
    ovmode: {
      type: 'object',
      description:
        "Ownership verification, the server's: `mode` is how the device was enrolled (`owned`: created by its owner; `claim`: registered itself, claimed with its challenge; `idevid`: registered from an IDevID CSR), `root_of_trust` what vouches for it (`secret`, or `certificate` issued by the device CA), `status` `verified` once it has an owner, else `unverified`.",
      properties: {
        mode: { type: 'string', enum: ['owned', 'claim', 'idevid'] },
        root_of_trust: { type: 'string', enum: ['secret', 'certificate'] },
        status: { type: 'string', enum: ['verified', 'unverified'] },
      },
    },
    'user-meta': { type: 'object', additionalProperties: { type: 'string' } },
    'device-meta': { type: 'object', additionalProperties: { type: 'string' } },
    secret: { type: 'string', description: 'Only to the owner and the device itself.' },
    challenge: { type: 'string', description: 'Only while unowned, to the device itself.' },
    certificate: {
      type: 'string',
      description: 'POST /devices/register only: the issued certificate (PEM).',
    },
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
  },
};

export function deviceRoutes(hub: HubContext) {
  const { store, config } = hub;
  const access = deviceAccess(store, config.admins);
  const { cache, resolve } = access;
  // Unsealing is AES work on the hot path (device-meta answers carry the secret): memoised, bounded.
  const unsealed = new LRUCache<string, string>({ max: config.stateCacheEntries });
  /** The device the path names, when the caller owns it (authorize of the owner's commands). */
  const ownedDevice = async (ctx: Context) => {
    const found = await resolve(ctx, ctx.params.id!);
    ownerOnly(found.viewer);
    return found;
  };
  /** The device the path names, when it is the caller (authorize of device-meta). */
  const callingDevice = async (ctx: Context) => {
    if (ctx.state.auth!.type !== 'DEVICE') throw forbidden('Only the device itself reports device-meta.');
    const found = await resolve(ctx, ctx.params.id!, { forOwnCommand: true });
    if (found.viewer !== 'device') throw forbidden('A device reports only its own metadata.');
    return found;
  };

  /** The device's secret for the record, when the caller sees it (access.ts `seesSecret`). */
  const secretOf = (ctx: Context, viewer: Viewer, d: DeviceState) =>
    seesSecret(ctx.state.auth!, viewer)
      ? () => {
          let secret = unsealed.get(d.secretSealed);
          if (secret === undefined) {
            secret = unseal(hub.keys.sealKey, d.secretSealed);
            unsealed.set(d.secretSealed, secret);
          }
          return secret;
        }
      : undefined;

  const metaValue = s.string({ maxLength: config.metaMaxValueLength });
  const metaMap = <V>(values: Schema<V>) =>
    s.map({
      propertyNames: { ...NOT_PROTO, maxLength: config.metaMaxKeyLength, minLength: 1 },
      additionalProperties: values,
    });
  const META = metaMap(metaValue);
  const META_PATCH = metaMap(s.anyOf(metaValue, s.null()));
  const nicks = deviceNicks(store, cache);

  /** The caller's account, when it may own devices (a user's). */
  async function ownerAccount(prn: string): Promise<Owner> {
    const id = await nameOwner(store, 'prn', prn);
    const { state } = id ? await load(store, accountStream(id), accounts) : { state: accounts.initial() };
    if (!state.id || state.type !== 'USER') throw forbidden('Only user accounts own devices.');
    return state;
  }

  /** Appends what `decide` makes of the device's state, and answers the state after it. */
  async function update(
    ctx: Context,
    id: string,
    decide: (d: DeviceState) => DomainEvent[],
    options: { loaded?: DeviceState } = {},
  ) {
    return decideOn(hub, ctx, deviceStream(id), devices, decide, {
      cache,
      loaded: options.loaded ? cache.get(deviceStream(id)) : undefined,
    });
  }

  /** Creates the device (decideCreate) after claiming its PRN. */
  async function createDevice(
    ctx: Context,
    d: Omit<CreateDevice, 'secretSealed' | 'challenge' | 'maxMetaKeys'> & { secret: string },
  ): Promise<DeviceState> {
    const { secret, ...rest } = d;
    const command = {
      ...rest,
      secretSealed: seal(hub.keys.sealKey, secret),
      challenge: secretToken(12),
      maxMetaKeys: config.metaMaxKeys,
    };
    await claimName(store, 'prn', devicePrn(d.id), d.id);
    return update(ctx, d.id, (s) => decideCreate(command, s));
  }

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/devices',
      tag: 'devices',
      summary:
        'Create a device: owned by the caller, or, without a token, an unowned device registering itself.',
      description:
        'With a user token the device belongs to the caller. Without a token, a device registers itself: it is unowned (`ownership_unverified`), and its owner claims it with the `challenge` it answers (POST /devices/{id}/claim). Either way the answer carries the device PRN and its `secret`, the password of POST /auth/login.',
      security: 'optional-bearer',
      scopes: requireScope('devices', 'write'),
      body: s.object({
        additionalProperties: false,
        properties: {
          nick: { ...NICK, description: "Unique among the owner's devices; generated when absent." },
          secret: s.string({ minLength: 16, maxLength: 256, description: 'Generated when absent.' }),
          'user-meta': META,
          'device-meta': META,
        },
      }),
      responses: { 200: { description: 'The device, with its secret.', schema: DEVICE_RECORD } },
      handler: async (ctx, { body }) => {
        let owner: Owner | undefined;
        if (ctx.state.auth) {
          owner = await ownerAccount(ctx.state.auth.sub);
        } else {
          await fixedWindowLimit(
            hub.fixedWindows,
            `device-register:${ctx.ip}`,
            config.deviceRegisterLimitPerMinute,
          );
        }
        const meta = { userMeta: body['user-meta'] ?? {}, deviceMeta: body['device-meta'] ?? {} };
        checkNewDevice({ owner, ...meta, maxMetaKeys: config.metaMaxKeys }); // before a nick is taken
        const id = randomBytes(12).toString('hex');
        if (!owner && body.nick) refuseReserved(body.nick, 'nick'); // claimed later, under this nick
        const nick = owner ? await nicks.take(owner.id, id, body.nick) : (body.nick ?? generatedNick());
        const secret = body.secret ?? secretToken();
        const device = await createDevice(ctx, { id, owner, nick, secret, ...meta, certificate: null });
        // A device registering itself learns its secret here; an owner's grant does not (it sent it, if any).
        ctx.body = deviceRecord(
          device,
          owner ? 'owner' : 'device',
          !owner || ownFullLogin(ctx.state.auth!) ? () => secret : undefined,
        );
      },
    });

    routes.add({
      method: 'post',
      path: '/devices/register',
      tag: 'devices',
      summary:
        "Register a device from its IDevID certificate signing request; the hub's device CA issues its certificate.",
      description:
        '`csr` is a PKCS#10 request (PEM); its signature must verify (422 naming the problem otherwise). `device-name` becomes the device nick, `name` the user-meta `name`. The answer is the Device record plus `certificate`.',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: s.object({
        required: ['csr'],
        additionalProperties: false,
        properties: {
          csr: s.string({ minLength: 1, maxLength: 65_536 }),
          'device-name': NICK,
          name: s.string({ maxLength: 256 }),
        },
      }),
      responses: {
        200: { description: 'The device, with its secret and certificate.', schema: DEVICE_RECORD },
      },
      handler: async (ctx, { body }) => {
        const owner = await ownerAccount(ctx.state.auth!.sub);
        const id = randomBytes(12).toString('hex');
        if (body['device-name']) refuseReserved(body['device-name'], 'device-name'); // before any signing
        let issued: { certificate: string };
        try {
          issued = await hub.deviceCa.issue(body.csr, id);
        } catch (err) {
          if (err instanceof CsrError)
            throw unprocessable(`Invalid CSR: ${err.message}.`, [{ field: 'csr', problem: err.message }]);
          throw err;
        }
        const nick = await nicks.take(owner.id, id, body['device-name'], 'device-name');
        const secret = secretToken();
        const device = await createDevice(ctx, {
          id,
          owner,
          nick,
          secret,
          userMeta: body.name ? { name: body.name } : {},
          deviceMeta: {},
          certificate: issued.certificate,
        });
        ctx.body = {
          ...deviceRecord(device, 'owner', ownFullLogin(ctx.state.auth!) ? () => secret : undefined),
          certificate: issued.certificate,
        };
      },
    });

    routes.add({
      method: 'get',
      path: '/devices',
      tag: 'devices',
      summary: 'Your devices, newest first (garbage ones left out).',
      description: 'A device owns no devices: its token gets 403.',
      waitsForWrites: true,
      security: 'bearer',
      scopes: requireScope('devices', 'read'),
      middleware: [requireAccountType('USER', 'SERVICE')],
      query: s.object({ properties: PAGE_QUERY }),
      responses: {
        200: { description: 'A page of devices (no secrets).', schema: pageSchema(DEVICE_RECORD) },
      },
      handler: async (ctx, { query }) => {
        await hub.consistency.readable(ctx, ['devices']);
        const rs = hub.readStore;
        const g = await rs.activeGeneration('devices');
        const key = deviceKeys.ofOwner(ctx.state.auth!.sub);
        const ids = await rs.range('devices', g, key, {
          reverse: true,
          offset: query.skip,
          limit: query.limit,
        });
        const items = await Promise.all(
          ids.map(async (id) => ({
            ...(await rs.get('devices', g, deviceKeys.record(id))),
            'user-meta': (await rs.get('devices', g, deviceKeys.userMeta(id))) ?? {},
            'device-meta': (await rs.get('devices', g, deviceKeys.deviceMeta(id))) ?? {},
          })),
        );
        ctx.body = { items, total: await rs.count('devices', g, key), limit: query.limit, skip: query.skip };
      },
    });

    routes.add({
      method: 'get',
      path: '/devices/{id}',
      tag: 'devices',
      summary: 'A device by id, PRN or nick: yours, yourself (a device), any for an admin, or a public one.',
      security: 'bearer',
      scopes: requireScope('devices', 'read'),
      responses: {
        200: { description: 'The device; the secret only for its owner and itself.', schema: DEVICE_RECORD },
      },
      handler: async (ctx) => {
        const { device, viewer } = await resolve(ctx, ctx.params.id!);
        ctx.body = deviceRecord(device, viewer, secretOf(ctx, viewer, device));
      },
    });

    routes.add({
      method: 'patch',
      path: '/devices/{id}',
      tag: 'devices',
      summary: 'Rename a device (owner).',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: s.object({ required: ['nick'], additionalProperties: false, properties: { nick: NICK } }),
      responses: { 200: { description: 'The device.', schema: DEVICE_RECORD } },
      authorize: ownedDevice,
      handler: async (ctx, { body, allowed: { device, viewer } }) => {
        refuseGone(device); // before its new nick is taken
        const renamed = body.nick.toLowerCase() !== device.nick.toLowerCase();
        if (renamed) await nicks.take(device.ownerId, device.id, body.nick);
        const updated = await update(ctx, device.id, (d) => decideRename(body, d)).catch((err) =>
          renamed ? nicks.giveBack(err, device.ownerId, body.nick, device.id) : Promise.reject(err),
        ); // deleted meanwhile
        if (renamed) await nicks.release(device.ownerId, device.nick, device.id);
        ctx.body = deviceRecord(updated, viewer, secretOf(ctx, viewer, updated));
      },
    });

    for (const [method, value] of [
      ['put', true],
      ['delete', false],
    ] as const) {
      routes.add({
        method,
        path: '/devices/{id}/public',
        tag: 'devices',
        summary: value
          ? 'Make a device (and its steps) public (owner).'
          : 'Make a device (and its steps) private (owner).',
        security: 'bearer',
        scopes: requireScope('devices', 'write'),
        responses: { 200: { description: 'The device.', schema: DEVICE_RECORD } },
        handler: async (ctx) => {
          const { device, viewer } = await resolve(ctx, ctx.params.id!);
          ownerOnly(viewer);
          const updated = await update(ctx, device.id, (d) => decideSetPublic({ public: value }, d));
          ctx.body = deviceRecord(updated, viewer, secretOf(ctx, viewer, updated));
        },
      });
    }

    routes.add({
      method: 'delete',
      path: '/devices/{id}',
      tag: 'devices',
      summary: 'Delete a device (owner): it is marked garbage, leaves your list and can no longer log in.',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      responses: { 200: { description: 'The device, garbage.', schema: DEVICE_RECORD } },
      handler: async (ctx) => {
        const { device, viewer } = await resolve(ctx, ctx.params.id!);
        ownerOnly(viewer);
        const updated = await update(ctx, device.id, decideDelete); // again: changes nothing, answers the same
        // Its nick is free for another of the owner's devices.
        await nicks.release(updated.ownerId, updated.nick, updated.id);
        ctx.body = deviceRecord(updated, viewer);
      },
    });

    routes.add({
      method: 'post',
      path: '/devices/{id}/claim',
      tag: 'devices',
      summary: 'Claim an unowned device with the challenge it registered with.',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: s.object({
        required: ['challenge'],
        additionalProperties: false,
        properties: { challenge: s.string({ maxLength: 256 }), nick: NICK },
      }),
      responses: { 200: { description: 'The device, now yours.', schema: DEVICE_RECORD } },
      handler: async (ctx, { body }) => {
        const owner = await ownerAccount(ctx.state.auth!.sub);
        const id = DEVICE_PRN.exec(ctx.params.id!)?.[1] ?? ctx.params.id!;
        const { state } = /^[a-f0-9]{24}$/.test(id)
          ? await load(store, deviceStream(id), devices, cache)
          : { state: devices.initial() };
        refuseUnclaimable(body.challenge, state); // before the nick is taken
        const nick = await nicks.take(owner.id, id, body.nick ?? state.nick);
        const command = { challenge: body.challenge, owner, nick };
        const updated = await update(ctx, id, (d) => decideClaim(command, d)).catch((err) =>
          nicks.giveBack(err, owner.id, nick, id),
        ); // claimed or deleted meanwhile
        ctx.body = deviceRecord(updated, 'owner', secretOf(ctx, 'owner', updated));
      },
    });

    routes.add({
      method: 'post',
      path: '/devices/{id}/secret',
      tag: 'devices',
      summary: "Rotate a device's login secret (its owner's own login, or the device itself).",
      description:
        'Sets `secret` when given, else a generated one, and answers the Device record with it. The logins made with the old secret end at once (401 on their next request): the device logs in again with the new one. Tokens delegated to services and apps cannot rotate it (403), as they never see it.',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: s.object({
        additionalProperties: false,
        properties: {
          secret: s.string({ minLength: 16, maxLength: 256, description: 'Generated when absent.' }),
        },
      }),
      responses: { 200: { description: 'The device, with its new secret.', schema: DEVICE_RECORD } },
      authorize: async (ctx) => {
        const found = await resolve(ctx, ctx.params.id!);
        if (found.viewer !== 'device') ownerOnly(found.viewer);
        if (!seesSecret(ctx.state.auth!, found.viewer))
          throw forbidden(
            "Only the owner's own login (not a token granted to a service or an app) or the device rotates its secret.",
          );
        refuseGone(found.device);
        return found;
      },
      handler: async (ctx, { body, allowed: { device, viewer } }) => {
        const secret = body.secret ?? secretToken();
        const command = { secretSealed: seal(hub.keys.sealKey, secret) };
        const updated = await update(ctx, device.id, (d) => decideRotateSecret(command, d));
        ctx.body = deviceRecord(updated, viewer, () => secret);
      },
    });

    routes.add({
      method: 'patch',
      path: '/devices/{id}/device-meta',
      tag: 'devices',
      summary: 'Report device metadata (the device itself): merges the map; a null value removes a key.',
      description:
        "Only the device's own token. Keys and values are strings (limits: HUB_META_MAX_KEY_LENGTH and HUB_META_MAX_VALUE_LENGTH, 422; HUB_META_MAX_KEYS keys in the merged map, 413). A patch that changes nothing appends nothing. Answers the Device record.",
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: META_PATCH,
      responses: { 200: { description: 'The device.', schema: DEVICE_RECORD } },
      authorize: callingDevice,
      handler: async (ctx, { body, allowed: { device, unverified } }) => {
        const claims = ctx.state.auth!;
        const command = { patch: body, maxMetaKeys: config.metaMaxKeys };
        const updated = await update(
          ctx,
          device.id,
          (d) => {
            deviceLoginHolds(claims, d); // a cached state may not have seen a rotation elsewhere
            return decideReportDeviceMeta(command, d);
          },
          { loaded: unverified ? undefined : device },
        );
        ctx.body = deviceRecord(updated, 'device', secretOf(ctx, 'device', updated));
      },
    });

    routes.add({
      method: 'put',
      path: '/devices/{id}/user-meta',
      tag: 'devices',
      summary: 'Replace the user metadata of your device (owner): tags, labels.',
      security: 'bearer',
      scopes: requireScope('devices', 'write'),
      body: META,
      responses: { 200: { description: 'The device.', schema: DEVICE_RECORD } },
      authorize: ownedDevice,
      handler: async (ctx, { body, allowed: { device, viewer } }) => {
        const command = { meta: body, maxMetaKeys: config.metaMaxKeys };
        const updated = await update(ctx, device.id, (d) => decideReplaceUserMeta(command, d));
        ctx.body = deviceRecord(updated, viewer, secretOf(ctx, viewer, updated));
      },
    });
  };
}
