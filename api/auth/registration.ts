// Registration, in two steps: POST /auth/accounts records a pending account (a service: active at
// once), then its challenge page in the browser (captcha, when configured) sends the verification
// email, whose link activates the account.
import type { Context } from 'koa';
import {
  type AccountState,
  accountPrn,
  accountStream,
  accounts,
  decideExpireRegistration,
  decideRegister,
  decideRequestVerification,
  decideVerify,
  refuseVerified,
  servicePrn,
} from '../../domain/accounts.ts';
import {
  claimName,
  handle,
  NameTakenError,
  nameOwner,
  releaseName,
} from '../../infra/eventstore/aggregate.ts';
import { hashPassword, readEmailedToken, sameSecret, secretToken } from '../../infra/secrets.ts';
import { REDIRECT_URIS } from '../context.ts';
import { conflict, forbidden, notFound, unauthorized, unprocessable } from '../errors.ts';
import { fixedWindowLimit, sendPage } from '../http.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { accountRecord } from './accounts.ts';
import { type AuthContext, lower, newId } from './context.ts';
import { ACCOUNT, EMAIL, EMAILED_LINK_QUERY, NICK, outcome, PASSWORD } from './schemas.ts';

const VERIFIED = outcome('verified', { prn: { type: 'string' }, nick: { type: 'string' } });

export function registrationRoutes(a: AuthContext) {
  const { hub, auth, adminToken, isAdmin, loadAccount, operator, requestEmail } = a;
  const { store, config, keys } = hub;

  /**
   * Expires the registration holding a nick or an email when it is a USER's never verified within
   * the verification window (decideExpireRegistration): its nick and email are released for a new
   * registration, and its challenge works no more. Whether the name may now be claimed.
   */
  async function expireStale(kind: string, value: string): Promise<boolean> {
    const holder = await nameOwner(store, kind, value);
    if (!holder) return true;
    const command = { now: Date.now(), verifyTtlMs: config.verifyTtlS * 1000 };
    const { after } = await handle(store, accountStream(holder), accounts, (s) => ({
      events: decideExpireRegistration(command, s),
      result: undefined,
    }));
    if (!after.expired) return false;
    await releaseName(store, 'nick', lower(after.nick), after.id);
    await releaseName(store, 'email', after.email, after.id);
    return true;
  }

  /** Claims the account's unique names (nick, email, PRN), taking them from a stale registration
   * when one holds them; on a refusal, gives back those it took. */
  async function claimNames(id: string, names: [kind: string, value: string][]): Promise<void> {
    const claimed: [string, string][] = [];
    try {
      for (const [kind, value] of names) {
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
  }

  const challengeAccount = async (challenge: string) => {
    const account = await loadAccount(challenge.split('.')[0] ?? '');
    if (!account || !sameSecret(challenge, account.challenge))
      throw notFound('No registration with this challenge.');
    return account;
  };

  const verify = async (ctx: Context, token: string) => {
    const parsed = readEmailedToken(keys.hmacKey, 'verify', token);
    if (!parsed) throw unauthorized('This verification link is not valid.');
    const { state, appended } = await handle(store, accountStream(parsed.accountId), accounts, (s) => ({
      events: decideVerify({ nonce: parsed.nonce, now: Date.now() }, s),
      result: undefined,
    }));
    if (appended) await hub.consistency.written(ctx, appended.position);
    ctx.body = {
      status: 'verified',
      prn: state.prn,
      nick: state.nick,
      message: 'Your account is active: you can log in now.',
    };
  };

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/auth/accounts',
      tag: 'auth',
      summary: 'Register an account (step one of two).',
      description:
        'Creates a pending USER account and answers its record with `redirect-uri`, the browser address where the challenge is passed (captcha, when configured) and the verification email is sent; verifying the email activates the account. `nick` and `email` are unique (409). A SERVICE account needs an admin token and is active at once. No response ever carries a password or a hash.',
      security: 'bearer-if-body-needs',
      body: s.object({
        required: ['email', 'nick', 'password'],
        additionalProperties: false,
        properties: {
          email: EMAIL,
          nick: NICK,
          password: PASSWORD,
          type: s.enum(['USER', 'SERVICE'], { default: 'USER' }),
          redirect_uris: REDIRECT_URIS,
        },
      }),
      responses: {
        200: { description: 'The account record (pending, with redirect-uri).', schema: ACCOUNT },
      },
      handler: async (ctx, { body }) => {
        const type = body.type ?? 'USER';
        if (type === 'SERVICE') {
          await auth(ctx, async () => {});
          if (!adminToken(ctx.state.auth!)) throw forbidden('Only admins may register SERVICE accounts.');
        }
        await fixedWindowLimit(hub.fixedWindows, `register:${ctx.ip}`, config.loginLimitPerMinute);
        // A nick HUB_ADMINS lists is an admin's: whoever registered it first would be one. Until it
        // is registered only the operator may register it (docs/api.md, Admins).
        if (isAdmin(body.nick)) await operator(ctx);
        const id = newId();
        const prn = type === 'SERVICE' ? servicePrn(body.nick, config.serviceDomain) : accountPrn(id);
        const names: [string, string][] = [
          ['nick', lower(body.nick)],
          ['email', lower(body.email)],
          ['prn', prn],
        ];
        await claimNames(id, names);
        const command = {
          id,
          prn,
          type,
          nick: body.nick,
          email: lower(body.email),
          passwordHash: await hashPassword(body.password),
          challenge: `${id}.${secretToken(18)}`,
          redirectUris: body.redirect_uris ?? [],
        };
        let registered: Awaited<ReturnType<typeof handle<AccountState, undefined>>>;
        try {
          registered = await handle(store, accountStream(id), accounts, (s) => ({
            events: decideRegister(command, s),
            result: undefined,
          }));
        } catch (err) {
          // Nothing was registered: the names go back, so that nobody is locked out of them.
          for (const [kind, value] of names) await releaseName(store, kind, value, id).catch(() => {});
          throw err;
        }
        const { appended, after: created } = registered;
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = {
          ...accountRecord(created),
          ...(created.active
            ? {}
            : { 'redirect-uri': `${hub.publicUrl()}/auth/challenge/${command.challenge}` }),
        };
      },
    });

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

    routes.add({
      method: 'post',
      path: '/auth/challenge/{challenge}',
      tag: 'auth',
      summary:
        'Pass the registration challenge: checks the captcha (when configured) and sends the verification email.',
      security: 'none',
      body: s.object({ additionalProperties: false, properties: { captcha: s.string({ maxLength: 4096 }) } }),
      responses: { 202: { description: 'The verification email is on its way.', schema: outcome('sent') } },
      handler: async (ctx, { body }) => {
        await fixedWindowLimit(hub.fixedWindows, `challenge:${ctx.ip}`, config.loginLimitPerMinute);
        const account = await challengeAccount(ctx.params.challenge!);
        refuseVerified(account); // before the captcha is asked about
        if (!(await hub.captcha(body.captcha ?? '', ctx.ip))) {
          throw unprocessable('The captcha answer was not accepted.', [
            { field: 'captcha', problem: 'not accepted' },
          ]);
        }
        await requestEmail(ctx, account, decideRequestVerification, config.verifyTtlS * 1000);
        ctx.status = 202;
        ctx.body = { status: 'sent', message: `A verification email is on its way to ${account.email}.` };
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/verify',
      tag: 'auth',
      summary: 'Verify the email address (the link in the verification email); activates the account.',
      security: 'none',
      query: EMAILED_LINK_QUERY,
      responses: {
        200: { description: 'Verified (also when it was already).', schema: VERIFIED },
        401: { description: 'The link is not valid, or has expired.' },
      },
      handler: (ctx, { query }) => verify(ctx, query.token),
    });
    routes.add({
      method: 'post',
      path: '/auth/verify',
      tag: 'auth',
      summary: 'Verify the email address with the token of the verification email.',
      security: 'none',
      body: s.object({
        required: ['token'],
        additionalProperties: false,
        properties: { token: s.string({ maxLength: 512 }) },
      }),
      responses: {
        200: { description: 'Verified (also when it was already).', schema: VERIFIED },
        401: { description: 'The link is not valid, or has expired.' },
      },
      handler: (ctx, { body }) => verify(ctx, body.token),
    });
  };
}

// The page's script: constant, so that the page's Content-Security-Policy names it by its hash (no
// other script runs); what it needs of the request it reads from the address.
const CHALLENGE_SCRIPT = `document.getElementById('send').onclick = async () => {
  const c = document.getElementById('captcha');
  const r = await fetch(location.pathname, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(c ? { captcha: c.value } : {}) });
  document.getElementById('out').textContent = (await r.json()).message;
};`;

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
