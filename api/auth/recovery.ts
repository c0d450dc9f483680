// Recovery and password changes: a reset link by email (its page, a form), and a new password set
// with the emailed token or with one's login and current password.
import { setTimeout as delay } from 'node:timers/promises';
import {
  accountStream,
  accounts,
  decideChangePassword,
  decideRequestReset,
  decideResetPassword,
} from '../../domain/accounts.ts';
import type { DomainEvent } from '../../domain/events.ts';
import { handle } from '../../infra/eventstore/aggregate.ts';
import { hashPassword, readEmailedToken, verifyPassword } from '../../infra/secrets.ts';
import { forbidden, invalidCredentials, unauthorized, unprocessable } from '../errors.ts';
import { fixedWindowLimit, sendPage } from '../http.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { type AuthContext, lower } from './context.ts';
import { EMAIL, EMAILED_LINK_QUERY, outcome, PASSWORD } from './schemas.ts';
import { HUB_AUDIENCE } from './tokens.ts';

const RESET_MS = 3600_000;
/** POST /auth/recover answers no sooner than this, known email or not. */
const RECOVER_FLOOR_MS = 100;

export function recoveryRoutes(a: AuthContext) {
  const { hub, auth, findAccount, throttle, requestEmail } = a;
  const { store, config, keys } = hub;

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/auth/recover',
      tag: 'auth',
      summary: 'Ask for a password reset link by email.',
      description:
        'Always answers 200 with the same body, no sooner than 100 ms after the request, whether or not an account has this email, so that it reveals nothing. The emailed token works once, for an hour.',
      security: 'none',
      body: s.object({ required: ['email'], additionalProperties: false, properties: { email: EMAIL } }),
      responses: {
        200: {
          description: 'If an account has this email, a reset link is on its way.',
          schema: outcome('accepted'),
        },
      },
      handler: async (ctx, { body }) => {
        await fixedWindowLimit(hub.fixedWindows, `recover:${ctx.ip}`, config.loginLimitPerMinute);
        // A known email costs an append the unknown one does not: both answer at the same floor,
        // which the append stays well under, so the time tells nothing either.
        const floor = delay(RECOVER_FLOOR_MS);
        const account = await findAccount(lower(body.email));
        if (account) await requestEmail(ctx, account, decideRequestReset, RESET_MS);
        await floor;
        ctx.body = {
          status: 'accepted',
          message: 'If an account has this email, a reset link is on its way.',
        };
      },
    });

    routes.add({
      method: 'post',
      path: '/auth/password',
      tag: 'auth',
      summary: 'Set a new password: with the emailed reset token, or with your token and current password.',
      description:
        'A reset token works once and expires after an hour (401 otherwise); a new password ends every reset token sent before it. Without `token`, send your bearer token and `current_password` (422 without it, 401 when wrong; a device token: 403).',
      security: 'bearer-if-body-needs',
      body: s.object({
        required: ['password'],
        additionalProperties: false,
        properties: {
          password: PASSWORD,
          token: s.string({ maxLength: 512 }),
          current_password: s.string({ maxLength: 512 }),
        },
      }),
      responses: { 200: { description: 'The password is set.', schema: outcome('changed') } },
      handler: async (ctx, { body }) => {
        let accountId: string;
        let reset: { nonce: string } | undefined;
        if (body.token) {
          const parsed = readEmailedToken(keys.hmacKey, 'reset', body.token);
          if (!parsed) throw unauthorized('This reset token is not valid.');
          accountId = parsed.accountId;
          reset = { nonce: parsed.nonce };
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
        const passwordHash = await hashPassword(body.password);
        const { appended } = await handle(store, accountStream(accountId), accounts, (s) => {
          const events: DomainEvent[] = reset
            ? decideResetPassword({ nonce: reset.nonce, passwordHash, now: Date.now() }, s)
            : decideChangePassword({ passwordHash }, s);
          return { events, result: undefined };
        });
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = { status: 'changed', message: 'The password is set.' };
      },
    });

    routes.add({
      method: 'get',
      path: '/auth/reset',
      tag: 'auth',
      summary: 'The page of the password reset link: a form that posts to /auth/password.',
      security: 'none',
      query: EMAILED_LINK_QUERY,
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
  };
}

// The page's script: constant, so that the page's Content-Security-Policy names it by its hash (no
// other script runs); what it needs of the request it reads from the address.
const RESET_SCRIPT = `document.getElementById('go').onclick = async () => {
  const token = new URLSearchParams(location.search).get('token');
  const r = await fetch('/auth/password', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token, password: document.getElementById('pw').value }) });
  document.getElementById('out').textContent = (await r.json()).message;
};`;
