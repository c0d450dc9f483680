// The account aggregate's decisions, each command's rules in given/when/then form: registration,
// verification, the expiry of a registration never verified, and recovery. No I/O.
import assert from 'node:assert/strict';
import {
  accounts,
  decideChangePassword,
  decideExpireRegistration,
  decideRegister,
  decideRequestReset,
  decideRequestVerification,
  decideResetPassword,
  decideVerify,
  type RegisterAccount,
  refuseVerified,
} from '../../domain/accounts.ts';
import type { DomainEvent, EventData } from '../../domain/events.ts';
import { given } from './decider.ts';

const ID = '0123456789abcdef01234567';
const PRN = `prn:::accounts:/${ID}`;

const registered = (
  data: Partial<EventData['AccountRegistered']> = {},
): DomainEvent<'AccountRegistered'> => ({
  type: 'AccountRegistered',
  data: {
    account_id: ID,
    prn: PRN,
    type: 'USER',
    nick: 'Alice',
    email: 'alice@example.com',
    password_hash: 'hash-1',
    challenge: `${ID}.ch`,
    redirect_uris: [],
    active: false,
    ...data,
  },
});
const verified: DomainEvent<'AccountVerified'> = {
  type: 'AccountVerified',
  data: { account_id: ID, nonce: 'v1' },
};
const verificationRequested = (
  nonce: string,
  expires: number,
): DomainEvent<'VerificationEmailRequested'> => ({
  type: 'VerificationEmailRequested',
  data: { account_id: ID, email: 'alice@example.com', nonce, expires },
});
const resetRequested = (nonce: string, expires: number): DomainEvent<'PasswordResetRequested'> => ({
  type: 'PasswordResetRequested',
  data: { account_id: ID, email: 'alice@example.com', nonce, expires },
});
const passwordChanged = (resetNonce: string | null): DomainEvent<'PasswordChanged'> => ({
  type: 'PasswordChanged',
  data: { account_id: ID, password_hash: 'hash-2', reset_nonce: resetNonce },
});
const expired: DomainEvent<'RegistrationExpired'> = {
  type: 'RegistrationExpired',
  data: { account_id: ID, nick: 'alice', email: 'alice@example.com' },
};

describe('accounts: decisions (unit)', () => {
  describe('register', () => {
    const command = (c: Partial<RegisterAccount> = {}): RegisterAccount => ({
      id: ID,
      prn: PRN,
      type: 'USER',
      nick: 'Alice',
      email: 'alice@example.com',
      passwordHash: 'hash-1',
      challenge: `${ID}.ch`,
      redirectUris: [],
      ...c,
    });

    it('a user: pending until its email is verified', () => {
      given(accounts)()
        .when((s) => decideRegister(command(), s))
        .thenEmits(registered());
    });

    it('a service: active at once', () => {
      const service = command({ type: 'SERVICE', prn: 'prn::auth:/reporting', nick: 'reporting' });
      given(accounts)()
        .when((s) => decideRegister(service, s))
        .thenEmits(
          registered({ type: 'SERVICE', prn: 'prn::auth:/reporting', nick: 'reporting', active: true }),
        );
    });

    it('an account that exists is not registered again', () => {
      given(accounts)(registered())
        .when((s) => decideRegister(command(), s))
        .thenRefuses('conflict', /exists already/);
    });

    it('the fold shows the account, with its type, and no password but its hash', () => {
      const s = given(accounts)(registered({ type: 'SERVICE', active: true })).state;
      assert.equal(s.id, ID);
      assert.equal(s.type, 'SERVICE');
      assert.equal(s.active, true);
      assert.equal(s.passwordHash, 'hash-1');
      assert.equal(s.created, 1000);
    });
  });

  describe('request a verification email (the challenge passed)', () => {
    it('records the email with its nonce and expiry', () => {
      given(accounts)(registered())
        .when((s) => decideRequestVerification({ nonce: 'v1', expires: 5000 }, s))
        .thenEmits(verificationRequested('v1', 5000));
    });

    it('a verified account is refused (409), the check the route asks before the captcha too', () => {
      const history = given(accounts)(registered(), verified);
      history
        .when((s) => decideRequestVerification({ nonce: 'v2', expires: 5000 }, s))
        .thenRefuses('conflict');
      assert.throws(() => refuseVerified(history.state), /verified already/);
    });

    it('no such registration is not found', () => {
      given(accounts)()
        .when((s) => decideRequestVerification({ nonce: 'v1', expires: 5000 }, s))
        .thenRefuses('not_found', /No registration with this challenge/);
    });

    it('asking for an email moves no time-modified', () => {
      const s = given(accounts)(registered(), verificationRequested('v1', 5000)).state;
      assert.equal(s.modified, 1000);
      assert.equal(s.verifications.get('v1'), 5000);
    });
  });

  describe('verify the email', () => {
    it('a link sent and not expired activates the account', () => {
      given(accounts)(registered(), verificationRequested('v1', 5000))
        .when((s) => decideVerify({ nonce: 'v1', now: 4000 }, s))
        .thenEmits(verified);
    });

    it('an account verified already stays so: nothing recorded', () => {
      given(accounts)(registered(), verificationRequested('v1', 5000), verified)
        .when((s) => decideVerify({ nonce: 'v1', now: 4000 }, s))
        .thenEmits();
    });

    it('an expired link, or a nonce never sent, is refused (401)', () => {
      const history = given(accounts)(registered(), verificationRequested('v1', 5000));
      history.when((s) => decideVerify({ nonce: 'v1', now: 6000 }, s)).thenRefuses('unauthorized', /expired/);
      history
        .when((s) => decideVerify({ nonce: 'other', now: 4000 }, s))
        .thenRefuses('unauthorized', /expired/);
    });

    it('no such account: the link is not valid', () => {
      given(accounts)()
        .when((s) => decideVerify({ nonce: 'v1', now: 0 }, s))
        .thenRefuses('unauthorized', /not valid/);
    });
  });

  describe('expire a registration never verified', () => {
    const ttl = 10_000; // registered at t = 1000
    it('past its window with no link out: its names go to the newer registration', () => {
      given(accounts)(registered())
        .when((s) => decideExpireRegistration({ now: 1000 + ttl + 1, verifyTtlMs: ttl }, s))
        .thenEmits(expired);
    });

    it('within its window, or past it with a link still out: kept', () => {
      given(accounts)(registered())
        .when((s) => decideExpireRegistration({ now: 1000 + ttl, verifyTtlMs: ttl }, s))
        .thenEmits();
      given(accounts)(registered(), verificationRequested('v1', 1000 + ttl + 100))
        .when((s) => decideExpireRegistration({ now: 1000 + ttl + 1, verifyTtlMs: ttl }, s))
        .thenEmits();
      given(accounts)(registered(), resetRequested('r1', 1000 + ttl + 100))
        .when((s) => decideExpireRegistration({ now: 1000 + ttl + 1, verifyTtlMs: ttl }, s))
        .thenEmits();
    });

    it('past twice its window, new links or not', () => {
      given(accounts)(registered(), verificationRequested('v1', 1_000_000))
        .when((s) => decideExpireRegistration({ now: 1000 + 2 * ttl + 1, verifyTtlMs: ttl }, s))
        .thenEmits(expired);
    });

    it('a verified account, a service, one expired already, or none: nothing', () => {
      const later = { now: 1_000_000, verifyTtlMs: ttl };
      given(accounts)(registered(), verified)
        .when((s) => decideExpireRegistration(later, s))
        .thenEmits();
      given(accounts)(registered({ type: 'SERVICE', active: true }))
        .when((s) => decideExpireRegistration(later, s))
        .thenEmits();
      given(accounts)(registered(), expired)
        .when((s) => decideExpireRegistration(later, s))
        .thenEmits();
      given(accounts)()
        .when((s) => decideExpireRegistration(later, s))
        .thenEmits();
    });

    it('the fold: its challenge and links work no more', () => {
      const s = given(accounts)(registered(), verificationRequested('v1', 5000), expired).state;
      assert.equal(s.expired, true);
      assert.equal(s.challenge, '');
      assert.equal(s.verifications.size, 0);
    });
  });

  describe('request a password reset', () => {
    it('a user gets a reset link', () => {
      given(accounts)(registered(), verified)
        .when((s) => decideRequestReset({ nonce: 'r1', expires: 9000 }, s))
        .thenEmits(resetRequested('r1', 9000));
    });

    it('a service, or no account: nothing sent', () => {
      given(accounts)(registered({ type: 'SERVICE', active: true }))
        .when((s) => decideRequestReset({ nonce: 'r1', expires: 9000 }, s))
        .thenEmits();
      given(accounts)()
        .when((s) => decideRequestReset({ nonce: 'r1', expires: 9000 }, s))
        .thenEmits();
    });
  });

  describe('change the password (with the current one)', () => {
    it('records the new hash, no reset nonce spent', () => {
      given(accounts)(registered(), verified)
        .when((s) => decideChangePassword({ passwordHash: 'hash-2' }, s))
        .thenEmits(passwordChanged(null));
    });

    it('no such account is refused (401)', () => {
      given(accounts)()
        .when((s) => decideChangePassword({ passwordHash: 'hash-2' }, s))
        .thenRefuses('unauthorized', /no longer exists/);
    });
  });

  describe('reset the password (with the emailed token)', () => {
    const reset = (nonce: string, now: number) => ({ nonce, passwordHash: 'hash-2', now });

    it('a valid token sets the password', () => {
      given(accounts)(registered(), verified, resetRequested('r1', 9000))
        .when((s) => decideResetPassword(reset('r1', 8000), s))
        .thenEmits(passwordChanged('r1'));
    });

    it('a pending account is verified by it: the link reached the mailbox', () => {
      given(accounts)(registered(), resetRequested('r1', 9000))
        .when((s) => decideResetPassword(reset('r1', 8000), s))
        .thenEmits({ type: 'AccountVerified', data: { account_id: ID, nonce: 'r1' } }, passwordChanged('r1'));
    });

    it('a token works once, and a new password ends every reset link sent before it', () => {
      const history = given(accounts)(
        registered(),
        verified,
        resetRequested('r1', 9000),
        resetRequested('r2', 9000),
        passwordChanged('r1'),
      );
      history
        .when((s) => decideResetPassword(reset('r1', 8000), s))
        .thenRefuses('unauthorized', /used already/);
      history.when((s) => decideResetPassword(reset('r2', 8000), s)).thenRefuses('unauthorized', /expired/);
    });

    it('an expired token, or one never sent, is refused (401)', () => {
      const history = given(accounts)(registered(), verified, resetRequested('r1', 9000));
      history.when((s) => decideResetPassword(reset('r1', 9001), s)).thenRefuses('unauthorized', /expired/);
      history.when((s) => decideResetPassword(reset('nope', 8000), s)).thenRefuses('unauthorized', /expired/);
    });

    it('an expired registration, or no account, is refused (401)', () => {
      given(accounts)(registered(), resetRequested('r1', 1_000_000), expired)
        .when((s) => decideResetPassword(reset('r1', 8000), s))
        .thenRefuses('unauthorized', /registration expired/);
      given(accounts)()
        .when((s) => decideResetPassword(reset('r1', 8000), s))
        .thenRefuses('unauthorized', /not valid/);
    });
  });
});
