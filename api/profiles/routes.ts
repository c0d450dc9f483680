// /profiles/: the caller's profile, kept in the account's own stream.
import { type AccountState, accountStream, accounts } from '../../domain/accounts.ts';
import { decideUpdateProfile } from '../../domain/profiles.ts';
import { load, nameOwner } from '../../infra/eventstore/aggregate.ts';
import { PROFILE_TEXT, profileRecord } from '../auth/accounts.ts';
import { requireScope } from '../auth/middleware.ts';
import { decideOn, type HubContext } from '../context.ts';
import { notFound } from '../errors.ts';
import { NOT_PROTO, type Routes } from '../routes.ts';
import { s } from '../schema.ts';

const TEXT = s.string({ maxLength: 1024 });
const OVMODE = s.object({
  additionalProperties: false,
  properties: {
    mode: s.string({ maxLength: 64 }),
    root_of_trust: s.string({ maxLength: 64 }),
    status: s.string({ maxLength: 64 }),
  },
});
const PROFILE = s.object({
  additionalProperties: false,
  properties: {
    // Object.fromEntries does not keep the names of its keys.
    ...(Object.fromEntries(PROFILE_TEXT.map((f) => [f, TEXT])) as Record<
      (typeof PROFILE_TEXT)[number],
      typeof TEXT
    >),
    nick: s.string({ description: "Read-only here: must equal the account's nick when sent." }),
    email: s.string({ description: "Read-only here: must equal the account's email when sent." }),
    meta: s.map({
      maxProperties: 100,
      additionalProperties: s.string({ maxLength: 1024 }),
      propertyNames: { ...NOT_PROTO, minLength: 1, maxLength: 128 },
    }),
    ovmode: OVMODE,
    'time-created': s.string({ description: 'Ignored in requests.' }),
    'time-modified': s.string({ description: 'Ignored in requests.' }),
  },
});

export function profileRoutes(hub: HubContext) {
  const { store } = hub;

  async function own(prn: string): Promise<AccountState> {
    const id = await nameOwner(store, 'prn', prn);
    const { state } = id ? await load(store, accountStream(id), accounts) : { state: accounts.initial() };
    if (!state.id) throw notFound('The account of this token no longer exists.');
    return state;
  }

  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/profiles/',
      tag: 'profiles',
      summary: 'Your profile.',
      security: 'bearer',
      scopes: requireScope('profiles', 'read'),
      responses: { 200: { description: 'The profile.', schema: PROFILE } },
      handler: async (ctx) => {
        ctx.body = profileRecord(await own(ctx.state.auth!.sub));
      },
    });

    routes.add({
      method: 'put',
      path: '/profiles/',
      tag: 'profiles',
      summary: 'Replace your profile (fields not sent become empty).',
      security: 'bearer',
      scopes: requireScope('profiles', 'write'),
      body: PROFILE,
      responses: { 200: { description: 'The profile.', schema: PROFILE } },
      handler: async (ctx, { body }) => {
        const account = await own(ctx.state.auth!.sub);
        const command = {
          nick: body.nick,
          email: body.email,
          profile: Object.fromEntries(
            PROFILE_TEXT.filter((f) => body[f] !== undefined).map((f) => [f, body[f]!]),
          ),
          meta: body.meta ?? {},
          ovmode: body.ovmode ?? null,
        };
        const after = await decideOn(hub, ctx, accountStream(account.id), accounts, (s) =>
          decideUpdateProfile(command, s),
        );
        ctx.body = profileRecord(after); // as stored: its time-modified is the event's, as GET shows
      },
    });
  };
}
