// Logins and grants, each command's rules in given/when/then form: the credentials of a login, a
// login session (its refresh family) started, refresh tokens rotated and a reuse revoking the
// family, access codes issued and redeemed, and the scopes of implicit authorize. No I/O.
import assert from 'node:assert/strict';
import { type AccountState, accounts } from '../../domain/accounts.ts';
import type { DomainEvent } from '../../domain/events.ts';
import {
  codes,
  decideAppScopes,
  decideIssueAccessCode,
  decideRedeemAccessCode,
  decideRotateRefreshToken,
  decideStartLogin,
  type IssueAccessCode,
  refreshFamilies,
  refuseEndedGrant,
  refuseEndedLogin,
  refuseWrongCredentials,
  type StartLogin,
} from '../../domain/logins.ts';
import { given } from './decider.ts';

/** An account's state as its stream folds it. */
function account(
  id: string,
  nick: string,
  o: { type?: 'USER' | 'SERVICE'; active?: boolean; expired?: boolean; passwordChanged?: number } = {},
): AccountState {
  const events: DomainEvent<'AccountRegistered' | 'RegistrationExpired'>[] = [
    {
      type: 'AccountRegistered',
      data: {
        account_id: id,
        prn: o.type === 'SERVICE' ? `prn::auth:/${nick}` : `prn:::accounts:/${id}`,
        type: o.type ?? 'USER',
        nick,
        email: `${nick}@example.com`,
        password_hash: 'hash',
        challenge: '',
        redirect_uris: [],
        active: o.active ?? true,
      },
    },
  ];
  if (o.expired) events.push({ type: 'RegistrationExpired', data: { account_id: id, nick, email: '' } });
  const s = given(accounts)(...events).state;
  return { ...s, passwordChanged: o.passwordChanged ?? 0 };
}

const ADMINS = ['Root'];
const root = account('r1', 'root');
const alice = account('a1', 'alice');
const pending = account('p1', 'pat', { active: false });
const service = account('s1', 'reporting', { type: 'SERVICE' });

const issued = (actingAs: string | null = null, accountId = alice.id): DomainEvent<'RefreshTokenIssued'> => ({
  type: 'RefreshTokenIssued',
  data: { family: 'f1', account_id: accountId, token_hash: 'h0', expires: 9000, acting_as: actingAs },
});
const rotated = (hash: string): DomainEvent<'RefreshTokenRotated'> => ({
  type: 'RefreshTokenRotated',
  data: { token_hash: hash, expires: 9000 },
});
const revoked: DomainEvent<'RefreshFamilyRevoked'> = {
  type: 'RefreshFamilyRevoked',
  data: { reason: 'a spent refresh token was presented again' },
};

const codeIssued: DomainEvent<'AccessCodeIssued'> = {
  type: 'AccessCodeIssued',
  data: {
    account_id: alice.id,
    account_prn: alice.prn,
    service: service.prn,
    scopes: ['devices'],
    expires: 7000,
  },
};

describe('logins: decisions (unit)', () => {
  describe('credentials', () => {
    it('hold for an account whose password holds', () => {
      assert.doesNotThrow(() => refuseWrongCredentials(alice, true));
    });

    it('one answer (401 invalid_credentials) for no account, a wrong password, an expired registration', () => {
      for (const [a, ok] of [
        [undefined, true],
        [alice, false],
        [account('x1', 'xavier', { active: false, expired: true }), true],
      ] as const)
        assert.throws(
          () => refuseWrongCredentials(a, ok),
          (err: { refusal?: string; code?: string; message?: string }) =>
            err.refusal === 'unauthorized' &&
            err.code === 'invalid_credentials' &&
            err.message === 'Wrong username or password.',
        );
    });
  });

  describe('start a login', () => {
    const command = (c: Partial<StartLogin> = {}): StartLogin => ({
      family: 'f1',
      account: alice,
      admins: ADMINS,
      tokenHash: 'h0',
      expires: 9000,
      ...c,
    });

    it('a verified account: the first refresh token of a new family', () => {
      given(refreshFamilies)()
        .when((f) => decideStartLogin(command(), f))
        .thenEmits(issued());
    });

    it('a pending account is refused (403 account_pending)', () => {
      given(refreshFamilies)()
        .when((f) => decideStartLogin(command({ account: pending }), f))
        .thenRefuses('forbidden', /Verify your email address first/);
      assert.throws(
        () => decideStartLogin(command({ account: pending }), refreshFamilies.initial()),
        (err: { code?: string }) => err.code === 'account_pending',
      );
    });

    it('an admin logs in as a user: the family is the admin’s, acting as the user', () => {
      given(refreshFamilies)()
        .when((f) => decideStartLogin(command({ account: root, as: { name: 'alice', account: alice } }), f))
        .thenEmits(issued(alice.id, root.id));
    });

    it('only admins log in as another; only as a verified user', () => {
      const as = (name: string, a: AccountState | undefined) =>
        given(refreshFamilies)().when((f) =>
          decideStartLogin(command({ account: root, as: { name, account: a } }), f),
        );
      given(refreshFamilies)()
        .when((f) => decideStartLogin(command({ as: { name: 'root', account: root } }), f))
        .thenRefuses('forbidden', /Only admins/);
      as('nobody', undefined).thenRefuses('not_found', /No user named nobody/);
      as('reporting', service).thenRefuses('not_found', /No user named reporting/);
      as('pat', pending).thenRefuses('forbidden', /pat has not verified/);
    });

    it('a family that exists is not started again', () => {
      given(refreshFamilies)(issued())
        .when((f) => decideStartLogin(command(), f))
        .thenRefuses('conflict');
    });
  });

  describe('rotate a refresh token', () => {
    const rotate = (presented: string, now = 5000) => ({ presentedHash: presented, nextHash: 'h-next', now });

    it('the current token is swapped for the next; the family keeps its expiry', () => {
      given(refreshFamilies)(issued(), rotated('h1'))
        .when((f) => decideRotateRefreshToken(rotate('h1'), f))
        .thenEmits({ type: 'RefreshTokenRotated', data: { token_hash: 'h-next', expires: 9000 } });
    });

    it('a spent token presented again revokes the whole family', () => {
      given(refreshFamilies)(issued(), rotated('h1'))
        .when((f) => decideRotateRefreshToken(rotate('h0'), f))
        .thenEmits(revoked);
    });

    it('a revoked family refuses even its current token', () => {
      given(refreshFamilies)(issued(), rotated('h1'), revoked)
        .when((f) => decideRotateRefreshToken(rotate('h1'), f))
        .thenRefuses('unauthorized', /revoked/);
    });

    it('unknown tokens, unknown families and expired ones are refused (401)', () => {
      given(refreshFamilies)(issued())
        .when((f) => decideRotateRefreshToken(rotate('never'), f))
        .thenRefuses('unauthorized', /Unknown refresh token/);
      given(refreshFamilies)()
        .when((f) => decideRotateRefreshToken(rotate('h0'), f))
        .thenRefuses('unauthorized', /Unknown refresh token/);
      given(refreshFamilies)(issued())
        .when((f) => decideRotateRefreshToken(rotate('h0', 9001), f))
        .thenRefuses('unauthorized', /expired/);
    });

    it('after a rotation the login still holds, unless its account or password changed', () => {
      const f = given(refreshFamilies)(issued()).state; // issued at t = 1000
      assert.doesNotThrow(() => refuseEndedLogin(f, { account: alice, actor: undefined, admins: ADMINS }));
      assert.throws(
        () => refuseEndedLogin(f, { account: pending, actor: undefined, admins: ADMINS }),
        /can no longer log in/,
      );
      assert.throws(
        () => refuseEndedLogin(f, { account: alice, actor: alice, admins: ADMINS }),
        /can no longer log in/,
        'an actor no longer an admin',
      );
      const changed = account('a1', 'alice', { passwordChanged: 1001 });
      assert.throws(
        () => refuseEndedLogin(f, { account: changed, actor: undefined, admins: ADMINS }),
        /password changed/,
      );
    });
  });

  describe('issue an access code', () => {
    const command = (c: Partial<IssueAccessCode> = {}): IssueAccessCode => ({
      user: alice,
      service,
      scopes: ['devices'],
      expires: 7000,
      ...c,
    });

    it('a user grants a service scopes', () => {
      given(codes)()
        .when((c) => decideIssueAccessCode(command(), c))
        .thenEmits(codeIssued);
    });

    it('only to a registered service (422), by a user that exists (401)', () => {
      given(codes)()
        .when((c) => decideIssueAccessCode(command({ service: alice }), c))
        .thenRefuses('invalid', /No such service/);
      given(codes)()
        .when((c) => decideIssueAccessCode(command({ service: undefined }), c))
        .thenRefuses('invalid', /No such service/);
      given(codes)()
        .when((c) => decideIssueAccessCode(command({ user: undefined }), c))
        .thenRefuses('unauthorized', /no longer exists/);
    });
  });

  describe('redeem an access code', () => {
    const redeem = (svc = service.prn, now = 5000) => ({ service: svc, now });

    it('the service it names swaps it, once', () => {
      given(codes)(codeIssued)
        .when((c) => decideRedeemAccessCode(redeem(), c))
        .thenEmits({ type: 'AccessCodeRedeemed', data: { service: service.prn } });
      given(codes)(codeIssued, { type: 'AccessCodeRedeemed', data: { service: service.prn } })
        .when((c) => decideRedeemAccessCode(redeem(), c))
        .thenRefuses('unauthorized', /used already/);
    });

    it('unknown (401), expired (401), another service’s (403)', () => {
      given(codes)()
        .when((c) => decideRedeemAccessCode(redeem(), c))
        .thenRefuses('unauthorized', /Unknown access code/);
      given(codes)(codeIssued)
        .when((c) => decideRedeemAccessCode(redeem(service.prn, 7001), c))
        .thenRefuses('unauthorized', /expired/);
      given(codes)(codeIssued)
        .when((c) => decideRedeemAccessCode(redeem('prn::auth:/billing'), c))
        .thenRefuses('forbidden', /another service/);
    });

    it('its grant ends with its user’s login: an inactive user, or a password changed since', () => {
      const grant = given(codes)(codeIssued).state.grant!; // granted at t = 1000
      assert.doesNotThrow(() => refuseEndedGrant(alice, grant));
      assert.throws(() => refuseEndedGrant(pending, grant), /can no longer log in/);
      assert.throws(() => refuseEndedGrant(undefined, grant), /can no longer log in/);
      assert.throws(
        () => refuseEndedGrant(account('a1', 'alice', { passwordChanged: 1001 }), grant),
        /password changed/,
      );
    });
  });

  describe('implicit authorize: the scopes an app is granted', () => {
    const app = {
      id: 'app1',
      deleted: 0,
      fields: { redirect_uris: ['https://app.example/cb'], scopes: [{ id: 'devices' }, { id: 'trails' }] },
    };

    it('what is asked of what the app declares; all it declares when nothing is asked', () => {
      assert.deepEqual(decideAppScopes({ redirectUri: 'https://app.example/cb', scopes: ['trails'] }, app), [
        'trails',
      ]);
      assert.deepEqual(decideAppScopes({ redirectUri: 'https://app.example/cb', scopes: undefined }, app), [
        'devices',
        'trails',
      ]);
    });

    it('no such app, another redirect URI, an undeclared scope: 422 naming the field', () => {
      const refused = (a: typeof app, redirectUri: string, scopes: string[] | undefined, field: string) =>
        assert.throws(
          () => decideAppScopes({ redirectUri, scopes }, a),
          (err: { refusal?: string; details?: { field: string }[] }) =>
            err.refusal === 'invalid' && err.details?.[0]?.field === field,
        );
      refused({ ...app, deleted: 5 }, 'https://app.example/cb', undefined, 'client_id');
      refused({ ...app, id: '' }, 'https://app.example/cb', undefined, 'client_id');
      refused(app, 'https://app.example/cb/', undefined, 'redirect_uri');
      refused(app, 'https://app.example/cb', ['devices', 'apps'], 'scope');
    });
  });
});
