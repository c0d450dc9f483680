// What the route files of /auth share, made once per hub: the bearer check, who is an admin, the
// password-guess throttle, finding accounts, recording an email to send, and whether
// a token's login still holds.
import { randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import {
  type AccountState,
  accountStream,
  accounts,
  type decideRequestReset,
  type decideRequestVerification,
  isAdminNick,
} from '../../domain/accounts.ts';
import { refreshFamilies, refreshStream } from '../../domain/logins.ts';
import { load, nameOwner } from '../../infra/eventstore/aggregate.ts';
import { nonce } from '../../infra/secrets.ts';
import { decideOn, type HubContext } from '../context.ts';
import { unauthorized } from '../errors.ts';
import { authenticate, isAdminToken } from './middleware.ts';
import { operatorCheck } from './operator.ts';
import { LoginThrottle } from './throttle.ts';
import { type Claims, changedSinceLogin } from './tokens.ts';

export type AuthContext = ReturnType<typeof authContext>;

export const lower = (s: string) => s.toLowerCase();
export const newId = () => randomBytes(12).toString('hex');

export function authContext(hub: HubContext) {
  const { store, config, keys } = hub;
  const auth = authenticate(keys, store, config.callerCacheEntries);
  const isAdmin = (nick: string) => isAdminNick(config.admins, nick);
  const operator = operatorCheck(config.saAdminSecret, hub.fixedWindows, config.callbacksFailuresPerMinute);
  const adminToken = (c: Claims) => isAdminToken(config.admins, c);

  async function loadAccount(id: string): Promise<AccountState | undefined> {
    const { state } = await load(store, accountStream(id), accounts);
    return state.id ? state : undefined;
  }

  /** Finds an account by nick, email or PRN; read from the store, so it is never stale. */
  async function findAccount(name: string): Promise<AccountState | undefined> {
    const kind = name.includes('@') ? 'email' : name.startsWith('prn:') ? 'prn' : 'nick';
    const id = await nameOwner(store, kind, kind === 'prn' ? name : lower(name));
    return id ? loadAccount(id) : undefined;
  }

  // Guesses of an account's password (login, password change), by its id (or, for a name that is
  // no account's, and a device's PRN, by the name).
  const throttle = new LoginThrottle(hub.fixedWindows, {
    perAddressPerMinute: config.loginAccountLimitPerMinute,
    perAccountPerHour: config.loginAccountFailuresPerHour,
    knownForMs: config.loginKnownAddressDays * 86_400_000,
  });

  /** Records that an email with a fresh single-use token goes out (a verification link, or a reset
   * link when the account may have one); the mailer sends it. */
  async function requestEmail(
    ctx: Context,
    account: AccountState,
    decide: typeof decideRequestVerification | typeof decideRequestReset,
    validMs: number,
  ): Promise<void> {
    const command = { nonce: nonce(), expires: Date.now() + validMs };
    await decideOn(hub, ctx, accountStream(account.id), accounts, (s) => decide(command, s));
  }

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
    if (claims.sid && (await load(store, refreshStream(claims.sid), refreshFamilies)).state.revoked)
      throw unauthorized('This login was revoked; log in again.');
  }

  return {
    hub,
    auth,
    isAdmin,
    operator,
    adminToken,
    loadAccount,
    findAccount,
    throttle,
    requestEmail,
    loginHolds,
  };
}
