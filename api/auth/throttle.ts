// How password (and device secret) guessing is bounded without letting a stranger lock an account
// out: failures are counted per account and client address, and per account; an account over its
// ceiling still takes a correct password from an address it logged in from before.
import type { FixedWindows } from '../../infra/rate-limits.ts';
import { tooManyRequests } from '../errors.ts';

export interface LoginThrottleOptions {
  /** Failed attempts per account and address a minute (HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE). */
  perAddressPerMinute: number;
  /** Failed attempts per account an hour, from all addresses (HUB_LOGIN_ACCOUNT_FAILURES_PER_HOUR). */
  perAccountPerHour: number;
  /** How long an address a login succeeded from stays known to the account (HUB_LOGIN_KNOWN_ADDRESS_DAYS). */
  knownForMs: number;
}

export class LoginThrottle {
  private readonly windows: FixedWindows;
  private readonly o: LoginThrottleOptions;

  constructor(windows: FixedWindows, options: LoginThrottleOptions) {
    this.windows = windows;
    this.o = options;
  }

  /**
   * Before a password is checked: 429 when this address has spent its failures on the account,
   * or the account its ceiling and the address is not one the account logged in from.
   * `account` is the account's id (or, for a name that is no account's, the name).
   */
  async admit(account: string, address: string): Promise<void> {
    const here = await this.windows.spent(this.pairKey(account, address), this.o.perAddressPerMinute);
    if (here > 0) throw tooManyRequests(here);
    const anywhere = await this.windows.spent(this.accountKey(account), this.o.perAccountPerHour);
    if (anywhere > 0 && !(await this.windows.marked(this.knownKey(account, address))))
      throw tooManyRequests(anywhere);
  }

  /** A wrong password (or secret): counted for the address and for the account. */
  async failed(account: string, address: string): Promise<void> {
    await Promise.all([
      this.windows.hit(this.pairKey(account, address), this.o.perAddressPerMinute, 60_000),
      this.windows.hit(this.accountKey(account), this.o.perAccountPerHour, 3_600_000),
    ]);
  }

  /** A correct one: the address is (again) one the account logs in from. */
  async succeeded(account: string, address: string): Promise<void> {
    await this.windows.mark(this.knownKey(account, address), this.o.knownForMs);
  }

  private pairKey = (account: string, address: string) => `login-fail:${account}:${address}`;
  private accountKey = (account: string) => `login-fail:${account}`;
  private knownKey = (account: string, address: string) => `login-known:${account}:${address}`;
}
