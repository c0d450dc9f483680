// The operator account `saadmin` (HTTP Basic with HUB_SA_ADMIN_SECRET): /callbacks, and the
// registration of a nick reserved for an admin.
import type { Context } from 'koa';
import type { FixedWindows } from '../../infra/rate-limits.ts';
import { sameSecret } from '../../infra/secrets.ts';
import { HttpError, tooManyRequests } from '../errors.ts';

/**
 * Whether a request carries the operator's credentials (HTTP Basic `saadmin` and
 * HUB_SA_ADMIN_SECRET; 401 otherwise). Wrong ones count against the caller's address, which after
 * `failuresPerMinute` of them gets 429 until the minute ends (the right ones too, meanwhile).
 */
export function operatorCheck(
  secret: string,
  windows: FixedWindows,
  failuresPerMinute: number,
): (ctx: Context) => Promise<void> {
  return async (ctx) => {
    const refuse = () =>
      new HttpError(401, 'unauthorized', 'Operator credentials required (HTTP Basic, user saadmin).', {
        headers: { 'WWW-Authenticate': 'Basic realm="callbacks"' },
      });
    const m = /^Basic\s+(\S+)$/i.exec(ctx.get('Authorization'));
    if (!m || !secret) throw refuse();
    const budget = `callbacks-fail:${ctx.ip}`;
    const wait = await windows.spent(budget, failuresPerMinute);
    if (wait > 0) throw tooManyRequests(wait);
    const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    const user = decoded.slice(0, colon);
    const password = decoded.slice(colon + 1);
    if (colon < 0 || user !== 'saadmin' || !sameSecret(password, secret)) {
      await windows.hit(budget, failuresPerMinute, 60_000);
      throw refuse();
    }
  };
}
