// /auth: registration (two steps), login for every account class, refresh, delegation by access
// codes, implicit authorize, admin listing and impersonation, recovery. Handlers are thin: they
// validate (the schemas below are the ones /openapi.json publishes), run a command through the
// event store, and shape the answer.
import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { Context } from 'koa';
import { DEVICE_PRN, deviceStream, devices } from '../../domain/devices.ts';
import {
  claimName,
  handle,
  load,
  NameTakenError,
  nameOwner,
  releaseName,
} from '../../infra/eventstore/aggregate.ts';
import { appStream, apps } from '../apps/apps.ts';
import type { HubContext, Page } from '../context.ts';
import { PAGE_QUERY, pageSchema } from '../context.ts';
import {
  conflict,
  forbidden,
  HttpError,
  invalidCredentials,
  notFound,
  tooManyRequests,
  unauthorized,
  unprocessable,
} from '../errors.ts';
import { sendPage } from '../http.ts';
import { type Routes, schema } from '../routes.ts';
import {
  type AccountState,
  accountPrn,
  accountRecord,
  accountStream,
  accounts,
  servicePrn,
} from './accounts.ts';
import { authenticate, requireAccountType, requireFirstParty } from './middleware.ts';
import { operatorCheck } from './operator.ts';
import {
  DUMMY_HASH,
  hashPassword,
  nonce,
  readEmailedToken,
  sameSecret,
  secretToken,
  sha256,
  unseal,
  verifyPassword,
} from './secrets.ts';
import { LoginThrottle } from './throttle.ts';
import {
  APP_PRN,
  type Claims,
  changedSinceLogin,
  HUB_AUDIENCE,
  parseScopes,
  SCOPE_NAME,
  SERVICE_PRN,
  signToken,
} from './tokens.ts';

const NICK = {
  type: 'string',
  pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$',
  description: '3 to 64 letters, digits, . _ -; unique, case-insensitively.',
};
const EMAIL = { type: 'string', maxLength: 254, pattern: '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$' };
const PASSWORD = { type: 'string', minLength: 8, maxLength: 256, description: 'At least 8 characters.' };
const ACCOUNT = {
  type: 'object',
  properties: {
    prn: { type: 'string' },
    type: { enum: ['USER', 'DEVICE', 'SERVICE'] },
    nick: { type: 'string' },
    email: { type: 'string' },
    status: { enum: ['pending', 'active'] },
    challenge: { type: 'string' },
    redirect_uris: { type: 'array', items: { type: 'string' } },
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
    'redirect-uri': {
      type: 'string',
      description: 'Registration only: the browser address of the challenge.',
    },
  },
};
/** What every answer with a token has; each operation's schema below adds its own fields. */
const TOKEN_RESPONSE = {
  type: 'object',
  required: ['token', 'token_type', 'expires_in'],
  properties: {
    token: { type: 'string', description: 'A JWT (ES256).' },
    token_type: { const: 'Bearer' },
    expires_in: { type: 'integer', description: 'Seconds.' },
  },
};
const tokenResponse = (properties: Record<string, unknown>, required: string[] = []) => ({
  ...TOKEN_RESPONSE,
  required: [...TOKEN_RESPONSE.required, ...required],
  properties: { ...TOKEN_RESPONSE.properties, ...properties },
});
const REFRESH_TOKEN = {
  type: 'string',
  description: 'For POST /auth/token/refresh; rotated on every use. Not for devices, which log in again.',
};
const GRANTED_SCOPES = { type: 'array', items: { type: 'string' }, description: 'The scopes granted.' };
const LOGIN_RESPONSE = tokenResponse(
  {
    refresh_token: REFRESH_TOKEN,
    prn: { type: 'string', description: 'The account (a device: the device) logged in.' },
    nick: { type: 'string' },
  },
  ['prn', 'nick'],
);
/** The answer of an operation that reports what it did: `status`, and a sentence for people. */
const outcome = (status: string, extra: Record<string, unknown> = {}) => ({
  type: 'object',
  required: ['status', 'message', ...Object.keys(extra)],
  properties: { status: { const: status }, message: { type: 'string' }, ...extra },
});
const RESET_MS = 3600_000;
const VERIFIED = outcome('verified', { prn: { type: 'string' }, nick: { type: 'string' } });
/** POST /auth/recover answers no sooner than this, known email or not. */
const RECOVER_FLOOR_MS = 100;

const lower = (s: string) => s.toLowerCase();
const newId = () => randomBytes(12).toString('hex');

export function authRoutes(hub: HubContext) {
  const { store, config, keys } = hub;
  const auth = authenticate(keys, store, config.callerCacheEntries);
  const isAdmin = (nick: string) => config.admins.some((a) => lower(a) === lower(nick));
  const operator = operatorCheck(config.saAdminSecret, hub.limiter, config.callbacksFailuresPerMinute);
  /** An admin's own login token: a USER's first-party token, not acting for anyone. Device and
   * service nicks live elsewhere or are chosen freely, so the nick alone proves nothing. */
  const adminToken = (c: Claims) => c.type === 'USER' && c.aud === HUB_AUDIENCE && !c.act && isAdmin(c.nick);

  async function limit(key: string, perMinute: number): Promise<void> {
    const retryAfter = await hub.limiter.hit(key, perMinute, 60_000);
    if (retryAfter > 0) throw tooManyRequests(retryAfter);
  }

  async function loadAccount(id: string): Promise<AccountState | undefined> {
    const { state } = await load(store, accountStream(id), accounts);
    return state.id ? state : undefined;
  }

  // Guesses of an account's password (login, password change), by its id (or, for a name that is
  // no account's, and a device's PRN, by the name).
  const throttle = new LoginThrottle(hub.limiter, {
    perAddressPerMinute: config.loginAccountLimitPerMinute,
    perAccountPerHour: config.loginAccountFailuresPerHour,
    knownForMs: config.loginKnownAddressDays * 86_400_000,
  });

  /** Finds an account by nick, email or PRN; read from the store, so it is never stale. */
  async function findAccount(name: string): Promise<AccountState | undefined> {
    const kind = name.includes('@') ? 'email' : name.startsWith('prn:') ? 'prn' : 'nick';
    const id = await nameOwner(store, kind, kind === 'prn' ? name : lower(name));
    return id ? loadAccount(id) : undefined;
  }

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

  /** Records that an email with a fresh single-use token goes out; the mailer sends it. */
  async function requestEmail(
    ctx: Context,
    account: AccountState,
    type: 'VerificationEmailRequested' | 'PasswordResetRequested',
    validMs: number,
  ): Promise<void> {
    const { appended } = await handle(store, accountStream(account.id), accounts, () => ({
      events: [
        {
          type,
          data: {
            account_id: account.id,
            email: account.email,
            nonce: nonce(),
            expires: Date.now() + validMs,
          },
        },
      ],
      result: undefined,
    }));
    await hub.consistency.written(ctx, appended!.position);
  }

  /**
   * Expires the registration holding a nick or an email when it is a USER's never verified
   * within the verification window: its nick and email are released for a new registration, and
   * its challenge works no more. Whether the name may now be claimed.
   */
  const expireStale = async (kind: string, value: string): Promise<boolean> => {
    const holder = await nameOwner(store, kind, value);
    if (!holder) return true;
    // Past its window with no link out (verification or reset: its owner may be following one), or
    // past twice its window whatever: new links do not keep a name held for good.
    const ttl = config.verifyTtl * 1000;
    const stale = (s: AccountState) =>
      s.id !== '' &&
      s.type === 'USER' &&
      !s.active &&
      (s.created + 2 * ttl < Date.now() ||
        (s.created + ttl < Date.now() &&
          [...s.verifications.values(), ...s.resets.values()].every((expires) => expires < Date.now())));
    const { after } = await handle(store, accountStream(holder), accounts, (s) => ({
      events:
        stale(s) && !s.expired
          ? [{ type: 'RegistrationExpired', data: { account_id: s.id, nick: lower(s.nick), email: s.email } }]
          : [],
      result: undefined,
    }));
    if (!after.expired) return false;
    await releaseName(store, 'nick', lower(after.nick), after.id);
    await releaseName(store, 'email', after.email, after.id);
    return true;
  };

  /**
   * Whether the login a first-party token belongs to still holds (401 otherwise): its account (and
   * acting admin) may log in, the password has not changed since it, and it was not revoked. Asked
   * before a token is refreshed and before one grants anything (an access code, an app token), so
   * that a login token stolen before a password change cannot mint grants that outlive it.
   */
  async function loginHolds(claims: Claims): Promise<void> {
    const account = await findAccount(claims.sub);
    if (!account?.active) throw unauthorized('The account of this token can no longer log in.');
    const admin = claims.act ? await findAccount(claims.act.sub) : undefined;
    if (claims.act && (!admin?.active || !isAdmin(admin.nick)))
      throw unauthorized('The admin acting in this token no longer may.');
    // As with refresh tokens, a new password ends the logins made before it.
    if (changedSinceLogin((admin ?? account).passwordChanged, claims))
      throw unauthorized('The password changed since this login; log in again.');
    // A login revoked (a spent refresh token presented again) is not kept alive this way either.
    if (claims.sid && (await load(store, `refresh-${claims.sid}`, refreshFamilies)).state.revoked)
      throw unauthorized('This login was revoked; log in again.');
  }

  /** A login session: an access token and the first refresh token of a new family. */
  async function session(ctx: Context, subject: AccountState, actor?: AccountState) {
    const family = newId();
    const { token } = await signToken(keys, loginClaims(family, subject, actor), config.accessTokenTtl);
    const secret = secretToken();
    const issued = await store.append(
      `refresh-${family}`,
      [
        {
          id: `refresh-${family}-0`,
          type: 'RefreshTokenIssued',
          data: {
            family,
            account_id: (actor ?? subject).id,
            token_hash: sha256(secret),
            expires: Date.now() + config.refreshTokenTtl * 1000,
            acting_as: actor ? subject.id : null,
          },
        },
      ],
      'no_stream',
    );
    await hub.consistency.written(ctx, issued.position);
    return {
      token,
      token_type: 'Bearer',
      expires_in: config.accessTokenTtl,
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
      config.accessTokenTtl,
    );
    return {
      token,
      token_type: 'Bearer',
      expires_in: config.accessTokenTtl,
      prn: device.prn,
      nick: device.nick,
    };
  }

  return (routes: Routes) => {
    routes.add<{
      email: string;
      nick: string;
      password: string;
      type?: 'USER' | 'SERVICE';
      redirect_uris?: string[];
    }>({
      method: 'post',
      path: '/auth/accounts',
      tag: 'auth',
      summary: 'Register an account (step one of two).',
      description:
        'Creates a pending USER account and answers its record with `redirect-uri`, the browser address where the challenge is passed (captcha, when configured) and the verification email is sent; verifying the email activates the account. `nick` and `email` are unique (409). A SERVICE account needs an admin token and is active at once. No response ever carries a password or a hash.',
      security: 'optional-bearer',
      body: schema({
        type: 'object',
        required: ['email', 'nick', 'password'],
        additionalProperties: false,
        properties: {
          email: EMAIL,
          nick: NICK,
          password: PASSWORD,
          type: { enum: ['USER', 'SERVICE'], default: 'USER' },
          redirect_uris: {
            type: 'array',
            maxItems: 20,
            // No fragment: the token is handed over in one (RFC 6749 3.1.2).
            items: { type: 'string', format: 'uri', pattern: '^https?://[^#]*$', maxLength: 2048 },
          },
        },
      }),
      responses: {
        200: { description: 'The account record (pending, with redirect-uri).', schema: ACCOUNT },
      },
      handler: async (ctx, { body }) => {
        const type = body.type ?? 'USER';
        let active = false;
        if (type === 'SERVICE') {
          await auth(ctx, async () => {});
          if (!adminToken(ctx.state.auth!)) throw forbidden('Only admins may register SERVICE accounts.');
          active = true;
        }
        await limit(`register:${ctx.ip}`, config.loginLimitPerMinute);
        // A nick HUB_ADMINS lists is an admin's: whoever registered it first would be one. Until it
        // is registered only the operator may register it (docs/api.md, Admins).
        if (isAdmin(body.nick)) await operator(ctx);
        const id = newId();
        const prn = type === 'SERVICE' ? servicePrn(body.nick, config.serviceDomain) : accountPrn(id);
        const claimed: [string, string][] = [];
        try {
          for (const [kind, value] of [
            ['nick', lower(body.nick)],
            ['email', lower(body.email)],
            ['prn', prn],
          ] as [string, string][]) {
            try {
              await claimName(store, kind, value, id);
            } catch (err) {
              // Held by a registration never verified in its window: that one gives its names up.
              if (!(err instanceof NameTakenError) || kind === 'prn' || !(await expireStale(kind, value)))
                throw err;
              await claimName(store, kind, value, id);
            }
            claimed.push([kind, value]);
          }
        } catch (err) {
          for (const [kind, value] of claimed) await releaseName(store, kind, value, id);
          if (err instanceof NameTakenError)
            throw conflict(`That ${err.kind === 'prn' ? 'nick' : err.kind} is taken.`);
          throw err;
        }
        const challenge = `${id}.${secretToken(18)}`;
        const passwordHash = await hashPassword(body.password);
        let registered: Awaited<ReturnType<typeof handle<AccountState, undefined>>>;
        try {
          registered = await handle(store, accountStream(id), accounts, () => ({
            events: [
              {
                type: 'AccountRegistered',
                data: {
                  account_id: id,
                  prn,
                  type,
                  nick: body.nick,
                  email: lower(body.email),
                  password_hash: passwordHash,
                  challenge,
                  redirect_uris: body.redirect_uris ?? [],
                  active,
                },
              },
            ],
            result: undefined,
          }));
        } catch (err) {
          // Nothing was registered: the names go back, so that nobody is locked out of them.
          for (const [kind, value] of claimed) await releaseName(store, kind, value, id).catch(() => {});
          throw err;
        }
        const { appended, after: created } = registered;
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = {
          ...accountRecord(created),
          ...(active ? {} : { 'redirect-uri': `${hub.publicUrl()}/auth/challenge/${challenge}` }),
        };
      },
    });

    const challengeAccount = async (challenge: string) => {
      const account = await loadAccount(challenge.split('.')[0] ?? '');
      if (!account || !sameSecret(challenge, account.challenge))
        throw notFound('No registration with this challenge.');
      return account;
    };

    routes.add({
      method: 'get',
      path: '/auth/challenge/{challenge}',
      tag: 'auth',
      summary: 'The registration challenge page (step two, in the browser).',
      security: 'none',
      responses: {
        200: { description: 'An HTML page that passes the challenge and sends the verification email.' },
      },
      handler: async (ctx) => {
        const account = await challengeAccount(ctx.params.challenge!);
        const captcha = config.captchaVerifyUrl
          ? '<p><label>Captcha answer <input id="captcha" name="captcha"></label></p>'
          : '';
        sendPage(
          ctx,
          `<!doctype html><meta charset="utf-8"><title>Verify your Device Hub account</title>
<h1>Welcome, ${escapeHtml(account.nick)}</h1>
<p>Send the verification email to ${escapeHtml(account.email)}.</p>${captcha}
<button id="send">Send</button><p id="out"></p>`,
          CHALLENGE_SCRIPT,
        );
      },
    });

    routes.add<{ captcha?: string }>({
      method: 'post',
      path: '/auth/challenge/{challenge}',
      tag: 'auth',
      summary:
        'Pass the registration challenge: checks the captcha (when configured) and sends the verification email.',
      security: 'none',
      body: schema({
        type: 'object',
        additionalProperties: false,
        properties: { captcha: { type: 'string', maxLength: 4096 } },
      }),
      responses: { 202: { description: 'The verification email is on its way.', schema: outcome('sent') } },
      handler: async (ctx, { body }) => {
        await limit(`challenge:${ctx.ip}`, config.loginLimitPerMinute);
        const account = await challengeAccount(ctx.params.challenge!);
        if (account.active) throw conflict('This account is verified already.');
        if (!(await hub.captcha(body.captcha ?? '', ctx.ip))) {
          throw unprocessable('The captcha answer was not accepted.', [
            { field: 'captcha', problem: 'not accepted' },
          ]);
        }
        await requestEmail(ctx, account, 'VerificationEmailRequested', config.verifyTtl * 1000);
        ctx.status = 202;
        ctx.body = { status: 'sent', message: `A verification email is on its way to ${account.email}.` };
      },
    });

    const verify = async (ctx: Context, token: string) => {
      const parsed = readEmailedToken(keys.hmacKey, 'verify', token);
      if (!parsed) throw unauthorized('This verification link is not valid.');
      const { state, appended } = await handle(store, accountStream(parsed.accountId), accounts, (s) => {
        if (!s.id) throw unauthorized('This verification link is not valid.');
        if (s.active) return { events: [], result: undefined };
        const expires = s.verifications.get(parsed.nonce);
        if (expires === undefined || expires < Date.now())
          throw unauthorized('This verification link has expired; pass the challenge again for a new one.');
        return {
          events: [{ type: 'AccountVerified', data: { account_id: s.id, nonce: parsed.nonce } }],
          result: undefined,
        };
      });
      if (appended) await hub.consistency.written(ctx, appended.position);
      ctx.body = {
        status: 'verified',
        prn: state.prn,
        nick: state.nick,
        message: 'Your account is active: you can log in now.',
      };
    };
    routes.add<undefined, { token: string }>({
      method: 'get',
      path: '/auth/verify',
      tag: 'auth',
      summary: 'Verify the email address (the link in the verification email); activates the account.',
      security: 'none',
      query: schema({
        type: 'object',
        required: ['token'],
        // An emailed link: mail link-trackers append parameters of their own (utm_*); ignored.
        additionalProperties: true,
        properties: { token: { type: 'string', maxLength: 512 } },
      }),
      responses: {
        200: { description: 'Verified (also when it was already).', schema: VERIFIED },
        401: { description: 'The link is not valid, or has expired.' },
      },
      handler: (ctx, { query }) => verify(ctx, query.token),
    });
    routes.add<{ token: string }>({
      method: 'post',
      path: '/auth/verify',
      tag: 'auth',
      summary: 'Verify the email address with the token of the verification email.',
      security: 'none',
      body: schema({
        type: 'object',
        required: ['token'],
        additionalProperties: false,
        properties: { token: { type: 'string', maxLength: 512 } },
      }),
      responses: {
        200: { description: 'Verified (also when it was already).', schema: VERIFIED },
        401: { description: 'The link is not valid, or has expired.' },
      },
      handler: (ctx, { body }) => verify(ctx, body.token),
    });

    routes.add<{ username: string; password: string }>({
      method: 'post',
      path: '/auth/login',
      tag: 'auth',
      summary: 'Log in (USER by nick or email, DEVICE by PRN and secret, SERVICE by nick or PRN).',
      description:
        "Answers an access token and a refresh token. An admin may log in as another user with the username `<admin_nick>==><target_nick>` and the admin's own password; the token then carries `act` naming the admin. Attempts are limited per client address and per username (429 with Retry-After).",
      security: 'none',
      body: schema({
        type: 'object',
        required: ['username', 'password'],
        additionalProperties: false,
        properties: {
          username: { type: 'string', minLength: 1, maxLength: 512 },
          password: { type: 'string', maxLength: 512 },
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
        await limit(`login-ip:${ctx.ip}`, config.loginLimitPerMinute);
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
        if (!account || !ok || account.expired) {
          await throttle.failed(who, ctx.ip);
          throw invalidCredentials('Wrong username or password.');
        }
        await throttle.succeeded(who, ctx.ip);
        if (!account.active)
          throw new HttpError(
            403,
            'account_pending',
            'Verify your email address first: follow the link in the email sent after registration.',
          );
        if (targetName === undefined) {
          ctx.body = await session(ctx, account);
          return;
        }
        if (account.type !== 'USER' || !isAdmin(account.nick))
          throw forbidden('Only admins may log in as another user.');
        // Another user, as the spec says: not a service, and not an account that cannot log in itself.
        const target = await findAccount(targetName);
        if (target?.type !== 'USER') throw notFound(`No user named ${targetName}.`);
        if (!target.active)
          throw new HttpError(
            403,
            'account_pending',
            `${targetName} has not verified the account's email yet.`,
          );
        ctx.body = await session(ctx, target, account);
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
      middleware: [auth],
      responses: { 200: { description: 'A new token with the same claims.', schema: TOKEN_RESPONSE } },
      handler: async (ctx) => {
        const { iss: _i, iat, exp, jti: _j, ...claims } = ctx.state.auth!;
        if (claims.type === 'DEVICE') throw forbidden('Devices log in again with their secret.');
        // The spec gives them about an hour: an app asks the user again (/auth/authorize).
        if (APP_PRN.test(String(claims.aud)))
          throw forbidden('A token from /auth/authorize is not refreshed: authorize again.');
        if (Date.now() / 1000 - claims.orig_iat > config.refreshWindow) {
          throw unauthorized('The refresh window of this login has passed; log in again.');
        }
        await loginHolds(ctx.state.auth!);
        // A refreshed token lives as long as the one presented: an hour-long app token stays hour-long.
        const ttl = exp - iat;
        const { token } = await signToken(keys, claims, ttl);
        ctx.body = { token, token_type: 'Bearer', expires_in: ttl };
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/auth_status',
      tag: 'auth',
      summary: 'The claims of the presented token.',
      security: 'bearer',
      middleware: [auth],
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

    routes.add<{ refresh_token: string }>({
      method: 'post',
      path: '/auth/token/refresh',
      tag: 'auth',
      summary: 'Swap a refresh token for a new access token and a new refresh token.',
      description:
        'Each refresh token works once. Presenting one that was already used revokes its whole family (every refresh token of that login), on the assumption that it was stolen; answers 401.',
      security: 'none',
      body: schema({
        type: 'object',
        required: ['refresh_token'],
        additionalProperties: false,
        properties: { refresh_token: { type: 'string', maxLength: 512 } },
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
        const presented = sha256(secret);
        const next = secretToken();
        const outcome = await handle(store, `refresh-${family}`, refreshFamilies, (f) => {
          if (!f.accountId) throw unauthorized('Unknown refresh token.');
          if (f.revoked) throw unauthorized('This login was revoked; log in again.');
          if (presented !== f.current) {
            if (f.spent.has(presented)) {
              return {
                events: [
                  {
                    type: 'RefreshFamilyRevoked',
                    data: { reason: 'a spent refresh token was presented again' },
                  },
                ],
                result: 'reused' as const,
              };
            }
            throw unauthorized('Unknown refresh token.');
          }
          if (f.expires < Date.now()) throw unauthorized('This refresh token has expired; log in again.');
          return {
            events: [
              {
                type: 'RefreshTokenRotated',
                // The family's expiry stays where login set it: rotating does not extend a session.
                data: { token_hash: sha256(next), expires: f.expires },
              },
            ],
            result: 'rotated' as const,
          };
        });
        if (outcome.result === 'reused')
          throw unauthorized('This refresh token was used before: the login is revoked; log in again.');
        const f = outcome.state;
        const account = await loadAccount(f.actingAs ?? f.accountId);
        const actor = f.actingAs ? await loadAccount(f.accountId) : undefined;
        if (!account?.active || (actor && !isAdmin(actor.nick)))
          throw unauthorized('The account can no longer log in.');
        if ((actor ?? account).passwordChanged > f.issued) {
          throw unauthorized('The password changed since this login; log in again.');
        }
        const { token } = await signToken(keys, loginClaims(family, account, actor), config.accessTokenTtl);
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.accessTokenTtl,
          refresh_token: `${family}.${next}`,
        };
      },
    });

    routes.add<{ service: string; scopes: string }>({
      method: 'post',
      path: '/auth/code',
      tag: 'auth',
      summary: 'Grant a service scopes on your behalf: answers a short-lived, single-use access code.',
      security: 'bearer',
      middleware: [auth, requireFirstParty],
      body: schema({
        type: 'object',
        required: ['service', 'scopes'],
        additionalProperties: false,
        properties: {
          service: {
            type: 'string',
            pattern: SERVICE_PRN.source,
            description: 'The service PRN, prn:<domain>:auth:/<name>.',
          },
          scopes: {
            type: 'string',
            minLength: 1,
            maxLength: 1024,
            description: '`*` for all, or scope names separated by spaces or commas.',
          },
        },
      }),
      responses: {
        200: {
          description: 'The code; the service swaps it at POST /auth/token.',
          schema: {
            type: 'object',
            required: ['code'],
            properties: { code: { type: 'string' }, expires_in: { type: 'integer' } },
          },
        },
      },
      handler: async (ctx, { body }) => {
        const claims = ctx.state.auth!;
        if (claims.type !== 'USER' || claims.act)
          throw forbidden('Only users, acting for themselves, may grant access codes.');
        await loginHolds(claims);
        const scopes = parseScopes(body.scopes);
        if (scopes.length === 0)
          throw unprocessable('Name at least one scope.', [{ field: 'scopes', problem: 'names no scope' }]);
        const bad = scopes.find((s) => !SCOPE_NAME.test(s));
        if (bad)
          throw unprocessable(`Unknown scope ${bad}.`, [
            { field: 'scopes', problem: `${bad} is not a scope name` },
          ]);
        const service = await findAccount(body.service);
        if (service?.type !== 'SERVICE') {
          throw unprocessable('No such service.', [
            { field: 'service', problem: 'is not a registered service' },
          ]);
        }
        const user = await findAccount(claims.sub);
        if (!user) throw unauthorized('The account of this token no longer exists.');
        const code = secretToken();
        const appended = await store.append(
          `code-${sha256(code)}`,
          [
            {
              id: `code-${sha256(code)}-issued`,
              type: 'AccessCodeIssued',
              data: {
                account_id: user.id,
                account_prn: user.prn,
                service: service.prn,
                scopes,
                expires: Date.now() + config.accessCodeTtl * 1000,
              },
            },
          ],
          'no_stream',
        );
        await hub.consistency.written(ctx, appended.position);
        ctx.body = { code, expires_in: config.accessCodeTtl };
      },
    });

    routes.add<{ 'access-code': string }>({
      method: 'post',
      path: '/auth/token',
      tag: 'auth',
      summary: 'A service swaps an access code for a long-lived delegated token.',
      description:
        "Called with the service's own token. The delegated token authenticates as the user, has `aud` = the service PRN and only the granted scopes. A code works once and only for the service it names: unknown, expired or reused codes answer 401, a code of another service 403.",
      security: 'bearer',
      middleware: [auth, requireFirstParty],
      body: schema({
        type: 'object',
        required: ['access-code'],
        additionalProperties: false,
        properties: { 'access-code': { type: 'string', maxLength: 512 } },
      }),
      responses: {
        200: {
          description: 'The delegated token.',
          schema: tokenResponse({ scopes: GRANTED_SCOPES }, ['scopes']),
        },
      },
      handler: async (ctx, { body }) => {
        const caller = ctx.state.auth!;
        if (caller.type !== 'SERVICE' || caller.act)
          throw forbidden('Only SERVICE accounts, acting for themselves, swap access codes.');
        const stream = `code-${sha256(body['access-code'])}`;
        const { result: grant, appended } = await handle(
          store,
          stream,
          codes,
          (c) => {
            if (!c.grant) throw unauthorized('Unknown access code.');
            if (c.redeemed) throw unauthorized('This access code was used already.');
            if (c.grant.expires < Date.now()) throw unauthorized('This access code has expired.');
            if (c.grant.service !== caller.sub)
              throw forbidden('This access code was issued to another service.');
            return {
              events: [{ type: 'AccessCodeRedeemed', data: { service: caller.sub } }],
              result: c.grant,
            };
          },
          { attempts: 1 },
        ).catch((err) => {
          if ((err as Error).name === 'WrongExpectedRevisionError')
            throw unauthorized('This access code was used already.');
          throw err;
        });
        await hub.consistency.written(ctx, appended!.position);
        const user = await loadAccount(grant.account_id);
        if (!user?.active) throw unauthorized('The account that granted this code can no longer log in.');
        // A code granted before a password change is ended by it, as the grants it would make are.
        if (user.passwordChanged > grant.issued)
          throw unauthorized("The user's password changed since this code was granted: ask for a new one.");
        const { token } = await signToken(
          keys,
          {
            sub: user.prn,
            aud: grant.service,
            azp: grant.service,
            nick: user.nick,
            type: user.type,
            scopes: grant.scopes,
          },
          config.delegatedTokenTtl,
        );
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.delegatedTokenTtl,
          scopes: grant.scopes,
        };
      },
    });

    routes.add<{
      client_id: string;
      redirect_uri: string;
      scope?: string;
      state?: string;
      response_type?: string;
    }>({
      method: 'post',
      path: '/auth/authorize',
      tag: 'auth',
      summary: 'Implicit authorize: issue an access token for a registered app straight away.',
      description:
        "Called with the user's token. `client_id` is the app id or PRN; `redirect_uri` must equal one registered for the app exactly. The token authenticates as the user, has `aud` = the app PRN, the requested scopes (all the app declares when none are asked) and lasts HUB_IMPLICIT_TOKEN_TTL_S (an hour). `redirect_to` is the redirect URI with the token in its fragment.",
      security: 'bearer',
      middleware: [auth, requireFirstParty],
      body: schema({
        type: 'object',
        required: ['client_id', 'redirect_uri'],
        additionalProperties: false,
        properties: {
          client_id: { type: 'string', maxLength: 256 },
          redirect_uri: { type: 'string', maxLength: 2048 },
          scope: { type: 'string', maxLength: 1024 },
          state: { type: 'string', maxLength: 1024 },
          response_type: { const: 'token' },
        },
      }),
      responses: {
        200: {
          description: 'The token.',
          schema: tokenResponse(
            {
              scopes: GRANTED_SCOPES,
              state: { type: 'string', description: 'As sent.' },
              redirect_to: {
                type: 'string',
                description:
                  'The redirect URI with the token in its fragment (access_token, token_type, expires_in, state).',
              },
            },
            ['scopes', 'redirect_to'],
          ),
        },
      },
      handler: async (ctx, { body }) => {
        const claims = ctx.state.auth!;
        if (claims.type !== 'USER' || claims.act)
          throw forbidden('Only users, acting for themselves, authorize apps.');
        await loginHolds(claims);
        const appId = body.client_id.startsWith('prn:::apps:/')
          ? body.client_id.slice('prn:::apps:/'.length)
          : body.client_id;
        const { state: app } = await load(store, appStream(appId), apps);
        if (!app.id || app.deleted)
          throw unprocessable('No such app.', [{ field: 'client_id', problem: 'is not a registered app' }]);
        if (!app.fields.redirect_uris.includes(body.redirect_uri)) {
          throw unprocessable('The redirect URI is not one registered for this app.', [
            { field: 'redirect_uri', problem: 'does not match' },
          ]);
        }
        const declared = app.fields.scopes.map((s) => s.id);
        const asked = body.scope ? parseScopes(body.scope) : declared;
        // An app that declares no scopes gets none: what it may ask is what its owner declared.
        const extra = asked.find((s) => !declared.includes(s));
        if (extra)
          throw unprocessable(`The app does not declare the scope ${extra}.`, [
            { field: 'scope', problem: `${extra} is not declared by the app` },
          ]);
        const { token } = await signToken(
          keys,
          {
            sub: claims.sub,
            aud: app.prn,
            azp: app.prn,
            nick: claims.nick,
            type: claims.type,
            scopes: asked,
          },
          config.implicitTokenTtl,
        );
        const fragment = new URLSearchParams({
          access_token: token,
          token_type: 'Bearer',
          expires_in: String(config.implicitTokenTtl),
          ...(body.state ? { state: body.state } : {}),
        });
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.implicitTokenTtl,
          scopes: asked,
          ...(body.state ? { state: body.state } : {}),
          redirect_to: `${body.redirect_uri}#${fragment}`,
        };
      },
    });

    routes.add<undefined, { asadmin?: string; limit: number; skip: number }>({
      method: 'get',
      path: '/auth/accounts',
      tag: 'auth',
      summary: 'With ?asadmin=yes (admins only): every account, paginated. Without: your own account.',
      description:
        'For accounts (users and services): a device has none (403). The admin listing (asadmin=yes) is served from a read model and waits for X-Hub-Min-Position; your own account comes from the event store.',
      waitsForWrites: true,
      security: 'bearer',
      middleware: [auth, requireFirstParty, requireAccountType('USER', 'SERVICE')],
      query: schema({ type: 'object', properties: { asadmin: { enum: ['yes', 'no'] }, ...PAGE_QUERY } }),
      responses: { 200: { description: 'A page of account records.', schema: pageSchema(ACCOUNT) } },
      handler: async (ctx, { query }) => {
        const claims = ctx.state.auth!;
        if (query.asadmin !== 'yes') {
          const own = await findAccount(claims.sub);
          const page: Page<unknown> = {
            items: own ? [accountRecord(own)] : [],
            total: own ? 1 : 0,
            limit: query.limit,
            skip: query.skip,
          };
          ctx.body = page;
          return;
        }
        if (!adminToken(claims)) throw forbidden('Only admins may list all accounts.');
        await hub.consistency.readable(ctx, ['accounts']);
        const rs = hub.readStore;
        const generation = await rs.activeGeneration('accounts');
        const ids = await rs.range('accounts', generation, 'by-created', {
          offset: query.skip,
          limit: query.limit,
        });
        const items = (
          await Promise.all(ids.map((id) => rs.get('accounts', generation, `account:${id}`)))
        ).filter(Boolean);
        ctx.body = {
          items,
          total: await rs.count('accounts', generation, 'by-created'),
          limit: query.limit,
          skip: query.skip,
        };
      },
    });

    routes.add<{ email: string }>({
      method: 'post',
      path: '/auth/recover',
      tag: 'auth',
      summary: 'Ask for a password reset link by email.',
      description:
        'Always answers 200 with the same body, no sooner than 100 ms after the request, whether or not an account has this email, so that it reveals nothing. The emailed token works once, for an hour.',
      security: 'none',
      body: schema({
        type: 'object',
        required: ['email'],
        additionalProperties: false,
        properties: { email: EMAIL },
      }),
      responses: {
        200: {
          description: 'If an account has this email, a reset link is on its way.',
          schema: outcome('accepted'),
        },
      },
      handler: async (ctx, { body }) => {
        await limit(`recover:${ctx.ip}`, config.loginLimitPerMinute);
        // A known email costs an append the unknown one does not: both answer at the same floor,
        // which the append stays well under, so the time tells nothing either.
        const floor = delay(RECOVER_FLOOR_MS);
        const account = await findAccount(lower(body.email));
        if (account && account.type === 'USER') {
          await requestEmail(ctx, account, 'PasswordResetRequested', RESET_MS);
        }
        await floor;
        ctx.body = {
          status: 'accepted',
          message: 'If an account has this email, a reset link is on its way.',
        };
      },
    });

    routes.add<{ password: string; token?: string; current_password?: string }>({
      method: 'post',
      path: '/auth/password',
      tag: 'auth',
      summary: 'Set a new password: with the emailed reset token, or with your token and current password.',
      description:
        'A reset token works once and expires after an hour (401 otherwise); a new password ends every reset token sent before it. Without `token`, send your bearer token and `current_password` (422 without it, 401 when wrong; a device token: 403).',
      security: 'optional-bearer',
      body: schema({
        type: 'object',
        required: ['password'],
        additionalProperties: false,
        properties: {
          password: PASSWORD,
          token: { type: 'string', maxLength: 512 },
          current_password: { type: 'string', maxLength: 512 },
        },
      }),
      responses: { 200: { description: 'The password is set.', schema: outcome('changed') } },
      handler: async (ctx, { body }) => {
        let accountId: string;
        let resetNonce: string | null = null;
        if (body.token) {
          const parsed = readEmailedToken(keys.hmacKey, 'reset', body.token);
          if (!parsed) throw unauthorized('This reset token is not valid.');
          accountId = parsed.accountId;
          resetNonce = parsed.nonce;
        } else {
          await auth(ctx, async () => {});
          if (ctx.state.auth!.aud !== HUB_AUDIENCE || ctx.state.auth!.act)
            throw forbidden('Change your password with your own login token.');
          if (ctx.state.auth!.type === 'DEVICE')
            throw forbidden('A device has a secret, not a password: its owner sets it.');
          if (body.current_password === undefined)
            throw unprocessable('Send current_password with your token, or the emailed reset token.', [
              { field: 'current_password', problem: 'is required without token' },
            ]);
          const account = await findAccount(ctx.state.auth!.sub);
          if (!account) throw unauthorized('The account of this token no longer exists.');
          // Guesses of the current password count as the login's do: a stolen token is no way round it.
          await throttle.admit(account.id, ctx.ip);
          if (!(await verifyPassword(body.current_password, account.passwordHash))) {
            await throttle.failed(account.id, ctx.ip);
            throw invalidCredentials('The current password is wrong.');
          }
          accountId = account.id;
        }
        // Hashed once the caller is known: scrypt's cost is not for anyone to spend.
        const hash = await hashPassword(body.password);
        const { appended } = await handle(store, accountStream(accountId), accounts, (s) => {
          if (!s.id) throw unauthorized('This reset token is not valid.');
          if (resetNonce !== null) {
            if (s.expired) throw unauthorized('This registration expired; register again.');
            if (s.usedResets.has(resetNonce)) throw unauthorized('This reset token was used already.');
            const expires = s.resets.get(resetNonce);
            if (expires === undefined || expires < Date.now())
              throw unauthorized('This reset token has expired; ask for a new one.');
          }
          const changed = {
            type: 'PasswordChanged',
            data: { account_id: s.id, password_hash: hash, reset_nonce: resetNonce },
          };
          // The reset link reached the mailbox, which is what verification proves: a pending
          // account is verified by it (else whoever registered the address first, and never
          // verified it, would keep its owner out for good).
          const verified =
            resetNonce !== null && !s.active
              ? [{ type: 'AccountVerified', data: { account_id: s.id, nonce: resetNonce } }]
              : [];
          return { events: [...verified, changed], result: undefined };
        });
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = { status: 'changed', message: 'The password is set.' };
      },
    });

    routes.add<undefined, { token: string }>({
      method: 'get',
      path: '/auth/reset',
      tag: 'auth',
      summary: 'The page of the password reset link: a form that posts to /auth/password.',
      security: 'none',
      query: schema({
        type: 'object',
        required: ['token'],
        // An emailed link: mail link-trackers append parameters of their own (utm_*); ignored.
        additionalProperties: true,
        properties: { token: { type: 'string', maxLength: 512 } },
      }),
      responses: { 200: { description: 'An HTML form.' } },
      handler: (ctx) => {
        sendPage(
          ctx,
          `<!doctype html><meta charset="utf-8"><title>Reset your Device Hub password</title>
<h1>Choose a new password</h1><p><label>New password <input id="pw" type="password" minlength="8"></label> <button id="go">Set</button></p><p id="out"></p>`,
          RESET_SCRIPT,
        );
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/.well-known/jwks.json',
      tag: 'auth',
      summary: 'The public keys that verify Device Hub tokens (for services checking delegated tokens).',
      security: 'none',
      responses: {
        200: {
          description: 'A JWK set.',
          schema: { type: 'object', properties: { keys: { type: 'array' } } },
        },
      },
      handler: (ctx) => {
        ctx.body = { keys: [keys.jwk] };
      },
    });
  };
}

// The pages' scripts: constant, so that the pages' Content-Security-Policy names each by its hash
// (no other script runs); what they need of the request they read from the address.
const CHALLENGE_SCRIPT = `document.getElementById('send').onclick = async () => {
  const c = document.getElementById('captcha');
  const r = await fetch(location.pathname, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(c ? { captcha: c.value } : {}) });
  document.getElementById('out').textContent = (await r.json()).message;
};`;
const RESET_SCRIPT = `document.getElementById('go').onclick = async () => {
  const token = new URLSearchParams(location.search).get('token');
  const r = await fetch('/auth/password', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token, password: document.getElementById('pw').value }) });
  document.getElementById('out').textContent = (await r.json()).message;
};`;

// ---------------------------------------------------------------- small aggregates of /auth

interface RefreshFamily {
  /** When the login happened (ms). */
  issued: number;
  accountId: string;
  actingAs: string | undefined;
  current: string;
  expires: number;
  spent: Set<string>;
  revoked: boolean;
}
export const refreshFamilies = {
  snapshot: { kind: 'refresh-family', shape: 1 },
  initial: (): RefreshFamily => ({
    issued: 0,
    accountId: '',
    actingAs: undefined,
    current: '',
    expires: 0,
    spent: new Set(),
    revoked: false,
  }),
  evolve(f: RefreshFamily, e: { type: string; data: unknown; created: number }): RefreshFamily {
    const d = e.data as Record<string, unknown>;
    switch (e.type) {
      case 'RefreshTokenIssued':
        return {
          ...f,
          issued: e.created,
          accountId: d.account_id as string,
          actingAs: (d.acting_as as string | null) ?? undefined,
          current: d.token_hash as string,
          expires: d.expires as number,
        };
      case 'RefreshTokenRotated':
        return {
          ...f,
          spent: new Set(f.spent).add(f.current),
          current: d.token_hash as string,
          expires: d.expires as number,
        };
      case 'RefreshFamilyRevoked':
        return { ...f, revoked: true };
      default:
        return f;
    }
  },
};

interface Grant {
  account_id: string;
  service: string;
  scopes: string[];
  expires: number;
  /** When the code was granted (ms; the event's time). */
  issued: number;
}
export const codes = {
  snapshot: { kind: 'access-code', shape: 1 },
  initial: (): { grant: Grant | undefined; redeemed: boolean } => ({ grant: undefined, redeemed: false }),
  evolve(
    c: { grant: Grant | undefined; redeemed: boolean },
    e: { type: string; data: unknown; created: number },
  ) {
    if (e.type === 'AccessCodeIssued') return { ...c, grant: { ...(e.data as Grant), issued: e.created } };
    if (e.type === 'AccessCodeRedeemed') return { ...c, redeemed: true };
    return c;
  },
};

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
