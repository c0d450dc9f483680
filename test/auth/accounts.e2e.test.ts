// /auth over HTTP: registration in two steps, login of every class, admin listing and
// impersonation, recovery, rate limits; success and refusal paths.
import assert from 'node:assert/strict';
import { request } from '../harness.ts';
import { readMail, signup, startHub, type TestHub, type User } from '../hub.ts';

describe('/auth accounts (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let root: User;
  let alice: User;
  const bodies: string[] = [];
  const keep = <T extends { body: unknown }>(r: T): T => {
    bodies.push(JSON.stringify(r.body));
    return r;
  };

  before(async () => {
    hub = await startHub();
    root = await signup(hub, 'root');
    alice = await signup(hub, 'alice');
  });
  after(() => hub.stop());

  describe('registration', () => {
    it('answers a pending account with redirect-uri, and never a password or a hash', async () => {
      const r = keep(
        await hub.call('POST', '/auth/accounts', {
          body: { email: 'Bob@Example.com', nick: 'bob', password: 'correct horse battery' },
        }),
      );
      assert.equal(r.status, 200);
      assert.equal(r.body.nick, 'bob');
      assert.equal(r.body.email, 'bob@example.com');
      assert.equal(r.body.type, 'USER');
      assert.equal(r.body.status, 'pending');
      assert.match(r.body.prn, /^prn:::accounts:\/[a-f0-9]{24}$/);
      assert.match(r.body['redirect-uri'], new RegExp(`^${hub.url}/auth/challenge/`));
      for (const field of ['password', 'password_bcrypt', 'password_scrypt', 'password_hash'])
        assert.equal(r.body[field], undefined);
      assert.doesNotMatch(JSON.stringify(r.body), /scrypt|correct horse/);
    });

    it('a pending account cannot log in', async () => {
      const r = await hub.call('POST', '/auth/login', {
        body: { username: 'bob', password: 'correct horse battery' },
      });
      assert.equal(r.status, 403);
      assert.equal(r.body.error, 'account_pending');
    });

    it('the challenge page and the emailed link activate the account', async () => {
      const page = await request(
        `${hub.url}/auth/challenge/${(await hub.call('POST', '/auth/accounts', { body: { email: 'carol@example.com', nick: 'carol', password: 'carol-password' } })).body['redirect-uri'].split('/challenge/')[1]}`,
      );
      assert.equal(page.status, 200);
      assert.match(page.body, /Welcome, carol/);
    });

    it('nick and email are unique, case-insensitively (409), and a refused registration keeps nothing', async () => {
      const nick = await hub.call('POST', '/auth/accounts', {
        body: { email: 'other@example.com', nick: 'ALICE', password: 'password-1' },
      });
      assert.equal(nick.status, 409);
      assert.match(nick.body.message, /nick is taken/);
      const email = await hub.call('POST', '/auth/accounts', {
        body: { email: 'ALICE@example.com', nick: 'alice2', password: 'password-1' },
      });
      assert.equal(email.status, 409);
      assert.match(email.body.message, /email is taken/);
      // The nick that registration claimed before the email clashed was given back.
      const retry = await hub.call('POST', '/auth/accounts', {
        body: { email: 'alice2@example.com', nick: 'alice2', password: 'password-1' },
      });
      assert.equal(retry.status, 200);
    });

    it('refuses bad input with 422 naming the field', async () => {
      const cases: [unknown, string][] = [
        [{ email: 'x@example.com', nick: 'xx', password: 'password-1' }, 'nick'],
        [{ email: 'not-an-email', nick: 'xavier', password: 'password-1' }, 'email'],
        [{ email: 'x@example.com', nick: 'xavier', password: 'short' }, 'password'],
        [
          { email: 'x@example.com', nick: 'xavier', password: 'password-1', password_scrypt: 'abc' },
          'password_scrypt',
        ],
        [{ email: 'x@example.com', nick: 'xavier', password: 'password-1', type: 'DEVICE' }, 'type'],
        [{ nick: 'xavier', password: 'password-1' }, 'email'],
      ];
      for (const [body, field] of cases) {
        const r = await hub.call('POST', '/auth/accounts', { body });
        assert.equal(r.status, 422, JSON.stringify(body));
        assert.equal(r.body.details[0].field, field);
      }
    });

    it('only admins register SERVICE accounts', async () => {
      const anonymous = await hub.call('POST', '/auth/accounts', {
        body: { email: 's@example.com', nick: 'svc1', password: 'password-1', type: 'SERVICE' },
      });
      assert.equal(anonymous.status, 401);
      const user = await hub.call('POST', '/auth/accounts', {
        token: alice.token,
        body: { email: 's@example.com', nick: 'svc1', password: 'password-1', type: 'SERVICE' },
      });
      assert.equal(user.status, 403);
      const admin = await hub.call('POST', '/auth/accounts', {
        token: root.token,
        body: { email: 's@example.com', nick: 'svc1', password: 'password-1', type: 'SERVICE' },
      });
      assert.equal(admin.status, 200);
      assert.equal(admin.body.prn, 'prn::auth:/svc1');
      assert.equal(admin.body.status, 'active');
    });

    it('an unknown or forged verification link is refused', async () => {
      assert.equal((await hub.call('GET', '/auth/verify?token=abc.def.ghi')).status, 401);
      // Emailed links: parameters a mail link-tracker appends are ignored, not refused.
      assert.equal((await hub.call('GET', '/auth/verify?token=abc.def.ghi&utm_source=email')).status, 401);
      const page = await fetch(`${hub.url}/auth/reset?token=t&utm_source=email&utm_medium=mail`);
      assert.equal(page.status, 200);
      // The API's own routes refuse a parameter they do not declare.
      assert.equal((await hub.call('GET', '/auth/accounts?utm_source=x', { token: root.token })).status, 422);
      assert.equal((await hub.call('GET', '/auth/challenge/nope.nope')).status, 404);
    });
  });

  describe('login', () => {
    it('logs in by nick or by email, and says who the token is', async () => {
      const byEmail = keep(
        await hub.call('POST', '/auth/login', {
          body: { username: 'alice@example.com', password: alice.password },
        }),
      );
      assert.equal(byEmail.status, 200);
      assert.equal(byEmail.body.token_type, 'Bearer');
      assert.equal(byEmail.body.expires_in, 3600);
      const status = keep(await hub.call('GET', '/auth/auth_status', { token: byEmail.body.token }));
      assert.equal(status.status, 200);
      assert.equal(status.body.sub, alice.prn);
      assert.equal(status.body.prn, alice.prn);
      assert.equal(status.body.nick, 'alice');
      assert.equal(status.body.type, 'USER');
      assert.equal(status.body.aud, 'device-hub');
      assert.deepEqual(status.body.scopes, ['*']);
    });

    it('a wrong password and an unknown user get the same 401', async () => {
      const wrong = await hub.call('POST', '/auth/login', {
        body: { username: 'alice', password: 'nope-nope' },
      });
      const unknown = await hub.call('POST', '/auth/login', {
        body: { username: 'nobody', password: 'nope-nope' },
      });
      assert.equal(wrong.status, 401);
      assert.equal(unknown.status, 401);
      assert.equal(wrong.body.message, unknown.body.message);
      assert.equal(wrong.body.error, 'invalid_credentials');
      assert.equal(wrong.headers.get('www-authenticate'), 'Bearer', 'a 401 like any');
    });
  });

  describe('admin', () => {
    it('lists every account with ?asadmin=yes, paginated, without password material', async () => {
      const r = keep(
        await hub.call('GET', '/auth/accounts?asadmin=yes&limit=2&skip=0', { token: root.token }),
      );
      assert.equal(r.status, 200);
      assert.equal(r.body.limit, 2);
      assert.equal(r.body.skip, 0);
      assert.equal(r.body.items.length, 2);
      assert.ok(r.body.total >= 5);
      assert.equal(r.body.items[0].nick, 'root');
      const next = await hub.call('GET', '/auth/accounts?asadmin=yes&limit=2&skip=2', { token: root.token });
      assert.notEqual(next.body.items[0].nick, r.body.items[0].nick);
      assert.doesNotMatch(JSON.stringify(r.body), /scrypt|password/);
    });

    it("refuses the listing to a non-admin (403), and answers one's own account without asadmin", async () => {
      assert.equal((await hub.call('GET', '/auth/accounts?asadmin=yes', { token: alice.token })).status, 403);
      const own = await hub.call('GET', '/auth/accounts', { token: alice.token });
      assert.equal(own.status, 200);
      assert.deepEqual(
        own.body.items.map((a: { nick: string }) => a.nick),
        ['alice'],
      );
    });

    it('an admin logs in as another user; the token says who acts for whom', async () => {
      const r = await hub.call('POST', '/auth/login', {
        body: { username: 'root==>alice', password: root.password },
      });
      assert.equal(r.status, 200);
      const claims = (await hub.call('GET', '/auth/auth_status', { token: r.body.token })).body;
      assert.equal(claims.sub, alice.prn);
      assert.equal(claims.nick, 'alice');
      assert.deepEqual(claims.act, { sub: root.prn, nick: 'root' });
      // Acting as alice does not carry root's admin listing.
      assert.equal(
        (await hub.call('GET', '/auth/accounts?asadmin=yes', { token: r.body.token })).status,
        403,
      );
    });

    it('an admin acts as users only: not as a service (404), nor as an account still pending (403)', async () => {
      const asService = await hub.call('POST', '/auth/login', {
        body: { username: 'root==>svc1', password: root.password },
      });
      assert.equal(asService.status, 404);
      const pending = await hub.call('POST', '/auth/accounts', {
        body: { email: 'dora@example.com', nick: 'dora', password: 'dora-password' },
      });
      assert.equal(pending.body.status, 'pending');
      const asPending = await hub.call('POST', '/auth/login', {
        body: { username: 'root==>dora', password: root.password },
      });
      assert.equal(asPending.status, 403);
      assert.equal(asPending.body.error, 'account_pending');
    });

    it('a device or a service named like an admin gets no admin rights', async () => {
      const device = await hub.call('POST', '/devices', { body: { nick: 'root' } });
      assert.equal(device.status, 200);
      const login = await hub.call('POST', '/auth/login', {
        body: { username: device.body.prn, password: device.body.secret },
      });
      assert.equal(login.body.nick, 'root');
      assert.equal(
        (await hub.call('GET', '/auth/accounts?asadmin=yes', { token: login.body.token })).status,
        403,
      );
      const service = await hub.call('POST', '/auth/accounts', {
        token: login.body.token,
        body: { email: 'sneaky@example.com', nick: 'sneaky', password: 'password-1', type: 'SERVICE' },
      });
      assert.equal(service.status, 403);
      const acting = await hub.call('POST', '/auth/login', {
        body: { username: 'root==>alice', password: root.password },
      });
      const viaImpersonation = await hub.call('POST', '/auth/accounts', {
        token: acting.body.token,
        body: { email: 'sneaky@example.com', nick: 'sneaky', password: 'password-1', type: 'SERVICE' },
      });
      assert.equal(viaImpersonation.status, 403);
    });

    it('a non-admin trying impersonation gets 403; a wrong admin password 401', async () => {
      const r = await hub.call('POST', '/auth/login', {
        body: { username: 'alice==>root', password: alice.password },
      });
      assert.equal(r.status, 403);
      assert.match(r.body.message, /Only admins/);
      assert.equal(
        (
          await hub.call('POST', '/auth/login', {
            body: { username: 'root==>alice', password: alice.password },
          })
        ).status,
        401,
      );
    });
  });

  describe('recovery', () => {
    it('answers 200 alike for unknown and known emails, at one floor of time; the emailed token sets the password once', async () => {
      const started = Date.now() - 1;
      const timed = async (email: string) => {
        const t0 = performance.now();
        const r = await hub.call('POST', '/auth/recover', { body: { email } });
        return { ...r, ms: performance.now() - t0 };
      };
      const unknown = await timed('nobody@example.com');
      const known = await timed('alice@example.com');
      assert.equal(unknown.status, 200);
      assert.equal(known.status, 200);
      assert.deepEqual(unknown.body, known.body);
      // Not a speed target: the unknown email's answer waits for the floor the known one's append stays under.
      assert.ok(unknown.ms >= 99 && known.ms >= 99, `${unknown.ms} and ${known.ms} ms`);
      const mail = await readMail(hub, 'alice@example.com', /Reset/, started);
      const token = /"token": "([^"]+)"/.exec(mail.text)![1]!;
      const set = await hub.call('POST', '/auth/password', { body: { token, password: 'a-new-password' } });
      assert.equal(set.status, 200);
      assert.equal(
        (await hub.call('POST', '/auth/login', { body: { username: 'alice', password: 'a-new-password' } }))
          .status,
        200,
      );
      assert.equal(
        (await hub.call('POST', '/auth/login', { body: { username: 'alice', password: alice.password } }))
          .status,
        401,
      );
      const again = await hub.call('POST', '/auth/password', {
        body: { token, password: 'another-password' },
      });
      assert.equal(again.status, 401);
      assert.match(again.body.message, /used already/);
      const forged = await hub.call('POST', '/auth/password', {
        body: { token: `${token.slice(0, -2)}xx`, password: 'another-password' },
      });
      assert.equal(forged.status, 401);
      alice.password = 'a-new-password';
    });

    it('a password change ends the logins made before it, at their next refresh', async () => {
      const r = await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: alice.refresh } });
      assert.equal(r.status, 401);
      assert.match(r.body.message, /password changed/);
      const fresh = await hub.call('POST', '/auth/login', {
        body: { username: 'alice', password: alice.password },
      });
      assert.equal(
        (await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: fresh.body.refresh_token } }))
          .status,
        200,
      );
    });

    it('the reset page does not run script smuggled into its token', async () => {
      const res = await fetch(
        `${hub.url}/auth/reset?token=${encodeURIComponent('</script><script>alert(1)</script>')}`,
      );
      const html = await res.text();
      assert.equal(res.status, 200);
      assert.ok(!html.includes('</script><script>alert(1)'), 'the token closed the script element');
    });

    it('changes the password with the current one and a token', async () => {
      const wrong = await hub.call('POST', '/auth/password', {
        token: alice.token,
        body: { current_password: 'wrong-one', password: 'third-password' },
      });
      assert.equal(wrong.status, 401);
      const ok = await hub.call('POST', '/auth/password', {
        token: alice.token,
        body: { current_password: alice.password, password: 'third-password' },
      });
      assert.equal(ok.status, 200);
      alice.password = 'third-password';
      assert.equal(
        (await hub.call('POST', '/auth/login', { body: { username: 'alice', password: 'third-password' } }))
          .status,
        200,
      );
    });

    it('with a token, current_password is required (422); a device token has no password (403)', async () => {
      const missing = await hub.call('POST', '/auth/password', {
        token: alice.token,
        body: { password: 'fourth-password' },
      });
      assert.equal(missing.status, 422);
      assert.equal(missing.body.details[0].field, 'current_password');
      const d = await hub.call('POST', '/devices', { token: alice.token });
      const device = await hub.call('POST', '/auth/login', {
        body: { username: d.body.prn, password: d.body.secret },
      });
      const byDevice = await hub.call('POST', '/auth/password', {
        token: device.body.token,
        body: { current_password: d.body.secret, password: 'fourth-password' },
      });
      assert.equal(byDevice.status, 403);
    });

    it('a reset link verifies a pending account: registered by someone else, never verified, its mailbox owner gets in', async () => {
      const squatted = await hub.call('POST', '/auth/accounts', {
        body: { email: 'dana@example.com', nick: 'dana-squat', password: 'not-danas-password' },
      });
      assert.equal(squatted.body.status, 'pending');
      const started = Date.now() - 1;
      assert.equal(
        (await hub.call('POST', '/auth/recover', { body: { email: 'dana@example.com' } })).status,
        200,
      );
      const mail = await readMail(hub, 'dana@example.com', /Reset/, started);
      const token = /"token": "([^"]+)"/.exec(mail.text)![1]!;
      const set = await hub.call('POST', '/auth/password', {
        body: { token, password: 'danas-own-password' },
      });
      assert.equal(set.status, 200);
      const login = await hub.call('POST', '/auth/login', {
        body: { username: 'dana@example.com', password: 'danas-own-password' },
      });
      assert.equal(login.status, 200, JSON.stringify(login.body));
      const old = await hub.call('POST', '/auth/login', {
        body: { username: 'dana-squat', password: 'not-danas-password' },
      });
      assert.equal(old.status, 401);
    });

    it('a new password ends every reset link sent before it, not only the one used', async () => {
      const resetToken = async () => {
        const started = Date.now();
        await new Promise((r) => setTimeout(r, 5)); // each mail a file of its own millisecond
        assert.equal(
          (await hub.call('POST', '/auth/recover', { body: { email: 'alice@example.com' } })).status,
          200,
        );
        return /"token": "([^"]+)"/.exec(
          (await readMail(hub, 'alice@example.com', /Reset/, started)).text,
        )![1]!;
      };
      const first = await resetToken();
      const second = await resetToken();
      assert.notEqual(first, second);
      assert.equal(
        (await hub.call('POST', '/auth/password', { body: { token: first, password: 'fifth-password' } }))
          .status,
        200,
      );
      const stale = await hub.call('POST', '/auth/password', {
        body: { token: second, password: 'sixth-password' },
      });
      assert.equal(stale.status, 401);
      const third = await resetToken();
      assert.equal(
        (
          await hub.call('POST', '/auth/password', {
            token: (
              await hub.call('POST', '/auth/login', {
                body: { username: 'alice', password: 'fifth-password' },
              })
            ).body.token,
            body: { current_password: 'fifth-password', password: 'seventh-password' },
          })
        ).status,
        200,
      );
      assert.equal(
        (await hub.call('POST', '/auth/password', { body: { token: third, password: 'eighth-password' } }))
          .status,
        401,
        'a change with the current password ends them too',
      );
      alice.password = 'seventh-password';
    });

    it('a password change also ends refreshing older access tokens through GET /auth/login', async () => {
      const login = async () =>
        (await hub.call('POST', '/auth/login', { body: { username: 'alice', password: alice.password } }))
          .body.token;
      const before = await login();
      await new Promise((r) => setTimeout(r, 1100)); // a later second: orig_iat is in seconds
      const changed = await hub.call('POST', '/auth/password', {
        token: before,
        body: { current_password: alice.password, password: 'ninth-password' },
      });
      assert.equal(changed.status, 200);
      alice.password = 'ninth-password';
      const refused = await hub.call('GET', '/auth/login', { token: before });
      assert.equal(refused.status, 401);
      assert.match(refused.body.message, /password changed/);
      await new Promise((r) => setTimeout(r, 1100));
      assert.equal((await hub.call('GET', '/auth/login', { token: await login() })).status, 200);
    });
  });

  describe("leaks (last: mocha runs a suite's own tests before its nested suites)", () => {
    it('no response or log line carried a password or a hash', () => {
      const everything = [...bodies, ...hub.answers, ...hub.logs()].join('\n');
      assert.ok(hub.answers.length >= 30, `the check saw ${hub.answers.length} answers`);
      for (const secret of [
        'scrypt$',
        root.password,
        'correct horse battery',
        'third-password',
        'a-new-password',
      ]) {
        assert.ok(!everything.includes(secret), `found ${secret}`);
      }
    });
  });
});

describe('/auth registrations never verified (e2e)', function () {
  this.timeout(60_000);
  it('past HUB_VERIFY_TTL_S, one gives its nick and email up to a new registration, and is gone', async () => {
    const hub = await startHub({ HUB_VERIFY_TTL_S: '1' });
    try {
      const root = await signup(hub, 'root');
      const first = await hub.call('POST', '/auth/accounts', {
        body: { email: 'squat@example.com', nick: 'wanted', password: 'squatters-password' },
      });
      assert.equal(first.status, 200);
      const young = await hub.call('POST', '/auth/accounts', {
        body: { email: 'owner@example.com', nick: 'Wanted', password: 'owners-password' },
      });
      assert.equal(young.status, 409, 'within its window a registration keeps its names');
      await new Promise((r) => setTimeout(r, 1100));
      let position = '';
      for (const body of [
        { email: 'owner@example.com', nick: 'Wanted', password: 'owners-password' },
        { email: 'squat@example.com', nick: 'someone-else', password: 'owners-password' },
      ]) {
        const r = await hub.call('POST', '/auth/accounts', { body });
        assert.equal(r.status, 200, JSON.stringify(r.body));
        position = r.headers.get('x-hub-position')!;
      }
      const page = await hub.call('POST', new URL(first.body['redirect-uri']).pathname, { body: {} });
      assert.equal(page.status, 404, 'its challenge works no more');
      const login = await hub.call('POST', '/auth/login', {
        body: { username: first.body.prn, password: 'squatters-password' },
      });
      assert.equal(login.status, 401);
      const listed = await hub.call('GET', '/auth/accounts?asadmin=yes&limit=500', {
        token: root.token,
        headers: { 'X-Hub-Min-Position': position },
      });
      const prns = listed.body.items.map((a: { prn: string }) => a.prn);
      assert.ok(!prns.includes(first.body.prn), 'the admin listing drops it');
      assert.equal(
        listed.body.items.filter((a: { nick: string }) => a.nick.toLowerCase() === 'wanted').length,
        1,
      );
    } finally {
      await hub.stop();
    }
  });
});

describe('/auth registrations never verified, with links out (e2e)', function () {
  this.timeout(60_000);
  it('a live reset link keeps one past its window, not past twice it; the link then reaches nothing', async () => {
    const hub = await startHub({ HUB_VERIFY_TTL_S: '1' });
    try {
      const registered = await hub.call('POST', '/auth/accounts', {
        body: { email: 'rk@example.com', nick: 'resetkeeps', password: 'first-password' },
      });
      assert.equal(registered.status, 200);
      await new Promise((r) => setTimeout(r, 1100));
      const started = Date.now() - 1;
      assert.equal(
        (await hub.call('POST', '/auth/recover', { body: { email: 'rk@example.com' } })).status,
        200,
      );
      const mail = await readMail(hub, 'rk@example.com', /Reset/, started);
      const token = /"token": "([^"]+)"/.exec(mail.text)![1]!;
      const taker = { email: 'other@example.com', nick: 'resetkeeps', password: 'takers-password' };
      const early = await hub.call('POST', '/auth/accounts', { body: taker });
      assert.equal(early.status, 409, 'its owner may be following the link');
      await new Promise((r) => setTimeout(r, 1100)); // past twice the window
      assert.equal((await hub.call('POST', '/auth/accounts', { body: taker })).status, 200);
      const late = await hub.call('POST', '/auth/password', { body: { token, password: 'second-password' } });
      assert.equal(late.status, 401);
      assert.match(late.body.message, /registration expired/);
    } finally {
      await hub.stop();
    }
  });
});

describe('/auth rate limits (e2e)', function () {
  this.timeout(60_000);
  it('limits login attempts per account and per address with 429 and Retry-After', async () => {
    const hub = await startHub({ HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE: '3', HUB_LOGIN_LIMIT_PER_MINUTE: '6' });
    try {
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++)
        statuses.push(
          (await hub.call('POST', '/auth/login', { body: { username: 'victim', password: `guess-${i}` } }))
            .status,
        );
      assert.deepEqual(statuses, [401, 401, 401, 429]);
      const limited = await hub.call('POST', '/auth/login', {
        body: { username: 'victim', password: 'guess' },
      });
      assert.equal(limited.body.error, 'rate_limited');
      assert.ok(Number(limited.headers.get('retry-after')) >= 1);
      // Other usernames from the same address: allowed until the per-address limit.
      const others: number[] = [];
      for (let i = 0; i < 2; i++)
        others.push(
          (await hub.call('POST', '/auth/login', { body: { username: `other${i}`, password: 'guess' } }))
            .status,
        );
      assert.deepEqual(others, [401, 429]);
    } finally {
      await hub.stop();
    }
  });

  it('one count of failures per account, whichever name it is given by, shared by guesses at POST /auth/password', async () => {
    const hub = await startHub({ HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE: '5' });
    try {
      const erin = await signup(hub, 'erin'); // its login succeeds: not counted
      const statuses: number[] = [];
      for (const username of ['erin', 'erin@example.com', erin.prn]) // failures 1, 2, 3
        statuses.push(
          (await hub.call('POST', '/auth/login', { body: { username, password: 'guess' } })).status,
        );
      const change = (current: string) =>
        hub.call('POST', '/auth/password', {
          token: erin.token,
          body: { current_password: current, password: 'a-new-password-1' },
        });
      statuses.push((await change('guess')).status); // 4
      statuses.push((await change('guess-again')).status); // 5
      statuses.push((await change(erin.password)).status);
      statuses.push(
        (
          await hub.call('POST', '/auth/login', {
            body: { username: 'ERIN@example.com', password: erin.password },
          })
        ).status,
      );
      assert.deepEqual(statuses, [401, 401, 401, 401, 401, 429, 429]);
      const other = await signup(hub, 'frank');
      assert.ok(other.token, 'another account has its own budget');
    } finally {
      await hub.stop();
    }
  });

  it("counts `victim==>anyone` against the victim's own limit", async () => {
    const hub = await startHub({ HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE: '2' });
    try {
      const statuses: number[] = [];
      for (const username of ['victim', 'victim==>a', 'VICTIM==>b']) {
        statuses.push(
          (await hub.call('POST', '/auth/login', { body: { username, password: 'guess' } })).status,
        );
      }
      assert.deepEqual(statuses, [401, 401, 429]);
    } finally {
      await hub.stop();
    }
  });
});
