// /apps: third-party applications of the caller. An app is addressed by id, nick (among the
// caller's apps) or PRN; other accounts' apps answer 404.
import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import { accountStream, accounts } from '../../domain/accounts.ts';
import {
  type AppFields,
  type AppState,
  appRecord,
  appStream,
  apps,
  checkAppUpdate,
  decideDelete,
  decideRegister,
  decideUpdate,
  type Scope,
} from '../../domain/apps.ts';
import type { DomainEvent } from '../../domain/events.ts';
import { claimName, load, NameTakenError, nameOwner, releaseName } from '../../infra/eventstore/aggregate.ts';
import { secretToken, sha256 } from '../../infra/secrets.ts';
import { appKeys } from '../../projections/apps.ts';
import { requireScope } from '../auth/middleware.ts';
import type { HubContext } from '../context.ts';
import { decideOn, NICK, PAGE_QUERY, pageSchema, REDIRECT_URIS, refuseIdShapedNick } from '../context.ts';
import { conflict, notFound } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { type Infer, s } from '../schema.ts';

const SCOPE = s.object({
  required: ['id'],
  additionalProperties: false,
  properties: {
    id: s.string({
      pattern: '^[a-z][a-z0-9._-]{0,63}$',
      description: 'Lowercase letters, digits, . _ -.',
    }),
    description: s.string({ maxLength: 512 }),
    required: s.boolean(),
    service: s.string({ maxLength: 256 }),
  },
});
const APP_FIELDS = {
  nick: { ...NICK, description: 'Unique among your apps; not of the form of an id (24 hex digits).' },
  name: s.string({ minLength: 1, maxLength: 256 }),
  logo: s.string({ maxLength: 4096 }),
  redirect_uris: REDIRECT_URIS,
  scopes: s.array({ maxItems: 100, items: SCOPE }),
  exposed_scopes: s.array({ maxItems: 100, items: SCOPE }),
  type: s.enum(['public', 'confidential'], {
    description: 'confidential apps get a secret, shown once, on creation.',
  }),
};
const APP_BODY = s.object({
  required: ['nick', 'name'],
  additionalProperties: false,
  properties: APP_FIELDS,
});
const APP_RECORD = {
  type: 'object',
  properties: {
    id: { type: 'string' },
    prn: { type: 'string' },
    ...APP_FIELDS,
    exposedScopesLength: { type: 'integer' },
    owner: { type: 'string' },
    'owner-nick': { type: 'string' },
    secret: { type: 'string', description: 'Confidential apps, on creation only.' },
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
    'deleted-at': { type: 'string' },
  },
};

const scopeOf = (scope: Infer<typeof SCOPE>): Scope => ({
  id: scope.id,
  description: scope.description ?? '',
  required: scope.required ?? false,
  service: scope.service ?? '',
});
const fieldsOf = (body: Infer<typeof APP_BODY>): AppFields => ({
  nick: body.nick,
  name: body.name,
  logo: body.logo ?? '',
  redirect_uris: body.redirect_uris ?? [],
  scopes: (body.scopes ?? []).map(scopeOf),
  exposed_scopes: (body.exposed_scopes ?? []).map(scopeOf),
});

export function appRoutes(hub: HubContext) {
  const { store } = hub;
  const ownerOf = (ctx: { state: { auth?: { sub: string } } }) => ctx.state.auth!.sub;

  /** The caller's app by id, nick or PRN; 404 for anyone else's or a deleted one. */
  async function findApp(ownerPrn: string, ref: string): Promise<AppState> {
    const ownerId = await nameOwner(store, 'prn', ownerPrn);
    let id = ref.startsWith('prn:::apps:/') ? ref.slice('prn:::apps:/'.length) : ref;
    if (!/^[a-f0-9]{24}$/.test(id) && ownerId)
      id = (await nameOwner(store, `appnick-${ownerId}`, ref.toLowerCase())) ?? '';
    const { state } = id ? await load(store, appStream(id), apps) : { state: apps.initial() };
    if (!state.id || state.deleted || state.ownerPrn !== ownerPrn) throw notFound('No such app.');
    return state;
  }

  /** Reserves the nick among the owner's apps (unique names are their own streams). */
  async function reserveNick(ownerId: string, nick: string, appId: string): Promise<void> {
    try {
      await claimName(store, `appnick-${ownerId}`, nick.toLowerCase(), appId);
    } catch (err) {
      if (err instanceof NameTakenError) throw conflict('You have an app with this nick already.');
      throw err;
    }
  }

  /** Decides on the app's state, and answers the state after it. */
  const update = (ctx: Context, id: string, decide: (a: AppState) => DomainEvent[]) =>
    decideOn(hub, ctx, appStream(id), apps, decide);

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/apps',
      tag: 'apps',
      summary: 'Register a third-party app.',
      security: 'bearer',
      scopes: requireScope('apps', 'write'),
      body: APP_BODY,
      responses: {
        200: { description: 'The app; `secret` once, for confidential apps.', schema: APP_RECORD },
      },
      handler: async (ctx, { body }) => {
        const ownerId = await nameOwner(store, 'prn', ownerOf(ctx));
        if (!ownerId) throw notFound('The account of this token no longer exists.');
        const { state: owner } = await load(store, accountStream(ownerId), accounts);
        const id = randomBytes(12).toString('hex');
        refuseIdShapedNick(body.nick, 'nick');
        await reserveNick(ownerId, body.nick, id);
        const type = body.type ?? 'public';
        const secret = type === 'confidential' ? secretToken() : undefined;
        const command = {
          id,
          owner: { id: ownerId, prn: owner.prn, nick: owner.nick },
          type,
          secretHash: secret ? sha256(secret) : null,
          fields: fieldsOf(body),
        };
        ctx.body = appRecord(await update(ctx, id, (a) => decideRegister(command, a)), secret);
      },
    });

    routes.add({
      method: 'get',
      path: '/apps',
      tag: 'apps',
      summary: 'Your apps, newest first.',
      waitsForWrites: true,
      security: 'bearer',
      scopes: requireScope('apps', 'read'),
      query: s.object({ properties: PAGE_QUERY }),
      responses: { 200: { description: 'A page of apps.', schema: pageSchema(APP_RECORD) } },
      handler: async (ctx, { query }) => {
        await hub.consistency.readable(ctx, ['apps']);
        const rs = hub.readStore;
        const generation = await rs.activeGeneration('apps');
        const key = appKeys.ofOwner(ownerOf(ctx));
        const ids = await rs.range('apps', generation, key, {
          reverse: true,
          offset: query.skip,
          limit: query.limit,
        });
        const items = (
          await Promise.all(ids.map((id) => rs.get('apps', generation, appKeys.record(id))))
        ).filter(Boolean);
        ctx.body = {
          items,
          total: await rs.count('apps', generation, key),
          limit: query.limit,
          skip: query.skip,
        };
      },
    });

    routes.add({
      method: 'get',
      path: '/apps/{id}',
      tag: 'apps',
      summary: 'One of your apps, by id, nick or PRN.',
      security: 'bearer',
      scopes: requireScope('apps', 'read'),
      responses: { 200: { description: 'The app.', schema: APP_RECORD } },
      handler: async (ctx) => {
        ctx.body = appRecord(await findApp(ownerOf(ctx), ctx.params.id!));
      },
    });

    routes.add({
      method: 'put',
      path: '/apps/{id}',
      tag: 'apps',
      summary: "Replace an app's fields (id, nick or PRN). Its type cannot change.",
      security: 'bearer',
      scopes: requireScope('apps', 'write'),
      body: APP_BODY,
      responses: { 200: { description: 'The app record.', schema: APP_RECORD } },
      authorize: (ctx) => findApp(ownerOf(ctx), ctx.params.id!),
      handler: async (ctx, { body, allowed: app }) => {
        checkAppUpdate(body, app);
        const renamed = body.nick.toLowerCase() !== app.fields.nick.toLowerCase();
        if (renamed) {
          refuseIdShapedNick(body.nick, 'nick');
          await reserveNick(app.ownerId, body.nick, app.id);
        }
        const command = { type: body.type, fields: fieldsOf(body) };
        const updated = await update(ctx, app.id, (a) => decideUpdate(command, a));
        if (renamed)
          await releaseName(store, `appnick-${app.ownerId}`, app.fields.nick.toLowerCase(), app.id);
        ctx.body = appRecord(updated);
      },
    });

    routes.add({
      method: 'delete',
      path: '/apps/{id}',
      tag: 'apps',
      summary: 'Delete an app (id, nick or PRN); answers its record with deleted-at.',
      security: 'bearer',
      scopes: requireScope('apps', 'write'),
      responses: { 200: { description: 'The deleted app.', schema: APP_RECORD } },
      handler: async (ctx) => {
        const app = await findApp(ownerOf(ctx), ctx.params.id!);
        const deleted = await update(ctx, app.id, decideDelete);
        await releaseName(store, `appnick-${app.ownerId}`, app.fields.nick.toLowerCase(), app.id);
        ctx.body = appRecord(deleted);
      },
    });
  };
}
