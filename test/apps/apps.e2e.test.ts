// /apps and /profiles over HTTP: the owner's operations, and everyone else refused.
import assert from 'node:assert/strict';
import { signup, startHub, type TestHub, type User } from '../hub.ts';

describe('/apps and /profiles (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let alice: User;
  let mallory: User;

  before(async () => {
    hub = await startHub();
    alice = await signup(hub, 'alice');
    mallory = await signup(hub, 'mallory');
  });
  after(() => hub.stop());

  describe('apps', () => {
    let app: Record<string, unknown>;
    let secret = '';

    it('registers a confidential app and shows its secret once', async () => {
      const r = await hub.call('POST', '/apps', {
        token: alice.token,
        body: {
          nick: 'fleet-ui',
          name: 'Fleet UI',
          type: 'confidential',
          logo: 'https://fleet.example/logo.png',
          redirect_uris: ['https://fleet.example/cb'],
          scopes: [{ id: 'devices.readonly', description: 'See devices', required: true }],
          exposed_scopes: [{ id: 'fleet.read', description: 'Read fleets', service: 'fleet' }],
        },
      });
      assert.equal(r.status, 200);
      app = r.body;
      secret = r.body.secret;
      assert.match(secret, /^[\w-]{40,}$/);
      assert.match(String(app.prn), /^prn:::apps:\/[a-f0-9]{24}$/);
      assert.equal(app.owner, alice.prn);
      assert.equal(app['owner-nick'], 'alice');
      assert.equal(app.exposedScopesLength, 1);
      assert.deepEqual(app.scopes, [
        { id: 'devices.readonly', description: 'See devices', required: true, service: '' },
      ]);
      const read = await hub.call('GET', `/apps/${app.id}`, { token: alice.token });
      assert.equal(read.status, 200);
      assert.equal(read.body.secret, undefined);
      assert.doesNotMatch(JSON.stringify(read.body), new RegExp(secret));
    });

    it('reads by id, nick and PRN; lists newest first, paginated', async () => {
      for (const ref of [app.id, 'fleet-ui', 'FLEET-UI', app.prn]) {
        const r = await hub.call('GET', `/apps/${encodeURIComponent(String(ref))}`, { token: alice.token });
        assert.equal(r.status, 200, String(ref));
        assert.equal(r.body.id, app.id);
      }
      await hub.call('POST', '/apps', { token: alice.token, body: { nick: 'second', name: 'Second' } });
      const list = await hub.call('GET', '/apps?limit=1', { token: alice.token });
      assert.equal(list.status, 200);
      assert.equal(list.body.total, 2);
      assert.equal(list.body.items.length, 1);
      assert.equal(list.body.items[0].nick, 'second');
      assert.equal(list.body.items[0].secret, undefined);
    });

    it('PUT replaces the fields (by nick), keeps the type, refuses a taken nick', async () => {
      const r = await hub.call('PUT', '/apps/fleet-ui', {
        token: alice.token,
        body: { nick: 'fleet-web', name: 'Fleet Web', redirect_uris: ['https://fleet.example/callback'] },
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.nick, 'fleet-web');
      assert.deepEqual(r.body.scopes, []);
      assert.equal(r.body.type, 'confidential');
      assert.equal((await hub.call('GET', '/apps/fleet-ui', { token: alice.token })).status, 404);
      assert.equal((await hub.call('GET', '/apps/fleet-web', { token: alice.token })).status, 200);
      const taken = await hub.call('PUT', '/apps/fleet-web', {
        token: alice.token,
        body: { nick: 'second', name: 'x' },
      });
      assert.equal(taken.status, 409);
      const type = await hub.call('PUT', '/apps/fleet-web', {
        token: alice.token,
        body: { nick: 'fleet-web', name: 'x', type: 'public' },
      });
      assert.equal(type.status, 422);
      const list = await hub.call('GET', '/apps', { token: alice.token });
      assert.ok(list.body.items.some((a: { nick: string }) => a.nick === 'fleet-web'));
    });

    it('another account sees, changes and deletes nothing of it (404)', async () => {
      for (const ref of [app.id, app.prn, 'fleet-web']) {
        assert.equal(
          (await hub.call('GET', `/apps/${encodeURIComponent(String(ref))}`, { token: mallory.token }))
            .status,
          404,
        );
        assert.equal(
          (
            await hub.call('PUT', `/apps/${encodeURIComponent(String(ref))}`, {
              token: mallory.token,
              body: { nick: 'x-x-x', name: 'x' },
            })
          ).status,
          404,
        );
        assert.equal(
          (await hub.call('DELETE', `/apps/${encodeURIComponent(String(ref))}`, { token: mallory.token }))
            .status,
          404,
        );
      }
      assert.equal((await hub.call('GET', '/apps', { token: mallory.token })).body.total, 0);
      assert.equal((await hub.call('GET', `/apps/${app.id}`)).status, 401);
    });

    it('refuses invalid apps with 422 naming the field', async () => {
      const cases: [unknown, string][] = [
        [{ name: 'x' }, 'nick'],
        [{ nick: 'ok-nick', name: 'x', scopes: [{ id: 'Bad Scope' }] }, 'scopes.0.id'],
        [{ nick: 'ok-nick', name: 'x', type: 'secret' }, 'type'],
        [{ nick: 'ok-nick', name: 'x', secret: 'mine' }, 'secret'],
        [{ nick: 'ok-nick', name: 'x', redirect_uris: ['javascript:alert(1)'] }, 'redirect_uris.0'],
        // /apps/{id} would read it as an id: the app could not be reached by its nick.
        [{ nick: 'deadbeefdeadbeefdeadbeef', name: 'x' }, 'nick'],
      ];
      for (const [body, field] of cases) {
        const r = await hub.call('POST', '/apps', { token: alice.token, body });
        assert.equal(r.status, 422, JSON.stringify(body));
        assert.equal(r.body.details[0].field, field);
      }
      const listed = await hub.call('GET', '/apps', { token: alice.token });
      assert.ok(!listed.body.items.some((a: { nick: string }) => a.nick === 'deadbeefdeadbeefdeadbeef'));
      const some = listed.body.items[0];
      const renamed = await hub.call('PUT', `/apps/${some.id}`, {
        token: alice.token,
        body: { nick: 'DEADBEEFDEADBEEFDEADBEEF', name: 'x' },
      });
      assert.equal(renamed.status, 422);
      assert.equal((await hub.call('GET', `/apps/${some.id}`, { token: alice.token })).body.nick, some.nick);
    });

    it('DELETE answers the record with deleted-at; then the app is gone and its nick free', async () => {
      const r = await hub.call('DELETE', '/apps/fleet-web', { token: alice.token });
      assert.equal(r.status, 200);
      assert.ok(r.body['deleted-at']);
      assert.equal((await hub.call('GET', `/apps/${app.id}`, { token: alice.token })).status, 404);
      assert.equal((await hub.call('GET', '/apps', { token: alice.token })).body.total, 1);
      assert.equal(
        (await hub.call('POST', '/apps', { token: alice.token, body: { nick: 'fleet-web', name: 'Again' } }))
          .status,
        200,
      );
    });
  });

  it('a path is taken with or without its final slash: /profiles/ and /webhooks/ of the spec, /devices', async () => {
    for (const path of ['/profiles/', '/profiles', '/webhooks/', '/webhooks', '/devices', '/devices/']) {
      const r = await hub.call('GET', path, { token: alice.token });
      assert.equal(r.status, 200, `${path}: ${JSON.stringify(r.body)}`);
    }
    assert.equal(
      (await hub.call('PUT', '/profiles', { token: alice.token, body: { nick: 'queen' } })).status,
      422,
    );
  });

  describe('profiles', () => {
    it('GET shows the profile; PUT replaces it', async () => {
      const empty = await hub.call('GET', '/profiles/', { token: alice.token });
      assert.equal(empty.status, 200);
      assert.equal(empty.body.nick, 'alice');
      // Request and response share one shape (the spec): every field, unset ones empty.
      assert.equal(empty.body.bio, '');
      assert.equal(empty.body.fullName, '');
      assert.deepEqual(empty.body.ovmode, {});
      const put = await hub.call('PUT', '/profiles/', {
        token: alice.token,
        body: {
          fullName: 'Alice Liddell',
          company: 'Wonderland',
          meta: { team: 'a' },
          ovmode: { mode: 'strict' },
          nick: 'alice',
        },
      });
      assert.equal(put.status, 200);
      assert.equal(put.body.fullName, 'Alice Liddell');
      const read = await hub.call('GET', '/profiles/', { token: alice.token });
      assert.equal(read.body.company, 'Wonderland');
      assert.equal(put.body['time-modified'], read.body['time-modified'], 'the PUT answers what is stored');
      assert.deepEqual(read.body.meta, { team: 'a' });
      assert.deepEqual(read.body.ovmode, { mode: 'strict' });
      const replaced = await hub.call('PUT', '/profiles/', { token: alice.token, body: { bio: 'hi' } });
      assert.equal(replaced.body.company, '');
      assert.deepEqual(replaced.body.ovmode, {});
      assert.equal((await hub.call('GET', '/profiles/', { token: mallory.token })).body.bio, '');
    });

    it('refuses a nick change, unknown fields and non-string meta (422), and no token (401)', async () => {
      assert.equal(
        (await hub.call('PUT', '/profiles/', { token: alice.token, body: { nick: 'queen' } })).status,
        422,
      );
      assert.equal(
        (await hub.call('PUT', '/profiles/', { token: alice.token, body: { age: 7 } })).status,
        422,
      );
      const meta = await hub.call('PUT', '/profiles/', { token: alice.token, body: { meta: { n: 1 } } });
      assert.equal(meta.status, 422);
      assert.equal(meta.body.details[0].field, 'meta.n');
      const blankKey = await hub.call('PUT', '/profiles/', {
        token: alice.token,
        body: { meta: { '': 'x' } },
      });
      assert.equal(blankKey.status, 422, 'a meta key is not empty, as in the device maps');
      assert.equal((await hub.call('GET', '/profiles/')).status, 401);
    });

    it('the same profile again appends nothing; a reset link asked for moves no time-modified', async () => {
      const body = { bio: 'same', company: '', meta: { k: '' }, ovmode: {} };
      const first = await hub.call('PUT', '/profiles/', { token: alice.token, body });
      assert.ok(first.headers.get('x-hub-position'), 'a change is stored');
      const again = await hub.call('PUT', '/profiles/', {
        token: alice.token,
        body: { ...body, company: undefined },
      });
      assert.equal(again.status, 200);
      assert.equal(again.headers.get('x-hub-position'), null, 'nothing stored');
      assert.deepEqual(again.body, first.body);
      // Anyone may ask for alice's reset link: that changes nothing her records show.
      assert.equal(
        (await hub.call('POST', '/auth/recover', { body: { email: 'alice@example.com' } })).status,
        200,
      );
      const read = await hub.call('GET', '/profiles/', { token: alice.token });
      assert.equal(read.body['time-modified'], first.body['time-modified']);
      const meta = await hub.call('PUT', '/profiles/', { token: alice.token, body: { ...body, meta: {} } });
      assert.ok(meta.headers.get('x-hub-position'), 'an empty value is not an absent key');
      assert.deepEqual(meta.body.meta, {});
    });
  });

  it('/openapi.json documents every /auth, /apps and /profiles operation with its schemas', async () => {
    const doc = (await hub.call('GET', '/openapi.json')).body;
    const expected: [string, string][] = [
      ['/auth/accounts', 'post'],
      ['/auth/accounts', 'get'],
      ['/auth/login', 'post'],
      ['/auth/login', 'get'],
      ['/auth/auth_status', 'get'],
      ['/auth/token/refresh', 'post'],
      ['/auth/code', 'post'],
      ['/auth/token', 'post'],
      ['/auth/authorize', 'post'],
      ['/auth/recover', 'post'],
      ['/auth/password', 'post'],
      ['/auth/.well-known/jwks.json', 'get'],
      ['/apps', 'post'],
      ['/apps', 'get'],
      ['/apps/{id}', 'get'],
      ['/apps/{id}', 'put'],
      ['/apps/{id}', 'delete'],
      ['/profiles/', 'get'],
      ['/profiles/', 'put'],
    ];
    const withBody = new Set([
      'post /auth/accounts',
      'post /auth/login',
      'post /auth/token/refresh',
      'post /auth/code',
      'post /auth/token',
      'post /auth/authorize',
      'post /auth/recover',
      'post /auth/password',
      'post /apps',
      'put /apps/{id}',
      'put /profiles/',
    ]);
    for (const [path, method] of expected) {
      const op = doc.paths[path]?.[method];
      assert.ok(op, `${method} ${path}`);
      assert.ok(op.responses['200'] ?? op.responses['202'], `${method} ${path} response`);
      assert.ok(op.responses.default, `${method} ${path} error response`);
      if (withBody.has(`${method} ${path}`))
        assert.ok(op.requestBody?.content['application/json'].schema.type, `${method} ${path} body`);
    }
    assert.ok(
      doc.paths['/auth/login'].post.requestBody.content['application/json'].schema.required.includes(
        'username',
      ),
    );
    // Alternatives: any one of the scopes that grant writing /apps.
    assert.deepEqual(doc.paths['/apps'].post.security, [
      { bearer: ['*'] },
      { bearer: ['api'] },
      { bearer: ['apps'] },
      { bearer: ['apps.write'] },
    ]);
  });

  it('/openapi.json lists the errors each operation can answer, the headers, optional tokens, and identifier operationIds', async () => {
    const doc = (await hub.call('GET', '/openapi.json')).body;
    const ids = new Set<string>();
    type Op = {
      operationId: string;
      responses: Record<string, unknown>;
      requestBody?: unknown;
      parameters: { $ref?: string }[];
    };
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, Op>>))
      for (const [method, op] of Object.entries(ops)) {
        assert.match(op.operationId, /^[a-z][A-Za-z0-9]*$/, `${method} ${path}`);
        assert.ok(!ids.has(op.operationId), `${op.operationId} is unique`);
        ids.add(op.operationId);
        for (const status of ['400', '429', '503'])
          assert.ok(op.responses[status], `${method} ${path} ${status}`);
        if (path.includes('{')) assert.ok(op.responses['404'], `${method} ${path} 404`);
        if (op.requestBody)
          assert.ok(op.responses['413'] && op.responses['422'], `${method} ${path} body errors`);
        assert.ok(
          op.parameters.some((p: { $ref?: string }) => p.$ref === '#/components/parameters/RequestId'),
        );
      }
    assert.equal(doc.paths['/profiles/'].get.operationId, 'getProfiles');
    // Errors that anonymous operations answer are listed too, of the one shape.
    const login = doc.paths['/auth/login'].post.responses;
    assert.match(login['401'].description, /invalid_credentials/);
    assert.ok(login['401'].headers['WWW-Authenticate']);
    assert.equal(login['403'].content['application/json'].schema.$ref, '#/components/schemas/Error');
    assert.ok(doc.paths['/auth/token/refresh'].post.responses['401']);
    // A read from read models may name a position to wait for, exactly where it is published (a
    // malformed one is 400 there, and not looked at elsewhere); a command answers its own.
    const waits: string[] = [];
    const root = await signup(hub, 'root'); // the admin listing is the read-model read of /auth/accounts
    for (const [path, ops] of Object.entries(doc.paths as Record<string, Record<string, Op>>)) {
      if (!ops.get || path.includes('{')) continue;
      // A live stream (Server-Sent Events) answers until the client goes: not a read to call here.
      if (
        Object.hasOwn((ops.get.responses['200'] as { content?: object })?.content ?? {}, 'text/event-stream')
      )
        continue;
      const published = ops.get.parameters.some((p) => p.$ref === '#/components/parameters/MinPosition');
      if (published) waits.push(path);
      const [url, token] =
        path === '/auth/accounts' ? [`${path}?asadmin=yes`, root.token] : [path, alice.token];
      const r = await hub.call('GET', url, { token, headers: { 'X-Hub-Min-Position': 'abc' } });
      assert.equal(r.status === 400, published, `${path}: ${r.status}`);
    }
    assert.deepEqual(waits.sort(), ['/apps', '/auth/accounts', '/devices', '/webhooks/']);
    assert.ok(doc.paths['/devices/{id}/user-meta'].put.responses['200'].headers['X-Hub-Position']);
    assert.equal(doc.components.parameters.MinPosition.name, 'X-Hub-Min-Position');
    assert.ok(doc.components.responses.TooManyRequests.headers['Retry-After']);
    // Anonymous or with a token: POST /devices registers an unowned device without one, the caller's with one.
    assert.deepEqual(doc.paths['/devices'].post.security[0], {});
    assert.ok(
      doc.paths['/devices'].post.security.some(
        (s: { bearer?: string[] }) => s.bearer?.[0] === 'devices.write',
      ),
    );
    assert.ok(doc.paths['/devices'].post.responses['401']);
    // Documented statuses are answered: a user-meta map over HUB_META_MAX_KEYS is 413.
    const dev = await hub.call('POST', '/devices', { token: alice.token, body: {} });
    const many = Object.fromEntries(Array.from({ length: 201 }, (_, i) => [`k${i}`, 'v']));
    const r = await hub.call('PUT', `/devices/${dev.body.id}/user-meta`, { token: alice.token, body: many });
    assert.equal(r.status, 413);
    assert.ok(doc.paths['/devices/{id}/user-meta'].put.responses['413']);
  });
});
