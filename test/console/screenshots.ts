// Refreshes the console's screenshots in docs/console/ (PNG): a hub of its own with an account, a
// device that reported metadata and has a step under way, a webhook with a delivered test and a
// failed one, then each main page in Chromium. Run: `node test/console/screenshots.ts`.
import { mkdirSync } from 'node:fs';
import type { Page } from 'playwright-core';
import { createDevice, signup, startHub } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';
import { launchBrowser, signIn } from './browser.ts';

const OUT = new URL('../../docs/console/', import.meta.url).pathname;
mkdirSync(OUT, { recursive: true });

const rx = await new Receiver().start();
const hub = await startHub({ HUB_WEBHOOK_ALLOW_HTTP: 'true', HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8' });
const browser = await launchBrowser();
try {
  await signup(hub, 'root');
  const ada = await signup(hub, 'ada', 'a long secret');
  const call = (method: string, path: string, body?: unknown, token = ada.token) =>
    hub.call(method, path, { token, body });
  const device = await createDevice(hub, ada, { nick: 'kitchen-sensor', 'user-meta': { room: 'kitchen' } });
  await createDevice(hub, ada, { nick: 'garage-door' });
  await createDevice(hub, ada, { nick: 'porch-light' });
  await call(
    'PATCH',
    `/devices/${device.id}/device-meta`,
    { fw: '1.2.0', temp: '21.5', uptime: '86400' },
    device.token,
  );
  await call('POST', `/trails/${device.id}/steps`, { 'commit-msg': 'fw 1.2.0 rollout', state: {} });
  await call(
    'PUT',
    `/trails/${device.id}/steps/0/progress`,
    { progress: 60, status: 'STARTED' },
    device.token,
  );
  const ok = await call('POST', '/webhooks/', {
    nick: 'ops receiver',
    url: `${rx.url}/ok/ops`,
    event_types: ['device.device_meta.updated', 'step.status.changed'],
    enabled: true,
    custom_headers: { 'X-Team': 'ops' },
  });
  const failing = await call('POST', '/webhooks/', {
    nick: 'legacy endpoint',
    url: `${rx.url}/status/410`,
    event_types: ['device.created'],
    enabled: true,
  });
  await call('POST', `/webhooks/${ok.body.id}/test`);
  await call('POST', `/webhooks/${failing.body.id}/test`);
  await rx.waitFor('/ok/ops', 1);
  await rx.waitFor('/status/410', 1);
  await new Promise((r) => setTimeout(r, 500)); // the attempts' records

  const shoot = async (page: Page, hash: string, file: string, ready: (p: Page) => Promise<unknown>) => {
    await page.goto(`${hub.url}/console/#${hash}`);
    await ready(page);
    await page.evaluate('document.activeElement && document.activeElement.blur()');
    await page.screenshot({ path: `${OUT}${file}`, fullPage: true });
    console.log(`docs/console/${file}`);
  };

  const { page } = await browser.page({ width: 1200, height: 800 });
  await shoot(page, '/signin', 'signin.png', (p) => p.getByLabel('Nick or email').waitFor());
  await signIn(page, hub.url, 'ada', 'a long secret');
  await shoot(page, '/devices', 'devices.png', (p) => p.getByRole('link', { name: 'porch-light' }).waitFor());
  await shoot(page, `/devices/${device.id}`, 'device.png', (p) => p.getByText('fw 1.2.0 rollout').waitFor());
  await shoot(page, '/webhooks', 'webhooks.png', (p) =>
    p.getByRole('link', { name: 'legacy endpoint' }).waitFor(),
  );
  await shoot(page, `/webhooks/${ok.body.id}`, 'webhook.png', (p) =>
    p.getByRole('row').filter({ hasText: 'test' }).first().waitFor(),
  );
  const attempts = await call('GET', `/webhooks/${failing.body.id}/deliveries`);
  await shoot(
    page,
    `/webhooks/${failing.body.id}/deliveries/${attempts.body.items[0].id}`,
    'attempt.png',
    (p) => p.getByText('Status 410').waitFor(),
  );
  await shoot(page, '/webhooks/new', 'webhook-new.png', (p) =>
    p.getByText('device.user_meta.updated').waitFor(),
  );
  await shoot(page, '/events', 'events.png', (p) => p.getByRole('row').nth(1).waitFor());
  await shoot(page, '/account', 'account.png', (p) => p.getByLabel('Full name').waitFor());

  const phone = await browser.page({ width: 390, height: 844 });
  await signIn(phone.page, hub.url, 'ada', 'a long secret');
  await shoot(phone.page, `/devices/${device.id}`, 'device-phone.png', (p) =>
    p.getByText('fw 1.2.0 rollout').waitFor(),
  );

  const admin = await browser.page({ width: 1200, height: 800 });
  await signIn(admin.page, hub.url, 'root', 'pw-root-secret');
  await shoot(admin.page, '/operators', 'operators.png', (p) =>
    p.getByRole('cell', { name: 'ada@example.com' }).waitFor(),
  );
} finally {
  await browser.close();
  await hub.stop();
  await rx.stop();
}
process.exit(0);
