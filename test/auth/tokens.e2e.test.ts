// Tokens over HTTP: forged and stale tokens refused, refresh and its rotation, delegation by
// access codes, implicit authorize for apps, and scopes.
import assert from 'node:assert/strict';
import { createHmac, generateKeyPairSync } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { SignJWT } from 'jose';
import { fromPem } from '../../api/auth/keys.ts';
import { serviceAccount, signup, startHub, type TestHub, type User } from '../hub.ts';

const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');

describe('/auth tokens (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let root: User;
  let alice: User;
  let bob: User;
  let svc: User;
  let other: User;

  before(async () => {
    hub = await startHub({ HUB_ACCESS_CODE_TTL_S: '1' });
    root = await signup(hub, 'root');
    alice = await signup(hub, 'alice');
    bob = await signup(hub, 'bob');
    svc = await serviceAccount(hub, root.token, 'reporting');
    other = await serviceAccount(hub, root.token, 'billing');
  });
  after(() => hub.stop());

  const status = (token: string) => hub.call('GET', '/auth/auth_status', { token });
  const claimsOf = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString());

  describe('refused tokens', () => {
    let keys: Awaited<ReturnType<typeof fromPem>>;
    before(async () => {
      keys = await fromPem(readFileSync(join(hub.dataDir, 'keys', 'jwt-es256.pem'), 'utf8'));
    });
    const sign = (claims: Record<string, unknown>, key = keys.privateKey) =>
      new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: keys.kid }).sign(key);
    const base = () => ({ ...claimsOf(alice.token) });

    it('accepts the genuine token', async () => {
      assert.equal((await status(alice.token)).status, 200);
    });

    it('refuses no token, and a malformed header', async () => {
      assert.equal((await hub.call('GET', '/auth/auth_status')).status, 401);
      const r = await hub.call('GET', '/auth/auth_status', { headers: { authorization: 'Basic abc' } });
      assert.equal(r.status, 401);
      assert.equal(r.headers.get('www-authenticate'), 'Bearer');
    });

    it('refuses an expired token', async () => {
      const now = Math.floor(Date.now() / 1000);
      const r = await status(await sign({ ...base(), iat: now - 7200, exp: now - 3600 }));
      assert.equal(r.status, 401);
      assert.match(r.body.message, /expired/);
    });

    it('refuses a tampered payload (signature no longer matches)', async () => {
      const [h, , s] = alice.token.split('.');
      const r = await status(`${h}.${b64({ ...base(), sub: root.prn, nick: 'root' })}.${s}`);
      assert.equal(r.status, 401);
      assert.match(r.body.message, /signature/);
    });

    it('refuses alg none', async () => {
      const r = await status(`${b64({ alg: 'none', typ: 'JWT' })}.${b64(base())}.`);
      assert.equal(r.status, 401);
    });

    it('refuses HS256 signed with the public key', async () => {
      const head = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(base())}`;
      const mac = createHmac('sha256', keys.publicPem).update(head).digest('base64url');
      const r = await status(`${head}.${mac}`);
      assert.equal(r.status, 401);
      assert.match(r.body.message, /algorithm/);
    });

    it('refuses a token signed by another key, for another audience, or from another issuer', async () => {
      const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
      assert.equal((await status(await sign(base(), privateKey))).status, 401);
      const wrongAud = await status(await sign({ ...base(), aud: 'https://elsewhere.example' }));
      assert.equal(wrongAud.status, 401);
      assert.match(wrongAud.body.message, /audience/);
      assert.equal((await status(await sign({ ...base(), iss: 'someone-else' }))).status, 401);
    });
  });

  describe('refresh', () => {
    it('GET /auth/login refreshes a valid token within the refresh window', async () => {
      const r = await hub.call('GET', '/auth/login', { token: alice.token });
      assert.equal(r.status, 200);
      const fresh = claimsOf(r.body.token);
      assert.equal(fresh.sub, alice.prn);
      assert.equal(fresh.orig_iat, claimsOf(alice.token).orig_iat);
      assert.notEqual(fresh.jti, claimsOf(alice.token).jti);
    });

    it('GET /auth/login refuses once the window of the original login has passed', async () => {
      const keys = await fromPem(readFileSync(join(hub.dataDir, 'keys', 'jwt-es256.pem'), 'utf8'));
      const now = Math.floor(Date.now() / 1000);
      const old = await new SignJWT({
        ...claimsOf(alice.token),
        iat: now,
        exp: now + 600,
        orig_iat: now - 8 * 86400,
      })
        .setProtectedHeader({ alg: 'ES256' })
        .sign(keys.privateKey);
      const r = await hub.call('GET', '/auth/login', { token: old });
      assert.equal(r.status, 401);
      assert.match(r.body.message, /refresh window/);
    });

    it('a refresh token rotates on use; presenting a spent one revokes the whole login', async () => {
      const login = await hub.call('POST', '/auth/login', {
        body: { username: 'bob', password: bob.password },
      });
      const first = login.body.refresh_token;
      const r1 = await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: first } });
      assert.equal(r1.status, 200);
      assert.equal(claimsOf(r1.body.token).sub, bob.prn);
      const second = r1.body.refresh_token;
      assert.notEqual(second, first);
      const reused = await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: first } });
      assert.equal(reused.status, 401);
      assert.match(reused.body.message, /used before/);
      const afterRevoke = await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: second } });
      assert.equal(afterRevoke.status, 401);
      assert.match(afterRevoke.body.message, /revoked/);
      // Nor do the login's access tokens keep it alive through GET /auth/login (they hold until they expire).
      for (const token of [login.body.token, r1.body.token]) {
        const refreshed = await hub.call('GET', '/auth/login', { token });
        assert.equal(refreshed.status, 401);
        assert.match(refreshed.body.message, /revoked/);
        assert.equal((await hub.call('GET', '/auth/auth_status', { token })).status, 200);
      }
      const other = await hub.call('POST', '/auth/login', {
        body: { username: 'bob', password: bob.password },
      });
      assert.equal(
        (await hub.call('GET', '/auth/login', { token: other.body.token })).status,
        200,
        'another login holds',
      );
      assert.equal(
        (await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: 'nonsense' } })).status,
        401,
      );
    });
  });

  describe('delegation', () => {
    it('a user grants a service scopes; the service swaps the code for a delegated token', async () => {
      const code = await hub.call('POST', '/auth/code', {
        token: alice.token,
        body: { service: svc.prn, scopes: 'profiles.readonly devices.readonly' },
      });
      assert.equal(code.status, 200);
      const swapped = await hub.call('POST', '/auth/token', {
        token: svc.token,
        body: { 'access-code': code.body.code },
      });
      assert.equal(swapped.status, 200);
      const claims = (await status(swapped.body.token)).body;
      assert.equal(claims.sub, alice.prn);
      assert.equal(claims.nick, 'alice');
      assert.equal(claims.aud, svc.prn);
      assert.deepEqual(claims.scopes, ['profiles.readonly', 'devices.readonly']);
      assert.ok(claims.exp - claims.iat >= 365 * 86400 - 10, 'long-lived');
      // Granted scopes work, others are refused naming the scope.
      assert.equal((await hub.call('GET', '/profiles/', { token: swapped.body.token })).status, 200);
      const put = await hub.call('PUT', '/profiles/', { token: swapped.body.token, body: { bio: 'x' } });
      assert.equal(put.status, 403);
      assert.match(put.body.message, /profiles\.write/);
      // A delegated token cannot grant codes onwards.
      assert.equal(
        (
          await hub.call('POST', '/auth/code', {
            token: swapped.body.token,
            body: { service: svc.prn, scopes: '*' },
          })
        ).status,
        403,
      );
    });

    it("a password change ends the user's grants, delegated and app tokens (within a second), as it ends logins", async () => {
      const grace = await signup(hub, 'grace');
      const grant = (token: string) =>
        hub.call('POST', '/auth/code', { token, body: { service: svc.prn, scopes: 'profiles.readonly' } });
      const swap = (code: string) =>
        hub.call('POST', '/auth/token', { token: svc.token, body: { 'access-code': code } });
      /** A token delegated by grace to the service (a code granted, then swapped). */
      const delegate = async (token = grace.token) =>
        (await swap((await grant(token)).body.code)).body.token as string;
      const delegated = await delegate();
      const made = await hub.call('POST', '/apps', {
        token: grace.token,
        body: {
          nick: 'grace-app',
          name: 'G',
          redirect_uris: ['https://g.example/cb'],
          scopes: [{ id: 'profiles.readonly' }],
        },
      });
      const appToken = (
        await hub.call('POST', '/auth/authorize', {
          token: grace.token,
          body: { client_id: made.body.id, redirect_uri: 'https://g.example/cb' },
        })
      ).body.token;
      for (const token of [delegated, appToken])
        assert.equal((await hub.call('GET', '/profiles/', { token })).status, 200);
      await new Promise((r) => setTimeout(r, 1100)); // a later second: orig_iat is in seconds
      const unswapped = (await grant(grace.token)).body.code; // granted before the change (a code lives 1 s here)
      const changed = await hub.call('POST', '/auth/password', {
        token: grace.token,
        body: { current_password: grace.password, password: 'grace-new-password' },
      });
      assert.equal(changed.status, 200);
      // Nor does a code granted before the change swap after it.
      const swapped = await swap(unswapped);
      assert.equal(swapped.status, 401);
      assert.match(swapped.body.message, /password changed since this code/);
      for (const token of [delegated, appToken]) {
        let r = await hub.call('GET', '/profiles/', { token });
        for (const end = Date.now() + 3000; r.status === 200 && Date.now() < end; )
          r = await hub.call('GET', '/profiles/', { token });
        assert.equal(r.status, 401);
        assert.match(r.body.message, /password changed/);
      }
      // The first-party token of the login holds until it expires (as documented), but grants no
      // more: a token stolen before the change would mint grants that outlived it.
      assert.equal((await hub.call('GET', '/profiles/', { token: grace.token })).status, 200);
      const late = await grant(grace.token);
      assert.equal(late.status, 401);
      assert.match(late.body.message, /password changed/);
      const lateApp = await hub.call('POST', '/auth/authorize', {
        token: grace.token,
        body: { client_id: made.body.id, redirect_uri: 'https://g.example/cb' },
      });
      assert.equal(lateApp.status, 401);
      // A new login grants again.
      const login = await hub.call('POST', '/auth/login', {
        body: { username: 'grace', password: 'grace-new-password' },
      });
      assert.equal(
        (await hub.call('GET', '/profiles/', { token: await delegate(login.body.token) })).status,
        200,
      );
    });

    it('a reused code is 401, a code for another service 403, a user cannot swap codes', async () => {
      const code = (
        await hub.call('POST', '/auth/code', { token: alice.token, body: { service: svc.prn, scopes: '*' } })
      ).body.code;
      assert.equal(
        (await hub.call('POST', '/auth/token', { token: other.token, body: { 'access-code': code } })).status,
        403,
      );
      assert.equal(
        (await hub.call('POST', '/auth/token', { token: bob.token, body: { 'access-code': code } })).status,
        403,
      );
      assert.equal(
        (await hub.call('POST', '/auth/token', { token: svc.token, body: { 'access-code': code } })).status,
        200,
      );
      const reused = await hub.call('POST', '/auth/token', {
        token: svc.token,
        body: { 'access-code': code },
      });
      assert.equal(reused.status, 401);
      assert.match(reused.body.message, /used already/);
      assert.equal(
        (await hub.call('POST', '/auth/token', { token: svc.token, body: { 'access-code': 'made-up' } }))
          .status,
        401,
      );
    });

    it('an expired code is 401', async () => {
      const code = (
        await hub.call('POST', '/auth/code', { token: alice.token, body: { service: svc.prn, scopes: '*' } })
      ).body.code;
      await new Promise((r) => setTimeout(r, 1100));
      const r = await hub.call('POST', '/auth/token', { token: svc.token, body: { 'access-code': code } });
      assert.equal(r.status, 401);
      assert.match(r.body.message, /expired/);
    });

    it('codes name a registered service and real scopes', async () => {
      const bad = await hub.call('POST', '/auth/code', {
        token: alice.token,
        body: { service: 'prn::auth:/nobody', scopes: '*' },
      });
      assert.equal(bad.status, 422);
      const scope = await hub.call('POST', '/auth/code', {
        token: alice.token,
        body: { service: svc.prn, scopes: 'BAD SCOPE!' },
      });
      assert.equal(scope.status, 422);
      const none = await hub.call('POST', '/auth/code', {
        token: alice.token,
        body: { service: svc.prn, scopes: ' , ' },
      });
      assert.equal(none.status, 422);
      assert.deepEqual(none.body.details, [{ field: 'scopes', problem: 'names no scope' }]);
      const notService = await hub.call('POST', '/auth/code', {
        token: alice.token,
        body: { service: 'not a prn', scopes: '*' },
      });
      assert.equal(notService.status, 422);
    });
  });

  describe('implicit authorize', () => {
    let app: { id: string; prn: string; nick: string };
    before(async () => {
      const r = await hub.call('POST', '/apps', {
        token: bob.token,
        body: {
          nick: 'dashboard',
          name: 'Dashboard',
          redirect_uris: ['https://dash.example/cb'],
          scopes: [{ id: 'profiles.readonly', description: 'Read your profile' }],
        },
      });
      assert.equal(r.status, 200);
      app = r.body;
    });

    it('issues an hour-long token for the app when the redirect URI matches exactly', async () => {
      const r = await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: app.prn, redirect_uri: 'https://dash.example/cb', state: 'xyz' },
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.expires_in, 3600);
      assert.match(
        r.body.redirect_to,
        /^https:\/\/dash\.example\/cb#access_token=.+&token_type=Bearer&expires_in=3600&state=xyz$/,
      );
      const claims = (await status(r.body.token)).body;
      assert.equal(claims.sub, alice.prn);
      assert.equal(claims.aud, app.prn);
      assert.deepEqual(claims.scopes, ['profiles.readonly']);
      assert.equal(claims.exp - claims.iat, 3600);
      assert.equal((await hub.call('GET', '/profiles/', { token: r.body.token })).status, 200);
      assert.equal((await hub.call('GET', '/apps', { token: r.body.token })).status, 403);
    });

    it('an app token is not refreshed (the spec gives it about an hour); an impersonation token cannot authorize apps', async () => {
      const r = await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: app.id, redirect_uri: 'https://dash.example/cb' },
      });
      const refreshed = await hub.call('GET', '/auth/login', { token: r.body.token });
      assert.equal(refreshed.status, 403);
      assert.match(refreshed.body.message, /authorize again/);
      const acting = await hub.call('POST', '/auth/login', {
        body: { username: 'root==>alice', password: root.password },
      });
      const laundered = await hub.call('POST', '/auth/authorize', {
        token: acting.body.token,
        body: { client_id: app.id, redirect_uri: 'https://dash.example/cb' },
      });
      assert.equal(laundered.status, 403);
    });

    it('deleting an app ends its tokens at once; a redirect URI with a fragment is refused', async () => {
      const made = await hub.call('POST', '/apps', {
        token: bob.token,
        body: { nick: 'short-lived', name: 'Short', redirect_uris: ['https://short.example/cb'] },
      });
      const r = await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: made.body.id, redirect_uri: 'https://short.example/cb' },
      });
      assert.equal((await status(r.body.token)).status, 200); // verified, and its verdict cached
      assert.deepEqual((await status(r.body.token)).body.scopes, [], 'it declares none, so it gets none');
      for (const scope of ['*', 'profiles.readonly', 'apps'])
        assert.equal(
          (
            await hub.call('POST', '/auth/authorize', {
              token: alice.token,
              body: { client_id: made.body.id, redirect_uri: 'https://short.example/cb', scope },
            })
          ).status,
          422,
          `${scope}: not declared by the app`,
        );
      assert.equal((await hub.call('DELETE', `/apps/${made.body.id}`, { token: bob.token })).status, 200);
      const after = await status(r.body.token);
      assert.equal(after.status, 401);
      assert.match(after.body.message, /app this token was issued to was deleted/);
      const fragment = await hub.call('POST', '/apps', {
        token: bob.token,
        body: { nick: 'fragmented', name: 'F', redirect_uris: ['https://f.example/cb#x'] },
      });
      assert.equal(fragment.status, 422);
      assert.equal(fragment.body.details[0].field, 'redirect_uris.0');
    });

    it('refuses a redirect URI that is not registered exactly, an unknown app and undeclared scopes', async () => {
      const wrong = await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: app.id, redirect_uri: 'https://dash.example/cb/' },
      });
      assert.equal(wrong.status, 422);
      assert.equal(wrong.body.details[0].field, 'redirect_uri');
      assert.equal(
        (
          await hub.call('POST', '/auth/authorize', {
            token: alice.token,
            body: { client_id: 'nope', redirect_uri: 'https://dash.example/cb' },
          })
        ).status,
        422,
      );
      const scope = await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: app.id, redirect_uri: 'https://dash.example/cb', scope: 'webhooks' },
      });
      assert.equal(scope.status, 422);
      assert.equal(
        (
          await hub.call('POST', '/auth/authorize', {
            body: { client_id: app.id, redirect_uri: 'https://dash.example/cb' },
          })
        ).status,
        401,
      );
    });
  });

  it('device tokens are not refreshed: devices log in again with their secret; a device has no account', async () => {
    const d = await hub.call('POST', '/devices', { token: alice.token, body: {} });
    const login = await hub.call('POST', '/auth/login', {
      body: { username: d.body.prn, password: d.body.secret },
    });
    assert.equal((await hub.call('GET', '/auth/login', { token: login.body.token })).status, 403);
    assert.equal((await hub.call('GET', '/auth/accounts', { token: login.body.token })).status, 403);
  });

  it('every answer with a token is of the schema /openapi.json publishes for its operation, no field more', async () => {
    const doc = (await hub.call('GET', '/openapi.json')).body;
    const ajv = new Ajv2020({ strict: false });
    const conforms = (method: string, path: string, r: { status: number; body: Record<string, unknown> }) => {
      const schema = doc.paths[path][method].responses[String(r.status)].content['application/json'].schema;
      assert.ok(ajv.validate(schema, r.body), `${method} ${path}: ${ajv.errorsText()}`);
      for (const field of Object.keys(r.body))
        assert.ok(field in schema.properties, `${method} ${path} answers ${field}, which is not published`);
    };
    const login = await hub.call('POST', '/auth/login', {
      body: { username: 'bob', password: bob.password },
    });
    conforms('post', '/auth/login', login);
    const d = await hub.call('POST', '/devices', { token: alice.token, body: {} });
    conforms(
      'post',
      '/auth/login',
      await hub.call('POST', '/auth/login', { body: { username: d.body.prn, password: d.body.secret } }),
    );
    conforms('get', '/auth/login', await hub.call('GET', '/auth/login', { token: login.body.token }));
    conforms(
      'post',
      '/auth/token/refresh',
      await hub.call('POST', '/auth/token/refresh', { body: { refresh_token: login.body.refresh_token } }),
    );
    const code = await hub.call('POST', '/auth/code', {
      token: alice.token,
      body: { service: svc.prn, scopes: 'profiles.readonly' },
    });
    conforms('post', '/auth/code', code);
    conforms(
      'post',
      '/auth/token',
      await hub.call('POST', '/auth/token', { token: svc.token, body: { 'access-code': code.body.code } }),
    );
    const app = await hub.call('POST', '/apps', {
      token: bob.token,
      body: { nick: 'schema-check', name: 'S', redirect_uris: ['https://s.example/cb'] },
    });
    conforms(
      'post',
      '/auth/authorize',
      await hub.call('POST', '/auth/authorize', {
        token: alice.token,
        body: { client_id: app.body.id, redirect_uri: 'https://s.example/cb', state: 'st' },
      }),
    );
    conforms(
      'post',
      '/auth/recover',
      await hub.call('POST', '/auth/recover', { body: { email: 'bob@example.com' } }),
    );
    const henry = await signup(hub, 'henry'); // a password of his own to change
    conforms(
      'post',
      '/auth/password',
      await hub.call('POST', '/auth/password', {
        token: henry.token,
        body: { current_password: henry.password, password: 'henrys-new-password' },
      }),
    );
  });

  it('publishes the verification key as a JWK set', async () => {
    const r = await hub.call('GET', '/auth/.well-known/jwks.json');
    assert.equal(r.status, 200);
    assert.equal(r.body.keys[0].kty, 'EC');
    assert.equal(r.body.keys[0].crv, 'P-256');
    assert.equal(r.body.keys[0].alg, 'ES256');
    assert.equal(r.body.keys[0].d, undefined, 'no private part');
  });
});
