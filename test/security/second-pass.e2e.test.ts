// The second security pass (issue 41): each finding of the black-box review, replayed as it was
// found, and refused now. Other client addresses are other loopback addresses (127.0.0.2…), from
// which Linux connects to the hub's 127.0.0.1 as from another machine.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'mocha';
import { testConfig } from '../harness.ts';
import { delegated, signup, startHub, type TestHub, type User } from '../hub.ts';
import { buildWorld, saBasic, type World } from './world.ts';

const HUB = new URL('../../bin/hub.ts', import.meta.url).pathname;

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
}

/** One HTTP request as any client may send it (any method, any bytes, from any local address). */
function raw(
  url: string,
  o: { method?: string; headers?: Record<string, string>; body?: Buffer | string; from?: string } = {},
): Promise<Raw> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: `${target.pathname}${target.search}`,
        method: o.method ?? 'GET',
        headers: o.headers,
        localAddress: o.from,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode!,
            headers: res.headers,
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(o.body);
  });
}

const json = (body: unknown) => ({
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
});
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const login = (hub: TestHub, username: string, password: string, from?: string) =>
  raw(`${hub.url}/auth/login`, { method: 'POST', ...json({ username, password }), from });

describe('security, second pass', function () {
  this.timeout(120_000);
  let w: World;

  before(async () => {
    w = await buildWorld();
  });
  after(() => w?.stop());

  /** A fresh device of alice's, logged in. */
  async function aliceDevice(): Promise<{ id: string; prn: string; secret: string; token: string }> {
    const made = await w.hub.call('POST', '/devices', { token: w.alice.token, body: {} });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    const session = await w.hub.call('POST', '/auth/login', {
      body: { username: made.body.prn, password: made.body.secret },
    });
    assert.equal(session.status, 200);
    return { id: made.body.id, prn: made.body.prn, secret: made.body.secret, token: session.body.token };
  }

  describe('1. device secrets', () => {
    it('a read-only grant, a write grant and an app token never see a device secret; the owner and the device do', async () => {
      const d = await aliceDevice();
      const writer = await delegated(w.hub, w.alice, w.svc, 'devices');
      const app = await w.hub.call('POST', '/apps', {
        token: w.alice.token,
        body: {
          nick: 'secret-probe',
          name: 'Secret probe',
          redirect_uris: ['https://app.example/cb'],
          scopes: [{ id: 'devices', description: 'devices', required: true, service: 'devices' }],
        },
      });
      assert.equal(app.status, 200, JSON.stringify(app.body));
      const authorized = await w.hub.call('POST', '/auth/authorize', {
        token: w.alice.token,
        body: { client_id: app.body.prn, redirect_uri: 'https://app.example/cb', scope: 'devices' },
      });
      assert.equal(authorized.status, 200, JSON.stringify(authorized.body));
      for (const [who, token] of [
        ['read-only grant', w.readOnly],
        ['write grant', writer],
        ['app token', authorized.body.token],
      ] as const) {
        const seen = await w.hub.call('GET', `/devices/${d.id}`, { token });
        assert.equal(seen.status, 200, `${who}: ${JSON.stringify(seen.body)}`);
        assert.equal(seen.body.secret, undefined, `${who} sees the secret`);
        assert.ok(!JSON.stringify(seen.body).includes(d.secret), who);
      }
      // Mutations answer the record too: a write grant renaming the device, creating one.
      const renamed = await w.hub.call('PATCH', `/devices/${d.id}`, {
        token: writer,
        body: { nick: 'renamed-by-grant' },
      });
      assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
      assert.equal(renamed.body.secret, undefined);
      const created = await w.hub.call('POST', '/devices', { token: writer, body: {} });
      assert.equal(created.status, 200, JSON.stringify(created.body));
      assert.equal(created.body.secret, undefined);
      // The owner's own login and the device itself still do.
      assert.equal(
        (await w.hub.call('GET', `/devices/${d.id}`, { token: w.alice.token })).body.secret,
        d.secret,
      );
      assert.equal((await w.hub.call('GET', `/devices/${d.id}`, { token: d.token })).body.secret, d.secret);
    });

    it('the owner rotates a device secret: the old one and its logins end, the new one logs in', async () => {
      const d = await aliceDevice();
      const rotated = await w.hub.call('POST', `/devices/${d.id}/secret`, { token: w.alice.token, body: {} });
      assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
      assert.ok(rotated.body.secret && rotated.body.secret !== d.secret);
      const report = await w.hub.call('PATCH', `/devices/${d.id}/device-meta`, {
        token: d.token,
        body: { temp: '20' },
      });
      assert.equal(report.status, 401, JSON.stringify(report.body));
      assert.equal((await login(w.hub, d.prn, d.secret)).status, 401);
      const again = await login(w.hub, d.prn, rotated.body.secret);
      assert.equal(again.status, 200, again.body);
      const token = JSON.parse(again.body).token as string;
      const ok = await w.hub.call('PATCH', `/devices/${d.id}/device-meta`, { token, body: { temp: '21' } });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
    });

    it('the device rotates its own secret (to one it chose); grants may not rotate it', async () => {
      const d = await aliceDevice();
      const writer = await delegated(w.hub, w.alice, w.svc, 'devices');
      const refused = await w.hub.call('POST', `/devices/${d.id}/secret`, { token: writer, body: {} });
      assert.equal(refused.status, 403, JSON.stringify(refused.body));
      const chosen = 'a-secret-the-device-chose-1234';
      const own = await w.hub.call('POST', `/devices/${d.id}/secret`, {
        token: d.token,
        body: { secret: chosen },
      });
      assert.equal(own.status, 200, JSON.stringify(own.body));
      assert.equal(own.body.secret, chosen);
      assert.equal((await w.hub.call('GET', `/devices/${d.id}`, { token: d.token })).status, 401);
      assert.equal((await login(w.hub, d.prn, chosen)).status, 200);
      // Another user's device: not found, as ever.
      const bobs = await w.hub.call('POST', `/devices/${d.id}/secret`, { token: w.bob.token, body: {} });
      assert.equal(bobs.status, 404);
    });
  });

  describe('2. a password change ends the logins of its own second', () => {
    it('GET /auth/login and POST /auth/code refuse a login made just before the change', async () => {
      const carol = await signup(w.hub, 'carol');
      let password = carol.password;
      let sameSecond = 0;
      for (let i = 0; i < 5; i++) {
        const before = Date.now();
        const victim = await w.hub.call('POST', '/auth/login', { body: { username: 'carol', password } });
        assert.equal(victim.status, 200);
        const next = `${password}-${i}`;
        const changed = await w.hub.call('POST', '/auth/password', {
          token: carol.token,
          body: { current_password: password, password: next },
        });
        assert.equal(changed.status, 200, JSON.stringify(changed.body));
        if (Math.floor(before / 1000) === Math.floor(Date.now() / 1000)) sameSecond++;
        password = next;
        const refresh = await w.hub.call('GET', '/auth/login', { token: victim.body.token });
        assert.equal(refresh.status, 401, `refresh after the change: ${JSON.stringify(refresh.body)}`);
        const code = await w.hub.call('POST', '/auth/code', {
          token: victim.body.token,
          body: { service: w.svc.prn, scopes: 'devices.readonly' },
        });
        assert.equal(code.status, 401, `code after the change: ${JSON.stringify(code.body)}`);
        // The caller's own token is a login from before the change too: a new one for the next round.
        carol.token = (
          await w.hub.call('POST', '/auth/login', { body: { username: 'carol', password } })
        ).body.token;
      }
      assert.ok(sameSecond > 0, 'no round had the login and the change in one second');
    });
  });

  describe('3. login throttling that a stranger cannot turn into a lockout', () => {
    let hub: TestHub;
    let dave: User;
    before(async () => {
      hub = await startHub({
        HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE: '5',
        HUB_LOGIN_ACCOUNT_FAILURES_PER_HOUR: '12',
      });
      dave = await signup(hub, 'dave'); // logs in from 127.0.0.1: his usual address
    });
    after(() => hub?.stop());

    it('an address that guesses gets 429; past the account ceiling only known addresses get in', async () => {
      for (let i = 0; i < 5; i++)
        assert.equal((await login(hub, 'dave', `wrong-${i}`, '127.0.0.2')).status, 401);
      const limited = await login(hub, 'dave', dave.password, '127.0.0.2');
      assert.equal(limited.status, 429);
      assert.ok(Number(limited.headers['retry-after']) > 0);
      // The owner's usual address is untouched by it.
      assert.equal((await login(hub, 'dave', dave.password, '127.0.0.1')).status, 200);
      // More strangers push the account over its ceiling (12 failures an hour).
      for (const from of ['127.0.0.3', '127.0.0.4'])
        for (let i = 0; i < 5; i++) await login(hub, 'dave', `wrong-${from}-${i}`, from);
      const stranger = await login(hub, 'dave', dave.password, '127.0.0.5');
      assert.equal(stranger.status, 429, 'an address the account never logged in from');
      // The owner still logs in from where he always does.
      assert.equal((await login(hub, 'dave', dave.password, '127.0.0.1')).status, 200);
    });

    it('a device keeps logging in from its address while its PRN is guessed from others', async () => {
      const made = await hub.call('POST', '/devices', { token: dave.token, body: {} });
      const { prn, secret } = made.body as { prn: string; secret: string };
      assert.equal((await login(hub, prn, secret, '127.0.0.1')).status, 200);
      for (const from of ['127.0.0.6', '127.0.0.7', '127.0.0.8'])
        for (let i = 0; i < 6; i++) await login(hub, prn, `wrong-secret-${i}`, from);
      assert.equal((await login(hub, prn, secret, '127.0.0.9')).status, 429);
      assert.equal((await login(hub, prn, secret, '127.0.0.1')).status, 200);
    });
  });

  describe('4. operator credentials', () => {
    it('/callbacks: wrong Basic credentials get 429 after the budget, from that address only', async () => {
      const path = `${w.hub.url}/callbacks/devices/${w.d2.id}`;
      for (let i = 0; i < 10; i++) {
        const r = await raw(path, { method: 'PUT', headers: saBasic(`guess-${i}`), from: '127.0.0.20' });
        assert.equal(r.status, 401);
      }
      const over = await raw(path, { method: 'PUT', headers: saBasic(`guess-x`), from: '127.0.0.20' });
      assert.equal(over.status, 429);
      assert.ok(Number(over.headers['retry-after']) > 0);
      // The right secret from that address waits too; from another it is answered.
      assert.equal((await raw(path, { method: 'PUT', headers: saBasic(), from: '127.0.0.20' })).status, 429);
      assert.equal((await raw(path, { method: 'PUT', headers: saBasic(), from: '127.0.0.21' })).status, 200);
    });

    it('a HUB_SA_ADMIN_SECRET shorter than 32 characters: no start, one line naming it; doctor says why', () => {
      assert.throws(() => testConfig({ HUB_SA_ADMIN_SECRET: 'thirteen-char' }), /HUB_SA_ADMIN_SECRET/);
      const env = { ...process.env, HUB_SA_ADMIN_SECRET: 'thirteen-char', HUB_PORT: '0' };
      const start = spawnSync(process.execPath, [HUB, 'start'], { env, encoding: 'utf8', timeout: 30_000 });
      assert.notEqual(start.status, 0);
      const lines = start.stderr.trim().split('\n');
      assert.equal(lines.length, 1, start.stderr);
      assert.match(lines[0]!, /HUB_SA_ADMIN_SECRET.*32/);
      assert.ok(!start.stderr.includes('thirteen-char'), 'the secret itself is not printed');
      const doctor = spawnSync(process.execPath, [HUB, 'doctor'], { env, encoding: 'utf8', timeout: 30_000 });
      assert.equal(doctor.status, 1);
      assert.match(doctor.stdout, /FAIL\s+config\b.*HUB_SA_ADMIN_SECRET.*at least 32/);
    });
  });

  describe('5. an admin nick not registered yet', () => {
    it('is registered by the operator only', async () => {
      const hub = await startHub({ HUB_ADMINS: 'root,opsadmin' });
      try {
        for (const nick of ['opsadmin', 'OpsAdmin']) {
          const taken = await hub.call('POST', '/auth/accounts', {
            body: { nick, email: `${nick}@attacker.example`, password: 'attacker-password' },
          });
          assert.equal(taken.status, 401, JSON.stringify(taken.body));
        }
        const wrong = await hub.call('POST', '/auth/accounts', {
          body: { nick: 'opsadmin', email: 'ops@attacker.example', password: 'attacker-password' },
          headers: saBasic('not-the-operator-secret-at-all-0123456789'),
        });
        assert.equal(wrong.status, 401);
        const ops = await signup(hub, 'opsadmin'); // with the operator's credentials
        const list = await hub.call('GET', '/auth/accounts?asadmin=yes', { token: ops.token });
        assert.equal(list.status, 200, JSON.stringify(list.body));
      } finally {
        await hub.stop();
      }
    });

    it('hub doctor warns about listed nicks that no account holds', () => {
      const env = {
        ...process.env,
        HUB_ADMINS: 'opsadmin',
        HUB_DATA_DIR: testConfig().dataDir,
        HUB_PORT: '0',
      };
      const doctor = spawnSync(process.execPath, [HUB, 'doctor'], { env, encoding: 'utf8', timeout: 30_000 });
      assert.match(doctor.stdout, /warn\s+admins\b.*opsadmin.*not registered/, doctor.stdout);
    });
  });

  describe('6. /metrics is not for anonymous callers', () => {
    it('refuses a forwarded request, and with HUB_METRICS_TOKEN anyone without it', async () => {
      assert.equal((await raw(`${w.hub.url}/metrics`)).status, 200); // this machine, directly
      const forwarded = await raw(`${w.hub.url}/metrics`, { headers: { 'x-forwarded-for': '203.0.113.9' } });
      assert.equal(forwarded.status, 401);
      assert.ok(!forwarded.body.includes('nodejs_'), 'no metric in the refusal');
      const hub = await startHub({ HUB_METRICS_TOKEN: 'scraper-token-0123456789' });
      try {
        const anonymous = await raw(`${hub.url}/metrics`);
        assert.equal(anonymous.status, 401);
        assert.equal((await raw(`${hub.url}/metrics`, { headers: bearer('wrong') })).status, 401);
        const scraper = await raw(`${hub.url}/metrics`, { headers: bearer('scraper-token-0123456789') });
        assert.equal(scraper.status, 200);
        assert.match(scraper.body, /hub_http_request_duration_seconds/);
      } finally {
        await hub.stop();
      }
    });
  });

  describe('7. methods the hub has no route for', () => {
    it('answer 405 with Allow on a known path, 404 elsewhere, and log nothing at error level', async () => {
      const linesBefore = w.hub.logs().length;
      for (const method of ['TRACE', 'PROPFIND', 'LINK', 'PURGE', 'QUERY']) {
        const known = await raw(`${w.hub.url}/devices/${w.d2.id}`, {
          method,
          headers: bearer(w.alice.token),
        });
        assert.equal(known.status, 405, `${method}: ${known.body}`);
        assert.match(String(known.headers.allow), /GET/);
        assert.equal(JSON.parse(known.body).error, 'method_not_allowed');
        const unknown = await raw(`${w.hub.url}/no/such/path`, { method });
        assert.equal(unknown.status, 404, `${method}: ${unknown.body}`);
      }
      const logged = w.hub
        .logs()
        .slice(linesBefore)
        .map((l) => JSON.parse(l) as { level: number | string });
      assert.ok(logged.length > 0, 'the requests are logged');
      assert.deepEqual(
        logged.filter((l) => l.level === 'error' || (typeof l.level === 'number' && l.level >= 50)),
        [],
      );
    });
  });

  describe('8. loose edges', () => {
    const pageHeaders = (r: Raw) => {
      const csp = String(r.headers['content-security-policy'] ?? '');
      assert.match(csp, /default-src 'none'/);
      assert.match(csp, /frame-ancestors 'none'/);
      assert.doesNotMatch(csp, /unsafe-inline/);
      assert.equal(r.headers['x-content-type-options'], 'nosniff');
      assert.equal(r.headers['referrer-policy'], 'no-referrer');
      // Every script of the page is the one the policy names by its hash.
      const scripts = [...r.body.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]!);
      assert.equal(scripts.length, 1);
      const hash = createHash('sha256').update(scripts[0]!).digest('base64');
      assert.ok(csp.includes(`'sha256-${hash}'`), csp);
    };

    it('the HTML pages send a strict Content-Security-Policy and friends', async () => {
      const reset = await raw(`${w.hub.url}/auth/reset?token=abc%3C%2Fscript%3E`);
      assert.equal(reset.status, 200);
      pageHeaders(reset);
      assert.ok(!reset.body.includes('abc</script>'), 'the token is not written into the page');
      const registered = await w.hub.call('POST', '/auth/accounts', {
        body: { nick: 'erin', email: 'erin@example.com', password: 'erin-password' },
      });
      const challenge = await raw(
        String(registered.body['redirect-uri']).replace(/^http:\/\/[^/]+/, w.hub.url),
      );
      assert.equal(challenge.status, 200);
      pageHeaders(challenge);
    });

    it('invalid UTF-8 in a body is 400 invalid_json and changes nothing', async () => {
      const body = Buffer.concat([
        Buffer.from('{"mood":"'),
        Buffer.from([0xc3, 0x28, 0xff]),
        Buffer.from('"}'),
      ]);
      const r = await raw(`${w.hub.url}/devices/${w.d1.id}/device-meta`, {
        method: 'PATCH',
        headers: { ...bearer(w.d1.token), 'content-type': 'application/json' },
        body,
      });
      assert.equal(r.status, 400, r.body);
      assert.equal(JSON.parse(r.body).error, 'invalid_json');
      const device = await w.hub.call('GET', `/devices/${w.d1.id}`, { token: w.alice.token });
      assert.equal(device.body['device-meta'].mood, undefined);
    });

    it('GET /auth/accounts refuses a malformed X-Hub-Min-Position without asadmin too', async () => {
      const r = await w.hub.call('GET', '/auth/accounts', {
        token: w.alice.token,
        headers: { 'x-hub-min-position': 'soon' },
      });
      assert.equal(r.status, 400, JSON.stringify(r.body));
    });

    it('rights are checked before the body: a caller who may not act gets 403 or 404 for a bad body too', async () => {
      const asUser = await w.hub.call('PATCH', `/devices/${w.d2.id}/device-meta`, {
        token: w.alice.token,
        body: { temp: 20 },
      });
      assert.equal(asUser.status, 403, JSON.stringify(asUser.body));
      const othersDevice = await w.hub.call('PUT', `/devices/${w.d2.id}/user-meta`, {
        token: w.bob.token,
        body: { label: 7 },
      });
      assert.equal(othersDevice.status, 404, JSON.stringify(othersDevice.body));
      const othersHook = await w.hub.call('PATCH', `/webhooks/${w.ids.webhook}`, {
        token: w.bob.token,
        body: { enabled: 'yes' },
      });
      assert.equal(othersHook.status, 404, JSON.stringify(othersHook.body));
    });
  });
});
