// Logging in and staying logged in: POST /auth/login for every account class (an admin may log in
// as a user), GET /auth/login to refresh a token within its login's window, the claims of a token,
// and refresh tokens rotated at each use (their family is the login: domain/logins.ts).
import type { Context } from 'koa';
import type { AccountState } from '../../domain/accounts.ts';
import { DEVICE_PRN, deviceStream, devices } from '../../domain/devices.ts';
import {
  decideRotateRefreshToken,
  decideStartLogin,
  refreshFamilies,
  refreshStream,
  refusedAsReused,
  refuseEndedLogin,
  refuseWrongCredentials,
} from '../../domain/logins.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import { DUMMY_HASH, sameSecret, secretToken, sha256, unseal, verifyPassword } from '../../infra/secrets.ts';
import { forbidden, HttpError, invalidCredentials, unauthorized } from '../errors.ts';
import { fixedWindowLimit } from '../http.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { type AuthContext, lower, newId } from './context.ts';
import { TOKEN_RESPONSE, tokenResponse } from './schemas.ts';
import { APP_PRN, HUB_AUDIENCE, signToken } from './tokens.ts';

const REFRESH_TOKEN = {
  type: 'string',
  description: 'For POST /auth/token/refresh; rotated on every use. Not for devices, which log in again.',
};
const LOGIN_RESPONSE = tokenResponse(
  {
    refresh_token: REFRESH_TOKEN,
    prn: { type: 'string', description: 'The account (a device: the device) logged in.' },
    nick: { type: 'string' },
  },
  ['prn', 'nick'],
);

export function loginRoutes(a: AuthContext) {
  const { hub, findAccount, loadAccount, throttle, loginHolds } = a;
  const { store, config, keys } = hub;

  /** The claims of a first-party login token (from login or refresh), `act` when an admin acts. */
  const loginClaims = (sid: string, subject: AccountState, actor?: AccountState) => ({
    sub: subject.prn,
    aud: HUB_AUDIENCE,
    nick: subject.nick,
    type: subject.type,
    scopes: ['*'],
    ...(actor ? { act: { sub: actor.prn, nick: actor.nick } } : {}),
    sid,
  });

  /** A login session (decideStartLogin): an access token and the first refresh token of a new
   * family, for the account, or for the user an admin logs in as. */
  async function session(
    ctx: Context,
    account: AccountState,
    as: { name: string; account: AccountState | undefined } | undefined,
  ) {
    const family = newId();
    const secret = secretToken();
    const command = {
      family,
      account,
      ...(as ? { as } : {}),
      admins: config.admins,
      tokenHash: sha256(secret),
      expires: Date.now() + config.refreshTokenTtlS * 1000,
    };
    const { appended } = await handle(store, refreshStream(family), refreshFamilies, (f) => ({
      events: decideStartLogin(command, f),
      result: undefined,
    }));
    await hub.consistency.written(ctx, appended!.position);
    const subject = as?.account ?? account;
    const actor = as ? account : undefined;
    const { token } = await signToken(keys, loginClaims(family, subject, actor), config.accessTokenTtlS);
    return {
      token,
      token_type: 'Bearer',
      expires_in: config.accessTokenTtlS,
      refresh_token: `${family}.${secret}`,
      prn: subject.prn,
      nick: subject.nick,
    };
  }

  /** A device logs in with its PRN and secret; its token acts on the device itself only. */
  async function deviceSession(prn: string, secret: string) {
    const id = DEVICE_PRN.exec(prn)![1]!;
    const { state: device } = await load(store, deviceStream(id), devices);
    const ok =
      device.id !== '' && !device.garbage && sameSecret(secret, unseal(keys.sealKey, device.secretSealed));
    if (!ok) throw invalidCredentials('Wrong username or password.');
    const { token } = await signToken(
      keys,
      {
        sub: device.prn,
        aud: HUB_AUDIENCE,
        nick: device.nick,
        type: 'DEVICE',
        scopes: ['devices', 'trails'],
      },
      config.accessTokenTtlS,
    );
    return {
      token,
      token_type: 'Bearer',
      expires_in: config.accessTokenTtlS,
      prn: device.prn,
      nick: device.nick,
    };
  }

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/auth/login',
      tag: 'auth',
      summary: 'Log in (USER by nick or email, DEVICE by PRN and secret, SERVICE by nick or PRN).',
      description:
        "Answers an access token and a refresh token. An admin may log in as another user with the username `<admin_nick>==><target_nick>` and the admin's own password; the token then carries `act` naming the admin. Attempts are limited per client address and per username (429 with Retry-After).",
      security: 'none',
      body: s.object({
        required: ['username', 'password'],
        additionalProperties: false,
        properties: {
          username: s.string({ minLength: 1, maxLength: 512 }),
          password: s.string({ maxLength: 512 }),
        },
      }),
      responses: {
        200: { description: 'Logged in.', schema: LOGIN_RESPONSE },
        401: { description: '`invalid_credentials`: one answer whether the user exists or not.' },
        403: {
          description:
            '`account_pending`: the email is not verified yet; or an admin login as someone else by one who may not.',
        },
      },
      handler: async (ctx, { body }) => {
        await fixedWindowLimit(hub.fixedWindows, `login-ip:${ctx.ip}`, config.loginLimitPerMinute);
        if (DEVICE_PRN.test(body.username)) {
          const device = lower(body.username);
          await throttle.admit(device, ctx.ip);
          try {
            ctx.body = await deviceSession(body.username, body.password);
          } catch (err) {
            if (err instanceof HttpError && err.status === 401) await throttle.failed(device, ctx.ip);
            throw err;
          }
          await throttle.succeeded(device, ctx.ip);
          return;
        }
        const [actorName, targetName] = body.username.includes('==>')
          ? body.username.split('==>', 2)
          : [body.username, undefined];
        const account = await findAccount(actorName!);
        // One count per account, whichever name it is given by (nick, email, PRN).
        const who = account?.id ?? lower(actorName!);
        await throttle.admit(who, ctx.ip);
        const ok = await verifyPassword(body.password, account?.passwordHash || DUMMY_HASH);
        try {
          refuseWrongCredentials(account, ok);
        } catch (err) {
          await throttle.failed(who, ctx.ip);
          throw err;
        }
        await throttle.succeeded(who, ctx.ip);
        const as =
          targetName === undefined ? undefined : { name: targetName, account: await findAccount(targetName) };
        ctx.body = await session(ctx, account, as);
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/login',
      tag: 'auth',
      summary: 'Refresh the presented token before it expires (within the refresh window of its login).',
      description:
        'Not for device tokens (devices log in again) or app tokens from /auth/authorize (authorize again): 403. 401 once the refresh window has passed, or the password changed since the login.',
      security: 'bearer',
      responses: { 200: { description: 'A new token with the same claims.', schema: TOKEN_RESPONSE } },
      handler: async (ctx) => {
        const { iss: _i, iat, exp, jti: _j, ...claims } = ctx.state.auth!;
        if (claims.type === 'DEVICE') throw forbidden('Devices log in again with their secret.');
        // The spec gives them about an hour: an app asks the user again (/auth/authorize).
        if (APP_PRN.test(String(claims.aud)))
          throw forbidden('A token from /auth/authorize is not refreshed: authorize again.');
        if (Date.now() / 1000 - claims.orig_iat > config.refreshWindowS) {
          throw unauthorized('The refresh window of this login has passed; log in again.');
        }
        await loginHolds(ctx.state.auth!);
        // A refreshed token lives as long as the one presented: an hour-long app token stays hour-long.
        const ttlS = exp - iat;
        const { token } = await signToken(keys, claims, ttlS);
        ctx.body = { token, token_type: 'Bearer', expires_in: ttlS };
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/auth_status',
      tag: 'auth',
      summary: 'The claims of the presented token.',
      security: 'bearer',
      responses: {
        200: {
          description:
            'Claims: iss, sub (the account PRN), aud (the service on delegated tokens), iat, exp, jti, nick, type, scopes, orig_iat, act when an admin acts as the user, azp on delegated and app tokens, and sid (the login) on login tokens.',
          schema: { type: 'object' },
        },
      },
      handler: (ctx) => {
        ctx.body = { ...ctx.state.auth, prn: ctx.state.auth!.sub };
      },
    });

    routes.add({
      method: 'post',
      path: '/auth/token/refresh',
      tag: 'auth',
      summary: 'Swap a refresh token for a new access token and a new refresh token.',
      description:
        'Each refresh token works once. Presenting one that was already used revokes its whole family (every refresh token of that login), on the assumption that it was stolen; answers 401.',
      security: 'none',
      body: s.object({
        required: ['refresh_token'],
        additionalProperties: false,
        properties: { refresh_token: s.string({ maxLength: 512 }) },
      }),
      responses: {
        200: {
          description: 'Refreshed.',
          schema: tokenResponse({ refresh_token: REFRESH_TOKEN }, ['refresh_token']),
        },
        401: {
          description:
            'Unknown, expired, or used before (the login is then revoked); or the password changed since the login.',
        },
      },
      handler: async (ctx, { body }) => {
        const [family, secret] = body.refresh_token.split('.');
        if (!family || !secret || !/^[a-f0-9]{24}$/.test(family))
          throw unauthorized('Unknown refresh token.');
        const next = secretToken();
        const command = { presentedHash: sha256(secret), nextHash: sha256(next), now: Date.now() };
        const rotated = await handle(store, refreshStream(family), refreshFamilies, (f) => {
          const events = decideRotateRefreshToken(command, f);
          return { events, result: events.some((e) => e.type === 'RefreshFamilyRevoked') };
        });
        if (rotated.result) throw refusedAsReused();
        const f = rotated.state;
        const account = await loadAccount(f.actingAs ?? f.accountId);
        const actor = f.actingAs ? await loadAccount(f.accountId) : undefined;
        refuseEndedLogin(f, { account, actor, admins: config.admins });
        const { token } = await signToken(keys, loginClaims(family, account!, actor), config.accessTokenTtlS);
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.accessTokenTtlS,
          refresh_token: `${family}.${next}`,
        };
      },
    });
  };
}
