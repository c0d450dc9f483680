// The console in a real browser (Debian's Chromium through playwright-core) against a real hub:
// the README's first steps done through its pages (sign up, the emailed link, sign in, a device
// whose metadata changes after the device's PATCH), and every page checked by axe-core, on a
// desk-sized and a phone-sized window. The served files' headers and the first-load budget are
// checked over plain HTTP.
import assert from 'node:assert/strict';
import { gunzipSync } from 'node:zlib';
import type { Page } from 'playwright-core';
import { consoleAssets } from '../../api/console.ts';
import { request } from '../harness.ts';
import { readMail, signup, startHub, type TestHub } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { assertAccessible, errors, launchBrowser, signIn, type TestBrowser } from './browser.ts';

/** The issue's budget: the JavaScript of the first load, over the wire. */
const FIRST_LOAD_BUDGET = 150 * 1024;

describe('console (e2e, Chromium)', function () {
  this.timeout(120_000);
  let hub: TestHub;
  let browser: TestBrowser;
  let page: Page;
  let rx: Receiver;
  const nick = 'ada';
  const email = 'ada@example.com';
  const password = 'a long secret';

  before(async () => {
    hub = await startHub({
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_WEBHOOK_TIMEOUT_MS: '1500',
    });
    rx = await new Receiver().start();
    browser = await launchBrowser();
    ({ page } = await browser.page());
  });
  after(async () => {
    await browser?.close();
    await hub?.stop();
    await rx?.stop();
  });
  const token = async () =>
    (await hub.call('POST', '/auth/login', { body: { username: nick, password } })).body.token as string;
  /** A device's secret, rotated by its owner (the console showed the first one once). */
  const deviceSecret = async (ownerToken: string, id: string) =>
    (await hub.call('POST', `/devices/${id}/secret`, { token: ownerToken, body: {} })).body.secret as string;
  afterEach(() => {
    assert.deepEqual(errors.splice(0), [], 'the pages met errors');
  });

  const open = async (hash: string) => {
    await page.goto(`${hub.url}/console/#${hash}`);
    await page.locator('main h1').first().waitFor();
  };

  describe('serving', () => {
    it('serves the page with its strict CSP, and its files compressed, cached and within the budget', async () => {
      const index = await request(`${hub.url}/console/`, { headers: { 'accept-encoding': 'identity' } });
      assert.equal(index.status, 200);
      const csp = index.headers.get('content-security-policy') ?? '';
      assert.match(
        csp,
        /^default-src 'none'; script-src 'self' 'sha256-[^']+'; style-src 'self'; connect-src 'self';/,
      );
      assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
      assert.equal(index.headers.get('x-frame-options'), 'DENY');
      // The one inline script is the import map (JSON, named by its hash): no executable inline script.
      const inline = [...String(index.body).matchAll(/<script([^>]*)>([^<]*)<\/script>/g)];
      assert.deepEqual(
        inline.filter(([, attrs, body]) => body!.trim() && !/type="importmap"/.test(attrs!)),
        [],
      );

      const lib = /href="(\/console\/lib\/preact-[\d.]+\.js)"/.exec(String(index.body))![1]!;
      const libAnswer = await fetch(`${hub.url}${lib}`, { headers: { 'accept-encoding': 'gzip' } });
      assert.equal(libAnswer.headers.get('cache-control'), 'public, max-age=31536000, immutable');
      assert.equal(libAnswer.headers.get('content-type'), 'text/javascript; charset=utf-8');

      // fetch() decodes on its own: ask with node's raw view of the bytes instead.
      const raw = await rawGet(`${hub.url}/console/main.js`, 'gzip');
      assert.equal(raw.headers['content-encoding'], 'gzip');
      assert.equal(raw.headers['cache-control'], 'no-cache');
      assert.match(gunzipSync(raw.body).toString(), /render\(/);
      const again = await rawGet(`${hub.url}/console/main.js`, 'gzip', raw.headers.etag as string);
      assert.equal(again.status, 304);

      const assets = consoleAssets();
      const br = assets.firstLoadBytes('br');
      const gzip = assets.firstLoadBytes('gzip');
      console.log(
        `      console first load: ${(br / 1024).toFixed(1)} KiB of JavaScript over the wire (Brotli), ${(gzip / 1024).toFixed(1)} KiB gzip, ${(assets.firstLoadBytes('identity') / 1024).toFixed(1)} KiB uncompressed; budget ${FIRST_LOAD_BUDGET / 1024} KiB`,
      );
      assert.ok(gzip <= FIRST_LOAD_BUDGET, `${gzip} bytes of JavaScript on first load`);
    });

    it('loads in the browser with every module from this origin, nothing refused', async () => {
      const scripts: { url: string; bytes: number }[] = [];
      page.on('response', async (r) => {
        if (r.request().resourceType() === 'script')
          scripts.push({ url: r.url(), bytes: Number((await r.headerValue('content-length')) ?? 0) });
      });
      await open('/signin');
      await page.waitForLoadState('networkidle');
      page.removeAllListeners('response');
      assert.ok(scripts.length >= 5, JSON.stringify(scripts));
      assert.ok(scripts.every((s) => s.url.startsWith(`${hub.url}/console/`)));
      const total = scripts.reduce((n, s) => n + s.bytes, 0);
      assert.ok(total > 0 && total <= FIRST_LOAD_BUDGET, `${total} bytes over the wire`);
    });
  });

  describe("the README's first steps", () => {
    let deviceId = '';

    it('signs up, sends the verification email and verifies through the emailed link', async () => {
      await open('/signup');
      await assertAccessible(page, 'sign up');
      await page.getByLabel('Email').fill(email);
      await page.getByLabel('Nick', { exact: false }).fill(nick);
      await page.getByLabel('Password').fill(password);
      const started = Date.now() - 1;
      await page.getByRole('button', { name: 'Sign up' }).click();
      await page.getByRole('heading', { name: 'Verify your email' }).waitFor();
      await page.getByRole('button', { name: 'Send the verification email' }).click();
      await page.getByRole('heading', { name: 'Check your email' }).waitFor();
      const mail = await readMail(hub, email, /Verify/, started);
      const link = /(http\S+\/auth\/verify\?token=\S+)/.exec(mail.text)![1]!;
      await open('/verify');
      await assertAccessible(page, 'verify');
      await page.getByLabel(/link of the verification email/).fill(link);
      await page.getByRole('button', { name: 'Verify' }).click();
      await page.getByText('Your account is active').waitFor();
    });

    it('signs in and out', async () => {
      await open('/signin');
      await assertAccessible(page, 'sign in');
      await page.getByLabel('Nick or email').fill(nick);
      await page.getByLabel('Password').fill('wrong password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('alert').waitFor();
      await page.getByLabel('Password').fill(password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
      await page.getByRole('button', { name: `Sign out ${nick}` }).click();
      await page.getByRole('heading', { name: 'Sign in' }).waitFor();
      await signIn(page, hub.url, nick, password);
    });

    it('creates a device, and shows its metadata change after the device PATCHes it', async () => {
      await open('/devices');
      await page.getByLabel('Nick (optional)').first().fill('kitchen-sensor');
      await page.getByRole('button', { name: 'Create device' }).click();
      const secret = await page.locator('[data-secret]').textContent();
      const link = page.getByRole('link', { name: 'kitchen-sensor' }).first();
      deviceId = decodeURIComponent((await link.getAttribute('href'))!.split('/').pop()!);
      await assertAccessible(page, 'devices');
      await page.getByRole('cell', { name: deviceId }).waitFor();

      await link.click();
      await page.getByRole('heading', { name: 'Device kitchen-sensor' }).waitFor();
      await assertAccessible(page, 'device');
      const device = await hub.call('GET', `/devices/${deviceId}`, {
        token: (await hub.call('POST', '/auth/login', { body: { username: nick, password } })).body.token,
      });
      const login = await hub.call('POST', '/auth/login', {
        body: { username: device.body.prn, password: secret },
      });
      assert.equal(login.status, 200, 'the secret the console showed logs the device in');
      const patched = await hub.call('PATCH', `/devices/${deviceId}/device-meta`, {
        token: login.body.token,
        body: { fw: '1.2.0' },
      });
      assert.equal(patched.status, 200);
      // The page polls: the new key shows without a reload.
      await page.getByTestId('device-meta').getByText('1.2.0').waitFor({ timeout: 15_000 });
    });

    it('edits the user metadata, finds the device and shows its trail steps', async () => {
      await open(`/devices/${deviceId}`);
      await page.getByRole('button', { name: 'Add key' }).click();
      await page.getByLabel('Key 1').fill('room');
      await page.getByLabel('Value 1').fill('kitchen');
      await page.getByRole('button', { name: 'Save user metadata' }).click();
      await page.getByText('Saved.').waitFor();
      const token = (await hub.call('POST', '/auth/login', { body: { username: nick, password } })).body
        .token;
      const read = await hub.call('GET', `/devices/${deviceId}`, { token });
      assert.deepEqual(read.body['user-meta'], { room: 'kitchen' });

      const step = await hub.call('POST', `/trails/${deviceId}/steps`, {
        token,
        body: { 'commit-msg': 'first rollout', state: {} },
      });
      assert.equal(step.status, 200, JSON.stringify(step.body));
      await page.getByRole('cell', { name: 'first rollout' }).waitFor({ timeout: 15_000 });

      await open('/devices');
      await page.getByLabel('Id, PRN or nick').fill('kitchen-sensor');
      await page.getByRole('button', { name: 'Find' }).click();
      await page.getByRole('heading', { name: 'Device kitchen-sensor' }).waitFor();
    });

    it('works in a narrow (phone) window, keyboard only', async () => {
      const phone = await browser.page({ width: 375, height: 740 });
      try {
        await phone.page.goto(`${hub.url}/console/#/signin`);
        await phone.page.locator('main h1').waitFor();
        // Keyboard: the heading has focus; tab to the fields, type, submit with Enter.
        await phone.page.keyboard.press('Tab');
        await phone.page.keyboard.type(nick);
        await phone.page.keyboard.press('Tab');
        await phone.page.keyboard.type(password);
        await phone.page.keyboard.press('Enter');
        await phone.page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
        await phone.page.getByRole('link', { name: 'kitchen-sensor' }).first().waitFor();
        const overflow = await phone.page.evaluate<number>(
          'document.documentElement.scrollWidth - document.documentElement.clientWidth',
        );
        assert.ok(overflow <= 0, `the page is ${overflow} px wider than the phone`);
        await assertAccessible(phone.page, 'devices (phone)');
      } finally {
        await phone.context.close();
      }
    });
  });

  describe('webhooks', () => {
    let subscription = '';

    it('creates a subscription to a local receiver, its secret shown once with a copy button', async () => {
      await open('/webhooks');
      await assertAccessible(page, 'webhooks (empty)');
      await page.getByRole('link', { name: 'New subscription' }).click();
      await page.getByRole('heading', { name: 'New subscription' }).waitFor();
      // The catalog's descriptions show beside each type.
      await page.getByText('device-reported metadata changed', { exact: false }).first().waitFor();
      await assertAccessible(page, 'new subscription');
      await page.getByLabel('Name').fill('ops receiver');
      await page.getByLabel('URL').fill(`${rx.url}/ok/console`);
      await page.getByRole('checkbox', { name: /device\.device_meta\.updated/ }).check();
      await page.getByRole('button', { name: 'Add header' }).click();
      await page.getByLabel('Header 1').fill('X-Team');
      await page.getByLabel('Header value 1').fill('ops');
      await page.getByLabel('Rate limit (deliveries per second)').fill('50');
      await page.getByRole('button', { name: 'Create subscription' }).click();
      const secret = (await page.locator('[data-secret]').textContent())!;
      assert.match(secret, /^whsec_/);
      await page.getByRole('button', { name: 'Copy signing secret' }).click();
      await page.getByText('Copied.').waitFor();
      assert.equal(await page.evaluate('navigator.clipboard.readText()'), secret);
      await page.getByRole('link', { name: 'Go to the subscription' }).click();
      await page.getByRole('heading', { name: 'Webhook ops receiver' }).waitFor();
      subscription = decodeURIComponent(new URL(page.url()).hash.split('/').pop()!);
      const read = await hub.call('GET', `/webhooks/${subscription}`, { token: await token() });
      assert.deepEqual(read.body.custom_headers, { 'X-Team': 'ops' });
      assert.equal(read.body.rate_limit, 50);
      assert.equal(read.body.secret, undefined, 'shown once: not on a read');
    });

    it('sends a test delivery, sees it in the log, opens it and replays it', async () => {
      await open(`/webhooks/${subscription}`);
      await page.getByRole('button', { name: 'Send a test' }).click();
      await rx.waitFor('/ok/console', 1, 30_000);
      const row = page.getByRole('row').filter({ hasText: 'test' }).first();
      await row.getByText('succeeded').waitFor({ timeout: 15_000 });
      await assertAccessible(page, 'webhook');
      await row.getByRole('link').first().click();
      await page.getByRole('heading', { name: /^Attempt del_/ }).waitFor();
      await page.getByTestId('response').getByText('200').first().waitFor();
      await page.getByText('X-Team').first().waitFor(); // the request's custom header, as sent
      await assertAccessible(page, 'attempt');
      await page.getByRole('button', { name: 'Replay' }).click();
      await page.getByText('Replayed as a new job').waitFor();
      await rx.waitFor('/ok/console', 2, 30_000);
      await page.getByRole('link', { name: 'delivery log' }).click();
      await page
        .getByRole('row')
        .filter({ hasText: 'replay' })
        .first()
        .getByText('succeeded')
        .waitFor({ timeout: 15_000 });
    });

    it("shows a failed attempt's response, filtered by status", async () => {
      await open(`/webhooks/${subscription}/edit`);
      await page.getByLabel('URL').fill(`${rx.url}/status/410`);
      await page.getByRole('button', { name: 'Save subscription' }).click();
      await page.getByRole('heading', { name: 'Webhook ops receiver' }).waitFor();
      await page.getByRole('button', { name: 'Send a test' }).click();
      await rx.waitFor('/status/410', 1, 30_000);
      await page.getByLabel('Status').selectOption('failed');
      // The filtered page replaces the whole log: no succeeded attempt stays.
      await page.getByRole('row').filter({ hasText: 'succeeded' }).first().waitFor({ state: 'detached' });
      const row = page.getByRole('row').filter({ hasText: 'dead-lettered' }).first();
      await row.waitFor({ timeout: 15_000 });
      assert.equal(
        await page
          .getByRole('row')
          .filter({ hasText: /succeeded/ })
          .count(),
        0,
      );
      await row.getByRole('link').first().click();
      const response = page.getByTestId('response');
      await response.getByText('Status 410').waitFor();
      await response.getByText('answer xx').waitFor(); // the receiver's body, as recorded
    });

    it("lists the account's event log with filters, an event's deliveries, and redelivers it", async () => {
      const t = await token();
      const devices = await hub.call('GET', '/devices', { token: t });
      const prn = devices.body.items[0].prn;
      await open('/events');
      await assertAccessible(page, 'event log');
      await page.getByLabel('Type').selectOption('device.device_meta.updated');
      await page.getByLabel('Device PRN').fill(prn);
      await page.getByRole('button', { name: 'Apply filters' }).click();
      await page
        .getByRole('row')
        .filter({ hasText: 'device.created' })
        .first()
        .waitFor({ state: 'detached' });
      const rows = page.getByRole('row').filter({ hasText: 'device.device_meta.updated' });
      await rows.first().waitFor();
      assert.equal(await page.getByRole('row').filter({ hasText: 'device.created' }).count(), 0);
      await page.getByLabel('Since').fill('2000-01-01T00:00');
      await page.getByLabel('Until').fill('2000-01-02T00:00');
      await page.getByRole('button', { name: 'Apply filters' }).click();
      await page.getByText('No events.').waitFor();
      await page.getByRole('button', { name: 'Clear' }).click();
      await page.getByRole('row').filter({ hasText: 'device.created' }).first().waitFor();

      // A change now reaches the (410) subscription: the event's page shows that delivery.
      const login = await hub.call('POST', '/auth/login', {
        body: { username: prn, password: await deviceSecret(t, devices.body.items[0].id) },
      });
      await hub.call('PATCH', `/devices/${devices.body.items[0].id}/device-meta`, {
        token: login.body.token,
        body: { fw: '1.3.0' },
      });
      await rx.waitFor('/status/410', 2, 30_000);
      const metaRows = page.getByRole('row').filter({ hasText: 'device.device_meta.updated' });
      for (let i = 0; (await metaRows.count()) < 2; i++) {
        assert.ok(i < 50, 'the new event shows in the log');
        await page.getByRole('button', { name: 'Refresh' }).click();
        await page.waitForTimeout(100);
      }
      await metaRows.first().getByRole('link').click();
      await page.getByRole('heading', { name: /^Event evt_/ }).waitFor();
      await page.getByRole('row').filter({ hasText: 'dead-lettered' }).first().waitFor({ timeout: 15_000 });
      await assertAccessible(page, 'event');
      await page.getByRole('button', { name: /Redeliver/ }).click();
      await page.getByText('1 delivery queued.').waitFor();
      await rx.waitFor('/status/410', 3, 30_000);
      await page.getByRole('row').filter({ hasText: 'redeliver' }).first().waitFor({ timeout: 15_000 });
    });
  });

  describe('account', () => {
    it('saves the profile, creates a confidential app with its secret shown once, edits and deletes it', async () => {
      await open('/account');
      await page.getByLabel('Full name').waitFor();
      await assertAccessible(page, 'account');
      await page.getByLabel('Full name').fill('Ada Lovelace');
      await page.getByLabel('Company').fill('Analytical Engines');
      await page.getByRole('button', { name: 'Save profile' }).click();
      await page.getByText('Profile saved.').waitFor();
      const profile = await hub.call('GET', '/profiles/', { token: await token() });
      assert.equal(profile.body.fullName, 'Ada Lovelace');
      assert.equal(profile.body.company, 'Analytical Engines');
      // The token's claims show its scopes.
      await page
        .getByText(/prn:::accounts:\//)
        .first()
        .waitFor();

      await page.getByRole('button', { name: 'New app' }).click();
      await page.getByLabel('App nick').fill('dashboard');
      await page.getByLabel('App name').fill('Fleet dashboard');
      await page.getByLabel('App type').selectOption('confidential');
      await page.getByLabel('Redirect URIs (one a line)').fill('https://dash.example.com/callback');
      await page.getByLabel('Scopes', { exact: true }).fill('devices.read');
      await page.getByRole('button', { name: 'Create app' }).click();
      assert.ok((await page.locator('[data-secret]').textContent())!.length >= 16);
      await page.getByRole('cell', { name: 'https://dash.example.com/callback' }).waitFor();
      await assertAccessible(page, 'account with an app');
      await page.getByRole('button', { name: 'Close' }).click();
      await page.getByRole('button', { name: 'Edit dashboard' }).click();
      await page
        .getByLabel('Redirect URIs (one a line)')
        .fill('https://dash.example.com/callback\nhttps://dash.example.com/other');
      await page.getByRole('button', { name: 'Save app' }).click();
      await page.getByRole('cell', { name: /dash\.example\.com\/other/ }).waitFor();
      const apps = await hub.call('GET', '/apps', { token: await token() });
      assert.deepEqual(apps.body.items[0].redirect_uris, [
        'https://dash.example.com/callback',
        'https://dash.example.com/other',
      ]);
      assert.equal(apps.body.items[0].secret, undefined);
      await page.getByRole('button', { name: 'Delete dashboard' }).click();
      await page.getByRole('button', { name: 'Yes, delete' }).click();
      await page.getByText('No apps.').waitFor();
    });
  });

  describe('operators', () => {
    let admin: Page;
    before(async () => {
      await signup(hub, 'root');
      ({ page: admin } = await browser.page());
      await signIn(admin, hub.url, 'root', 'pw-root-secret');
      await admin.getByRole('link', { name: 'Operators' }).click();
      await admin.getByRole('heading', { name: 'Operators', level: 1 }).waitFor();
    });

    it('is offered to admins only', async () => {
      await open('/devices');
      assert.equal(await page.getByRole('link', { name: 'Operators' }).count(), 0);
      await open('/operators');
      await page.getByText('This page is for the hub’s admins').waitFor();
    });

    it("lists every account, and shows the projections' status as the hub answers it", async () => {
      await admin.getByRole('cell', { name: email }).waitFor();
      await admin.getByRole('cell', { name: 'root@example.com' }).waitFor();
      const projections = admin.getByRole('table', { name: 'Projection status' });
      await projections.getByRole('row').nth(1).waitFor();
      await assertAccessible(admin, 'operators');
    });

    it('replays a projection from the console with its progress shown live', async () => {
      const first = admin.getByRole('table', { name: 'Projection status' }).getByRole('row').nth(1);
      const name = (await first.getByRole('cell').first().textContent())!;
      await first.getByRole('button', { name: `Replay ${name}` }).click();
      await admin.getByRole('button', { name: 'Start the replay' }).click();
      await admin.getByText(`Replayed: ${name} now reads from generation`).waitFor({ timeout: 60_000 });
      assert.equal(await admin.getByRole('alert').count(), 0);
    });
  });
});

async function rawGet(
  url: string,
  encoding: string,
  etag?: string,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }> {
  const { get } = await import('node:http');
  return new Promise((resolve, reject) => {
    get(
      url,
      { headers: { 'accept-encoding': encoding, ...(etag ? { 'if-none-match': etag } : {}) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }),
        );
      },
    ).on('error', reject);
  });
}
