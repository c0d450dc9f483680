// /devices, /trails and /callbacks over HTTP, as the owner, the device, another user and an
// admin; with missing and wrong credentials, unknown devices, oversized metadata, bad CSRs and
// stale notifications. Nothing of one account reaches another, and secrets reach only the owner
// and the device itself.
import 'reflect-metadata';
import assert from 'node:assert/strict';
import { webcrypto } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import { devices } from '../../domain/devices.ts';
import { trails } from '../../domain/trails.ts';
import { handle } from '../../infra/eventstore/aggregate.ts';
import {
  createDevice as createDeviceOf,
  type Device,
  signup,
  startHub,
  type TestHub,
  type User,
} from '../hub.ts';

x509.cryptoProvider.set(webcrypto as never);
const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const SHA_A = 'a'.repeat(64);
const SHA_B = 'b'.repeat(63) + 'c';
/** The operator's /callbacks secret of these hubs (HUB_SA_ADMIN_SECRET: 32 characters at least). */
const SA_SECRET = 'sa-secret-of-the-devices-tests-0123456789';

async function csr(cn: string): Promise<string> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const req = await x509.Pkcs10CertificateRequestGenerator.create({
    name: `CN=${cn}`,
    keys: keys as never,
    signingAlgorithm: ALG,
  });
  return req.toString('pem');
}

describe('/devices, /trails and /callbacks (e2e)', function () {
  this.timeout(90_000);
  let hub: TestHub;
  let root: User;
  let alice: User;
  let mallory: User;
  let dev: Device;
  let other: Device;
  /** Everything answered to someone who is not alice or her device. */
  const foreign: string[] = [];
  const asMallory = async (method: string, path: string, body?: unknown) => {
    const r = await hub.call(method, path, { token: mallory.token, body });
    foreign.push(JSON.stringify(r.body));
    return r;
  };
  const basic = (password: string) => ({
    authorization: `Basic ${Buffer.from(`saadmin:${password}`).toString('base64')}`,
  });

  const createDevice = (owner: User, body: Record<string, unknown> = {}) => createDeviceOf(hub, owner, body);
  /** The operator callback by nick, asked again (5 s at most) until it names `expected`: the index
   * by nick is a read model, updated after the write. */
  const callbackByNick = async (nick: string, expected: string) => {
    let named = await hub.call('PUT', `/callbacks/devices/${nick}`, { headers: basic(SA_SECRET) });
    for (let i = 0; i < 50 && named.body.device_id !== expected; i++) {
      await new Promise((r) => setTimeout(r, 100));
      named = await hub.call('PUT', `/callbacks/devices/${nick}`, { headers: basic(SA_SECRET) });
    }
    return named;
  };

  before(async () => {
    hub = await startHub({
      HUB_SA_ADMIN_SECRET: SA_SECRET,
      HUB_META_MAX_KEYS: '20',
      HUB_META_MAX_VALUE_LENGTH: '64',
    });
    root = await signup(hub, 'root');
    alice = await signup(hub, 'alice');
    mallory = await signup(hub, 'mallory');
    dev = await createDevice(alice, { 'user-meta': { site: 'lab' } });
    other = await createDevice(mallory);
  });
  after(() => hub.stop());

  describe('devices', () => {
    it('creates an owned device with a generated nick and a secret; the device logs in with PRN and secret', async () => {
      assert.match(dev.prn, /^prn:::devices:\/[a-f0-9]{24}$/);
      assert.match(dev.nick, /^[a-z]+_[a-z]+/);
      const claims = (await hub.call('GET', '/auth/auth_status', { token: dev.token })).body;
      assert.equal(claims.type, 'DEVICE');
      assert.equal(claims.sub, dev.prn);
      const wrong = await hub.call('POST', '/auth/login', {
        body: { username: dev.prn, password: 'not-the-secret' },
      });
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.error, 'invalid_credentials');
    });

    it('an unowned device registers itself; its owner claims it with the challenge, nobody else can', async () => {
      // user-meta is its owner's: a device registering itself sets device-meta only.
      const meddling = await hub.call('POST', '/devices', {
        body: { nick: 'bootstrapped', 'user-meta': { 'owner-label': 'set by the device' } },
      });
      assert.equal(meddling.status, 422);
      assert.equal(meddling.body.details[0].field, 'user-meta');
      // A field of the record that only the hub sets is named as such, not as unknown.
      const serverSet = await hub.call('POST', '/devices', { body: { nick: 'bootstrapped', public: true } });
      assert.equal(serverSet.status, 422);
      assert.deepEqual(serverSet.body.details, [
        { field: 'public', problem: 'is set by the hub, not by a request' },
      ]);
      const self = await hub.call('POST', '/devices', {
        body: { nick: 'bootstrapped', 'user-meta': {}, 'device-meta': { fw: '1.0' } },
      });
      assert.equal(self.status, 200);
      assert.equal(self.body.ownership_unverified, true);
      assert.equal(self.body.owner, '');
      assert.ok(self.body.challenge);
      assert.deepEqual(self.body.ovmode, { mode: 'claim', root_of_trust: 'secret', status: 'unverified' });
      const wrong = await hub.call('POST', `/devices/${self.body.id}/claim`, {
        token: alice.token,
        body: { challenge: 'guess' },
      });
      assert.equal(wrong.status, 404);
      const claimed = await hub.call('POST', `/devices/${self.body.id}/claim`, {
        token: alice.token,
        body: { challenge: self.body.challenge },
      });
      assert.equal(claimed.status, 200);
      assert.equal(claimed.body.owner, alice.prn);
      assert.equal(claimed.body.ownership_unverified, false);
      assert.equal(claimed.body.challenge, undefined);
      assert.deepEqual(claimed.body.ovmode, { mode: 'claim', root_of_trust: 'secret', status: 'verified' });
      const listed = (await hub.call('GET', '/devices', { token: alice.token })).body.items.find(
        (d: { id: string }) => d.id === self.body.id,
      );
      assert.deepEqual(listed.ovmode, claimed.body.ovmode, 'the list (a read model) agrees');
      const again = await asMallory('POST', `/devices/${self.body.id}/claim`, {
        challenge: self.body.challenge,
      });
      assert.equal(again.status, 404);
    });

    it('registers a device from a CSR and issues a certificate signed by the device CA', async () => {
      const r = await hub.call('POST', '/devices/register', {
        token: alice.token,
        body: { csr: await csr('sensor-7'), 'device-name': 'sensor-7', name: 'Sensor 7' },
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.nick, 'sensor-7');
      assert.deepEqual(r.body['user-meta'], { name: 'Sensor 7' });
      assert.deepEqual(r.body.ovmode, { mode: 'idevid', root_of_trust: 'certificate', status: 'verified' });
      const cert = new x509.X509Certificate(r.body.certificate);
      const ca = new x509.X509Certificate(readFileSync(join(hub.dataDir, 'keys', 'device-ca.pem'), 'utf8'));
      // The hub names the device: the CSR asked for CN=sensor-7, the certificate says which device it is.
      assert.equal(cert.subject, `CN=${r.body.id}`);
      const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
      assert.deepEqual(san?.names.toJSON(), [{ type: 'url', value: r.body.prn }]);
      assert.equal(cert.issuer, ca.subject);
      assert.ok(await cert.verify({ publicKey: await ca.publicKey.export() }));
      assert.equal(
        (await hub.call('POST', '/auth/login', { body: { username: r.body.prn, password: r.body.secret } }))
          .status,
        200,
      );
    });

    it('refuses a malformed CSR and a CSR whose signature does not verify (422 naming the problem)', async () => {
      const junk = await hub.call('POST', '/devices/register', {
        token: alice.token,
        body: { csr: 'not a csr' },
      });
      assert.equal(junk.status, 422);
      assert.equal(junk.body.details[0].field, 'csr');
      assert.match(junk.body.message, /not a PEM or DER certificate signing request/);
      const good = await csr('tampered');
      const der = Buffer.from(good.replace(/-----[^-]+-----|\s/g, ''), 'base64');
      der[der.length - 5]! ^= 0xff; // inside the signature
      const bad = `-----BEGIN CERTIFICATE REQUEST-----\n${der.toString('base64')}\n-----END CERTIFICATE REQUEST-----`;
      const r = await hub.call('POST', '/devices/register', { token: alice.token, body: { csr: bad } });
      assert.equal(r.status, 422);
      assert.match(r.body.message, /signature does not verify|not a PEM/);
      assert.equal((await hub.call('POST', '/devices/register', { body: { csr: good } })).status, 401);
    });

    it('reads: the owner and the device see the secret; an admin sees the device without it; others get 404', async () => {
      const owner = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
      assert.equal(owner.status, 200);
      assert.equal(owner.body.secret, dev.secret);
      assert.deepEqual(owner.body['user-meta'], { site: 'lab' });
      assert.deepEqual(owner.body.ovmode, { mode: 'owned', root_of_trust: 'secret', status: 'verified' });
      const self = await hub.call('GET', `/devices/${encodeURIComponent(dev.prn)}`, { token: dev.token });
      assert.equal(self.body.secret, dev.secret);
      const admin = await hub.call('GET', `/devices/${dev.id}`, { token: root.token });
      assert.equal(admin.status, 200);
      assert.equal(admin.body.secret, undefined);
      for (const ref of [dev.id, encodeURIComponent(dev.prn), dev.nick])
        assert.equal((await asMallory('GET', `/devices/${ref}`)).status, 404);
      assert.equal(
        (await hub.call('GET', `/devices/${other.id}`, { token: dev.token })).status,
        404,
        'a device sees no other device',
      );
      const listed = await hub.call('GET', '/devices', { token: dev.token });
      assert.equal(listed.status, 403, 'a device owns no devices to list');
      assert.match(listed.body.message, /Only USER or SERVICE accounts/);
      assert.equal((await hub.call('GET', `/devices/${'0'.repeat(24)}`, { token: alice.token })).status, 404);
      assert.equal((await hub.call('GET', `/devices/${dev.id}`)).status, 401);
      assert.equal((await hub.call('GET', `/devices/${dev.id}`, { token: 'not.a.token' })).status, 401);
    });

    it("lists only one's own devices, without secrets", async () => {
      const mine = await hub.call('GET', '/devices', { token: alice.token });
      assert.equal(mine.status, 200);
      assert.ok(mine.body.total >= 3);
      assert.ok(mine.body.items.every((d: { owner: string }) => d.owner === alice.prn));
      assert.deepEqual(mine.body.items.find((d: { id: string }) => d.id === dev.id).ovmode, {
        mode: 'owned',
        root_of_trust: 'secret',
        status: 'verified',
      });
      assert.doesNotMatch(JSON.stringify(mine.body), new RegExp(dev.secret));
      const theirs = await asMallory('GET', '/devices');
      assert.deepEqual(
        theirs.body.items.map((d: { id: string }) => d.id),
        [other.id],
      );
    });

    it('renames (owner only), also reachable by the new nick', async () => {
      const r = await hub.call('PATCH', `/devices/${dev.id}`, {
        token: alice.token,
        body: { nick: 'gateway-1' },
      });
      assert.equal(r.status, 200);
      assert.equal(r.body.nick, 'gateway-1');
      assert.equal((await hub.call('GET', '/devices/gateway-1', { token: alice.token })).body.id, dev.id);
      assert.equal(
        (await hub.call('PATCH', `/devices/${dev.id}`, { token: dev.token, body: { nick: 'mine-now' } }))
          .status,
        403,
      );
      assert.equal((await asMallory('PATCH', `/devices/${dev.id}`, { nick: 'mine-now' })).status, 404);
      const taken = await hub.call('POST', '/devices', { token: alice.token, body: { nick: 'GATEWAY-1' } });
      assert.equal(taken.status, 409);
    });

    it('device-meta: only the device reports it; merges, null removes, an unchanged patch appends nothing', async () => {
      const r = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { fw: '1.0', temp: '21' },
      });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body['device-meta'], { fw: '1.0', temp: '21' });
      const merged = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { temp: '22', fw: null },
      });
      assert.deepEqual(merged.body['device-meta'], { temp: '22' });
      const head = await hub.node.store.head();
      const same = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { temp: '22', gone: null },
      });
      assert.equal(same.status, 200);
      assert.equal(await hub.node.store.head(), head, 'nothing appended');
      assert.equal(same.headers.get('x-hub-position'), null);
      assert.equal(
        (await hub.call('PATCH', `/devices/${dev.id}/device-meta`, { token: alice.token, body: { x: '1' } }))
          .status,
        403,
      );
      assert.equal(
        (await hub.call('PATCH', `/devices/${dev.id}/device-meta`, { token: other.token, body: { x: '1' } }))
          .status,
        404,
      );
      assert.equal((await asMallory('PATCH', `/devices/${dev.id}/device-meta`, { x: '1' })).status, 403);
    });

    it('device-meta limits: 413 above the key count, 422 for long or non-string values', async () => {
      const many = Object.fromEntries(Array.from({ length: 25 }, (_, i) => [`k${i}`, 'v']));
      const big = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, { token: dev.token, body: many });
      assert.equal(big.status, 413);
      assert.equal(big.body.error, 'payload_too_large');
      const long = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { k: 'x'.repeat(65) },
      });
      assert.equal(long.status, 422);
      const typed = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { k: 7 },
      });
      assert.equal(typed.status, 422);
      assert.deepEqual(typed.body.details, [{ field: 'k', problem: 'must be string or must be null' }]);
      const longKey = 'k'.repeat(129);
      const named = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { [longKey]: 'v' },
      });
      assert.equal(named.status, 422);
      assert.deepEqual(named.body.details, [
        { field: longKey, problem: 'key must NOT have more than 128 characters' },
      ]);
      // JSON.parse keeps __proto__ as a key, but an assignment sets the prototype with it: refused
      // rather than answered and then lost. A key named like an inherited property is a key like any.
      for (const body of ['{"__proto__":"x","b":"2"}', '{"__proto__":"x"}']) {
        const proto = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
          token: dev.token,
          body: JSON.parse(body), // an own __proto__ key, which JSON.stringify sends
        });
        assert.equal(proto.status, 422, body);
        assert.deepEqual(proto.body.details, [{ field: '__proto__', problem: 'is not allowed as a key' }]);
      }
      const head = await hub.node.store.head();
      const inherited = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { constructor: null, toString: null },
      });
      assert.equal(inherited.status, 200);
      assert.equal(await hub.node.store.head(), head, 'removing keys that are not there appends nothing');
      const after = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
      assert.deepEqual(after.body['device-meta'], { temp: '22' }, 'refused patches changed nothing');
    });

    it('user-meta: the owner replaces it; the device and others cannot', async () => {
      const r = await hub.call('PUT', `/devices/${dev.id}/user-meta`, {
        token: alice.token,
        body: { site: 'plant', rack: '4' },
      });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body['user-meta'], { site: 'plant', rack: '4' });
      assert.equal(
        (await hub.call('PUT', `/devices/${dev.id}/user-meta`, { token: dev.token, body: { a: 'b' } }))
          .status,
        403,
      );
      assert.equal((await asMallory('PUT', `/devices/${dev.id}/user-meta`, { a: 'b' })).status, 404);
      const many = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, 'v']));
      assert.equal(
        (await hub.call('PUT', `/devices/${dev.id}/user-meta`, { token: alice.token, body: many })).status,
        413,
      );
      const proto = JSON.parse('{"__proto__":"x","b":"2"}');
      const refused = await hub.call('PUT', `/devices/${dev.id}/user-meta`, {
        token: alice.token,
        body: proto,
      });
      assert.equal(refused.status, 422);
      assert.equal(refused.body.details[0].field, '__proto__');
      const created = await hub.call('POST', '/devices', {
        token: alice.token,
        body: { 'user-meta': proto },
      });
      assert.equal(created.status, 422);
      assert.equal(created.body.details[0].field, 'user-meta.__proto__');
      const kept = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
      assert.deepEqual(kept.body['user-meta'], { site: 'plant', rack: '4' }, 'refused, nothing changed');
    });

    it('a nick that is a path under /devices (register) is refused: /devices/{nick} could not name it', async () => {
      for (const [path, body] of [
        ['/devices', { nick: 'Register' }],
        ['/devices/register', { csr: 'not read', 'device-name': 'register' }],
      ] as const) {
        const r = await hub.call('POST', path, { token: alice.token, body });
        assert.equal(r.status, 422, path);
        assert.equal(r.body.details[0].problem, 'is reserved');
      }
      const unowned = await hub.call('POST', '/devices', { body: { nick: 'register' } });
      assert.equal(unowned.status, 422);
      const rename = await hub.call('PATCH', `/devices/${dev.id}`, {
        token: alice.token,
        body: { nick: 'register' },
      });
      assert.equal(rename.status, 422);
      const get = await hub.call('GET', '/devices/register', { token: alice.token });
      assert.equal(get.status, 405, 'a path of its own: POST only');
      assert.equal(get.headers.get('allow'), 'POST');
    });

    it('devices registering themselves are limited per address by a knob of their own (429 with Retry-After); owners are not', async () => {
      const limited = await startHub({ HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE: '3' });
      try {
        const statuses: number[] = [];
        for (let i = 0; i < 4; i++)
          statuses.push((await limited.call('POST', '/devices', { body: {} })).status);
        assert.deepEqual(statuses, [200, 200, 200, 429]);
        const refused = await limited.call('POST', '/devices', { body: {} });
        assert.ok(Number(refused.headers.get('retry-after')) >= 1);
        const owner = await signup(limited, 'provisioner');
        assert.equal((await limited.call('POST', '/devices', { token: owner.token, body: {} })).status, 200);
      } finally {
        await limited.stop();
      }
    });

    it('a nick of 24 hex digits is refused: /devices/{id} reads it as an id, of another device or of none', async () => {
      const other = await hub.call('POST', '/devices', { token: alice.token, body: {} });
      const before = await hub.call('GET', `/devices/${other.body.id}`, { token: alice.token });
      for (const [method, path, body] of [
        ['POST', '/devices', { nick: other.body.id }],
        ['POST', '/devices', { nick: 'ABCDEFABCDEFABCDEFABCDEF' }],
        ['PATCH', `/devices/${dev.id}`, { nick: other.body.id }],
      ] as const) {
        const r = await hub.call(method, path, { token: alice.token, body });
        assert.equal(r.status, 422, `${method} ${path}`);
        assert.equal(r.body.details[0].problem, 'has the form of an id');
      }
      const unowned = await hub.call('POST', '/devices', { body: { nick: 'abcdefabcdefabcdefabcdef' } });
      assert.equal(unowned.status, 422);
      const after = await hub.call('GET', `/devices/${other.body.id}`, { token: alice.token });
      assert.deepEqual(after.body, before.body, 'refused, nothing changed');
    });

    it('public devices are readable by others, without secret; private again, they are 404', async () => {
      assert.equal(
        (await hub.call('PUT', `/devices/${dev.id}/public`, { token: alice.token })).body.public,
        true,
      );
      const seen = await asMallory('GET', `/devices/${dev.id}`);
      assert.equal(seen.status, 200);
      assert.equal(seen.body.secret, undefined);
      // Mallory sees it, so a change of hers is forbidden (403), not hidden (404).
      assert.equal((await asMallory('PUT', `/devices/${dev.id}/public`)).status, 403);
      const meta = await asMallory('PUT', `/devices/${dev.id}/user-meta`, { by: 'mallory' });
      assert.equal(meta.status, 403);
      assert.equal(meta.body.error, 'forbidden');
      assert.equal(
        (await hub.call('DELETE', `/devices/${dev.id}/public`, { token: alice.token })).body.public,
        false,
      );
      assert.equal((await asMallory('GET', `/devices/${dev.id}`)).status, 404);
      assert.equal((await asMallory('PUT', `/devices/${dev.id}/user-meta`, { by: 'mallory' })).status, 404);
      const kept = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
      assert.equal(kept.body['user-meta'].by, undefined, 'refused, nothing changed');
    });
  });

  describe('trails and steps', () => {
    it('the owner and the device push steps in rev order; objects are the sha256 the state references', async () => {
      const first = await hub.call('POST', `/trails/${dev.id}/steps`, {
        token: alice.token,
        body: {
          state: { 'bsp/kernel.img': SHA_A, apps: [{ rootfs: SHA_B }], note: 'not-a-sha' },
          'commit-msg': 'initial',
        },
      });
      assert.equal(first.status, 200, JSON.stringify(first.body));
      assert.equal(first.body.rev, 0);
      assert.deepEqual(first.body.objects, [SHA_A, SHA_B]);
      assert.equal(first.body.progress.status, 'NEW');
      const second = await hub.call('POST', `/trails/${dev.id}/steps`, {
        token: dev.token,
        body: { rev: 1, state: { 'bsp/kernel.img': SHA_B } },
      });
      assert.equal(second.status, 200);
      const skipped = await hub.call('POST', `/trails/${dev.id}/steps`, {
        token: alice.token,
        body: { rev: 5, state: {} },
      });
      assert.equal(skipped.status, 409);
      assert.equal((await asMallory('POST', `/trails/${dev.id}/steps`, { state: {} })).status, 404);
      assert.equal(
        (await hub.call('POST', `/trails/${dev.id}/steps`, { token: root.token, body: { state: {} } }))
          .status,
        403,
      );
    });

    it('reads steps (owner, device); others get 404', async () => {
      const list = await hub.call('GET', `/trails/${dev.id}/steps`, { token: alice.token });
      assert.equal(list.status, 200);
      assert.deepEqual(
        list.body.items.map((s: { rev: number }) => s.rev),
        [0, 1],
      );
      assert.equal((await hub.call('GET', `/trails/${dev.id}/steps/1`, { token: dev.token })).body.rev, 1);
      assert.equal((await hub.call('GET', `/trails/${dev.id}/steps/9`, { token: alice.token })).status, 404);
      assert.equal((await asMallory('GET', `/trails/${dev.id}/steps`)).status, 404);
      assert.equal((await asMallory('GET', `/trails/${dev.id}/steps/0`)).status, 404);
    });

    it('only the device reports progress, with a known status', async () => {
      const r = await hub.call('PUT', `/trails/${dev.id}/steps/1/progress`, {
        token: dev.token,
        body: { progress: 40, status: 'STARTED', 'status-msg': 'downloading' },
      });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body.progress, { progress: 40, status: 'STARTED', 'status-msg': 'downloading' });
      assert.equal(
        (
          await hub.call('PUT', `/trails/${dev.id}/steps/1/progress`, {
            token: alice.token,
            body: { progress: 50, status: 'DONE' },
          })
        ).status,
        403,
      );
      assert.equal(
        (
          await hub.call('PUT', `/trails/${dev.id}/steps/1/progress`, {
            token: dev.token,
            body: { progress: 50, status: 'FINISHED' },
          })
        ).status,
        422,
      );
      assert.equal(
        (
          await hub.call('PUT', `/trails/${dev.id}/steps/1/progress`, {
            token: dev.token,
            body: { progress: 101, status: 'DONE' },
          })
        ).status,
        422,
      );
      assert.equal(
        (
          await hub.call('PUT', `/trails/${dev.id}/steps/7/progress`, {
            token: dev.token,
            body: { progress: 1, status: 'DONE' },
          })
        ).status,
        404,
      );
    });

    it("the pipeline carries the device's public flag to its steps by itself", async () => {
      await hub.call('PUT', `/devices/${dev.id}/public`, { token: alice.token });
      const deadline = Date.now() + 10_000;
      let steps: { public: boolean }[] = [];
      while (Date.now() < deadline) {
        steps = (await hub.call('GET', `/trails/${dev.id}/steps`, { token: alice.token })).body.items;
        if (steps.every((s) => s.public)) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.ok(steps.length === 2 && steps.every((s) => s.public));
      const publicSteps = await asMallory('GET', `/trails/${dev.id}/steps`);
      assert.equal(publicSteps.status, 200, 'public steps of a public device are readable');
      await hub.call('DELETE', `/devices/${dev.id}/public`, { token: alice.token });
    });
  });

  describe('callbacks', () => {
    const stepId = () => `${dev.id}-0`;

    it('refuses missing, wrong and non-saadmin credentials (401)', async () => {
      assert.equal((await hub.call('PUT', `/callbacks/devices/${dev.id}`)).status, 401);
      const wrong = await hub.call('PUT', `/callbacks/devices/${dev.id}`, { headers: basic('nope') });
      assert.equal(wrong.status, 401);
      assert.match(wrong.headers.get('www-authenticate') ?? '', /Basic/);
      const user = await hub.call('PUT', `/callbacks/devices/${dev.id}`, {
        headers: { authorization: `Basic ${Buffer.from(`alice:${SA_SECRET}`).toString('base64')}` },
      });
      assert.equal(user.status, 401);
      assert.equal(
        (await hub.call('PUT', `/callbacks/devices/${dev.id}`, { token: root.token })).status,
        401,
      );
    });

    it("marks the device's steps to match it and counts them", async () => {
      // A step left behind (as when a push raced the flag): private while its device is public.
      await hub.call('PUT', `/devices/${dev.id}/public`, { token: alice.token });
      await new Promise((r) => setTimeout(r, 300));
      // Written the way the hub's own code writes, through the aggregate layer.
      await handle(hub.node.store, `trail-${dev.id}`, trails, () => ({
        events: [
          { type: 'StepPublicitySet', data: { device_id: dev.id, rev: 0, public: false, garbage: false } },
        ],
        result: undefined,
      }));
      const r = await hub.call('PUT', `/callbacks/devices/${dev.id}`, { headers: basic(SA_SECRET) });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual(r.body, {
        device_id: dev.id,
        steps_marked_as_public: 1,
        steps_marked_as_non_public: 0,
      });
      const again = await hub.call('PUT', `/callbacks/devices/gateway-1`, { headers: basic(SA_SECRET) });
      assert.deepEqual(again.body, {
        device_id: dev.id,
        steps_marked_as_public: 0,
        steps_marked_as_non_public: 0,
      });
      assert.equal(
        (await hub.call('PUT', `/callbacks/devices/${'f'.repeat(24)}`, { headers: basic(SA_SECRET) })).status,
        404,
      );
    });

    it('ignores a stale notification (409) and accepts a fresh one, with nanoseconds and zone offsets', async () => {
      const stale = await hub.call(
        'PUT',
        `/callbacks/devices/${dev.id}?timemodified=2020-01-01T00:00:00.123456789Z`,
        { headers: basic(SA_SECRET) },
      );
      assert.equal(stale.status, 409);
      assert.equal(stale.body.error, 'stale_notification');
      const future = new Date(Date.now() + 3600_000).toISOString().replace('Z', '123456Z');
      assert.equal(
        (
          await hub.call('PUT', `/callbacks/devices/${dev.id}?timemodified=${future}`, {
            headers: basic(SA_SECRET),
          })
        ).status,
        200,
      );
      const offset = `${new Date(Date.now() + 7200_000 + 3600_000).toISOString().slice(0, 19)}.000000001%2B02:00`;
      assert.equal(
        (
          await hub.call('PUT', `/callbacks/devices/${dev.id}?timemodified=${offset}`, {
            headers: basic(SA_SECRET),
          })
        ).status,
        200,
      );
      for (const when of ['yesterday', '2026-11-31T00:00:00Z', '2030-01-01T24:00:00Z']) {
        const bad = await hub.call('PUT', `/callbacks/devices/${dev.id}?timemodified=${when}`, {
          headers: basic(SA_SECRET),
        });
        assert.equal(bad.status, 422, `${when} does not exist`);
      }
    });

    it("answers the step's bookkeeping record; stale and unknown steps refused", async () => {
      const r = await hub.call('PUT', `/callbacks/steps/${stepId()}`, { headers: basic(SA_SECRET) });
      assert.equal(r.status, 200);
      assert.deepEqual(r.body, {
        id: stepId(),
        owner: alice.prn,
        device: dev.prn,
        objects: [SHA_A, SHA_B],
        public: true,
        garbage: false,
      });
      assert.equal(
        (
          await hub.call('PUT', `/callbacks/steps/${stepId()}?timemodified=2001-01-01T00:00:00Z`, {
            headers: basic(SA_SECRET),
          })
        ).status,
        409,
      );
      assert.equal(
        (await hub.call('PUT', `/callbacks/steps/${dev.id}-42`, { headers: basic(SA_SECRET) })).status,
        404,
      );
      assert.equal(
        (await hub.call('PUT', `/callbacks/steps/${stepId()}`, { headers: basic('wrong') })).status,
        401,
      );
    });

    it('/openapi.json publishes what the callbacks answer: 401, 404, 409 (stale, ambiguous), 422', async () => {
      const doc = (await hub.call('GET', '/openapi.json')).body;
      for (const path of ['/callbacks/devices/{id}', '/callbacks/steps/{id}']) {
        const op = doc.paths[path].put;
        assert.deepEqual(
          Object.keys(op.responses).sort(),
          ['200', '400', '401', '404', '409', '422', '429', '503', 'default'],
          path,
        );
        assert.match(op.responses['409'].description, /stale_notification/);
        assert.ok(op.description, path);
      }
      assert.match(doc.paths['/callbacks/devices/{id}'].put.responses['409'].description, /ambiguous/);
    });

    it('with an empty HUB_SA_ADMIN_SECRET, nobody gets in', async () => {
      const closed = await startHub({ HUB_SA_ADMIN_SECRET: '' });
      try {
        assert.equal(
          (await closed.call('PUT', `/callbacks/devices/${dev.id}`, { headers: basic('') })).status,
          401,
        );
      } finally {
        await closed.stop();
      }
    });
  });

  it('DELETE marks the device garbage: it leaves the list and can no longer log in', async () => {
    const gone = await createDevice(alice);
    assert.equal((await asMallory('DELETE', `/devices/${gone.id}`)).status, 404);
    assert.equal((await hub.call('DELETE', `/devices/${gone.id}`, { token: gone.token })).status, 403);
    const r = await hub.call('DELETE', `/devices/${gone.id}`, { token: alice.token });
    assert.equal(r.status, 200);
    assert.equal(r.body.garbage, true);
    assert.equal(r.body.secret, undefined);
    assert.equal(
      (await hub.call('POST', '/auth/login', { body: { username: gone.prn, password: gone.secret } })).status,
      401,
    );
    const list = await hub.call('GET', '/devices', { token: alice.token });
    assert.ok(!list.body.items.some((d: { id: string }) => d.id === gone.id));
  });

  it('a deleted device is gone: its token, its nick and every owner change answer 404; its nick is free again', async () => {
    const gone = await createDevice(alice, { nick: 'retired' });
    const pushed = await hub.call('POST', `/trails/${gone.id}/steps`, {
      token: gone.token,
      body: { state: {} },
    });
    assert.equal(pushed.status, 200);
    assert.equal((await hub.call('DELETE', `/devices/${gone.id}`, { token: alice.token })).status, 200);
    const again = await hub.call('DELETE', `/devices/${gone.id}`, { token: alice.token });
    assert.equal(again.status, 200, 'deleting again changes nothing and answers the same');
    assert.equal(again.body.garbage, true);
    // Every change of the owner's is refused, and appends nothing. The publicity follower carries
    // the deletion to the device's step, and records that on the device, after the DELETE answered
    // (sometimes after the second): "before" is a read that the next one, 100 ms later, repeats.
    const read = async () => (await hub.call('GET', `/devices/${gone.id}`, { token: alice.token })).body;
    let before = await read();
    for (const until = Date.now() + 5000; ; ) {
      await new Promise((r) => setTimeout(r, 100));
      const next = await read();
      if (JSON.stringify(next) === JSON.stringify(before)) break;
      assert.ok(Date.now() < until, 'the device settles within 5 s of its deletion');
      before = next;
    }
    assert.equal(before.garbage, true, 'the owner still reads it by id');
    for (const [method, path, body] of [
      ['PATCH', `/devices/${gone.id}`, { nick: 'revived' }],
      ['PUT', `/devices/${gone.id}/public`, undefined],
      ['DELETE', `/devices/${gone.id}/public`, undefined],
      ['PUT', `/devices/${gone.id}/user-meta`, { q: '1' }],
      ['POST', `/trails/${gone.id}/steps`, { state: {} }],
    ] as const) {
      const r = await hub.call(method, path, { token: alice.token, body });
      assert.equal(r.status, 404, `${method} ${path}: ${JSON.stringify(r.body)}`);
    }
    // Its own token, still unexpired, reaches nothing.
    for (const [method, path, body] of [
      ['GET', `/devices/${gone.id}`, undefined],
      ['PATCH', `/devices/${gone.id}/device-meta`, { a: '1' }],
      ['PUT', `/trails/${gone.id}/steps/0/progress`, { progress: 1, status: 'STARTED' }],
      ['POST', `/trails/${gone.id}/steps`, { state: {} }],
    ] as const) {
      const r = await hub.call(method, path, { token: gone.token, body });
      assert.equal(r.status, 404, `device token, ${method} ${path}: ${JSON.stringify(r.body)}`);
      assert.ok(!JSON.stringify(r.body).includes(gone.secret));
    }
    const after = (await hub.call('GET', `/devices/${gone.id}`, { token: alice.token })).body;
    assert.deepEqual(after, before, 'nothing changed');
    const step = (await hub.call('GET', `/trails/${gone.id}/steps/0`, { token: alice.token })).body;
    assert.equal(step.progress.status, 'NEW');
    // The nick names nothing now, and another device may take it.
    assert.equal((await hub.call('GET', '/devices/retired', { token: alice.token })).status, 404);
    const successor = await createDevice(alice, { nick: 'retired' });
    const byNick = await hub.call('GET', '/devices/retired', { token: alice.token });
    assert.equal(byNick.body.id, successor.id);
    // The operators' index by nick left the deleted device: the nick is not ambiguous.
    const named = await callbackByNick('retired', successor.id);
    assert.equal(named.status, 200, JSON.stringify(named.body));
    assert.equal(named.body.device_id, successor.id);
  });

  it('a nick still held by a device deleted before deletion gave nicks back is free', async () => {
    const old = await createDevice(alice, { nick: 'legacy' });
    // The event as it was written then: without the nick, which stayed claimed.
    await handle(hub.node.store, `device-${old.id}`, devices, () => ({
      events: [{ type: 'DeviceMarkedGarbage', data: { device_id: old.id, owner_prn: alice.prn } }],
      result: undefined,
    }));
    const fresh = await createDevice(alice, { nick: 'legacy' });
    assert.notEqual(fresh.id, old.id);
    assert.equal((await hub.call('GET', '/devices/legacy', { token: alice.token })).body.id, fresh.id);
    const taken = await hub.call('POST', '/devices', { token: alice.token, body: { nick: 'legacy' } });
    assert.equal(taken.status, 409, 'a live device still holds its nick');
    // The operators' index still lists the old device under the nick; the callbacks skip it.
    const named = await callbackByNick('legacy', fresh.id);
    assert.equal(named.status, 200, JSON.stringify(named.body));
    assert.equal(named.body.device_id, fresh.id);
  });

  it('a claim lost to another claimant gives back the nick it took', async () => {
    const [carol, dave] = [await signup(hub, 'carol'), await signup(hub, 'dave')];
    for (let round = 0; round < 5; round++) {
      const made = await hub.call('POST', '/devices', { body: {} });
      assert.equal(made.status, 200, JSON.stringify(made.body));
      const nick = `contested-${round}`;
      const claims = await Promise.all(
        [carol, dave].map((u) =>
          hub.call('POST', `/devices/${made.body.id}/claim`, {
            token: u.token,
            body: { challenge: made.body.challenge, nick },
          }),
        ),
      );
      assert.deepEqual(
        claims.map((c) => c.status).sort(),
        [200, claims[1]!.status === 200 ? claims[0]!.status : claims[1]!.status].sort(),
      );
      const loser = claims[0]!.status === 200 ? dave : carol;
      assert.equal(claims.filter((c) => c.status === 200).length, 1);
      const own = await hub.call('POST', '/devices', { token: loser.token, body: { nick } });
      assert.equal(
        own.status,
        200,
        `round ${round}: the loser's nick stayed taken: ${JSON.stringify(own.body)}`,
      );
      // One owner claiming twice at once (a double-click): the failed request shares the nick's
      // reservation with the one that won, and must not give it back.
      const twice = await hub.call('POST', '/devices', { body: {} });
      const doubled = await Promise.all(
        [0, 1].map(() =>
          hub.call('POST', `/devices/${twice.body.id}/claim`, {
            token: carol.token,
            body: { challenge: twice.body.challenge, nick: `twice-${round}` },
          }),
        ),
      );
      assert.ok(doubled.some((c) => c.status === 200));
      const same = await hub.call('POST', '/devices', {
        token: carol.token,
        body: { nick: `twice-${round}` },
      });
      assert.equal(same.status, 409, `round ${round}: the claimed device's nick was given away`);
    }
  });

  it('a step is named by its rev in decimal only', async () => {
    const d = await createDevice(alice);
    for (const _ of [0, 1])
      assert.equal(
        (await hub.call('POST', `/trails/${d.id}/steps`, { token: d.token, body: { state: {} } })).status,
        200,
      );
    for (const rev of ['00', '01', '1e0', '%2B1', '0x1', '1.0']) {
      const r = await hub.call('GET', `/trails/${d.id}/steps/${rev}`, { token: alice.token });
      assert.equal(r.status, 404, rev);
      const p = await hub.call('PUT', `/trails/${d.id}/steps/${rev}/progress`, {
        token: d.token,
        body: { progress: 1, status: 'STARTED' },
      });
      assert.equal(p.status, 404, `progress ${rev}`);
      const c = await hub.call('PUT', `/callbacks/steps/${d.id}-${rev}`, { headers: basic(SA_SECRET) });
      assert.equal(c.status, 404, `callback ${rev}`);
    }
    assert.equal((await hub.call('GET', `/trails/${d.id}/steps/1`, { token: alice.token })).body.rev, 1);
    assert.equal(
      (await hub.call('PUT', `/callbacks/steps/${d.id}-1`, { headers: basic(SA_SECRET) })).status,
      200,
    );
  });

  describe("leaks (last: mocha runs a suite's own tests before its nested suites)", () => {
    it("nothing answered to another account carried alice's device secret", () => {
      const seen = foreign.join('\n');
      assert.ok(!seen.includes(dev.secret), 'a secret leaked');
      assert.ok(foreign.length >= 10, `the check saw ${foreign.length} answers`);
    });
  });
});
