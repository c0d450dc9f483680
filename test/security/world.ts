// A small world for the security tests: an embedded hub, an admin, two users, a service, and one
// of every resource of the first user (devices, a step, an app, a webhook with an event and a
// delivery), plus every secret handed out, for the leak checks.
import assert from 'node:assert/strict';
import { delegated, serviceAccount, signup, startHub, type TestHub, type User } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';

export interface Device {
  id: string;
  prn: string;
  secret: string;
  token: string;
}

export interface World {
  hub: TestHub;
  rx: Receiver;
  root: User;
  alice: User;
  bob: User;
  svc: User;
  /** Alice's devices: d1 logs in (its token is "a device of the first"), d2 is the one attacked. */
  d1: Device;
  d2: Device;
  /** Alice's token delegated to the service with read-only scopes: too few for any write. */
  readOnly: string;
  ids: {
    app: string;
    webhook: string;
    event: string;
    delivery: string;
    recovery: string;
    rev: string;
    bobWebhook: string;
  };
  /** Passwords, device secrets, webhook signing secrets, refresh tokens: never in a log line. */
  secrets: string[];
  stop(): Promise<void>;
}

// biome-ignore lint/suspicious/noExplicitAny: JSON Schema as found in the document
export type Schema = any;

/** An operation of the served /openapi.json: what the security tests aim at. */
export interface Operation {
  method: string;
  path: string;
  bearer: boolean;
  basic: boolean;
  /** The scopes the document publishes for it, of which a token needs one. */
  scopes: string[];
  /** The JSON request body's schema, when it takes one. */
  body?: Schema;
}

/** Every operation the hub documents in /openapi.json. */
export async function documentedOperations(w: World): Promise<Operation[]> {
  const doc = await w.hub.call('GET', '/openapi.json');
  const out: Operation[] = [];
  for (const [path, ops] of Object.entries(doc.body.paths as Record<string, Record<string, Schema>>))
    for (const [method, op] of Object.entries(ops)) {
      const security = (op.security ?? []) as object[];
      out.push({
        method: method.toUpperCase(),
        path,
        bearer: security.some((s) => 'bearer' in s),
        basic: security.some((s) => 'basic' in s),
        scopes: security.flatMap((s) => (s as { bearer?: string[] }).bearer ?? []),
        body: op.requestBody?.content?.['application/json']?.schema,
      });
    }
  return out;
}

const SA_SECRET = 'sa-admin-secret-for-the-security-tests';
export const saBasic = (password = SA_SECRET) => ({
  authorization: `Basic ${Buffer.from(`saadmin:${password}`).toString('base64')}`,
});

async function device(hub: TestHub, owner: User): Promise<Device> {
  const r = await hub.call('POST', '/devices', { token: owner.token, body: {} });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const login = await hub.call('POST', '/auth/login', {
    body: { username: r.body.prn, password: r.body.secret },
  });
  assert.equal(login.status, 200, JSON.stringify(login.body));
  return { id: r.body.id, prn: r.body.prn, secret: r.body.secret, token: login.body.token };
}

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const found = await probe();
    if (found !== undefined) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function buildWorld(env: Record<string, string> = {}): Promise<World> {
  const rx = await new Receiver().start();
  const hub = await startHub({
    HUB_SA_ADMIN_SECRET: SA_SECRET,
    HUB_WEBHOOK_ALLOW_HTTP: 'true',
    HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
    HUB_RATE_LIMIT_PER_SECOND: '0',
    ...env,
  });
  const root = await signup(hub, 'root');
  const alice = await signup(hub, 'alice');
  const bob = await signup(hub, 'bob');
  const svc = await serviceAccount(hub, root.token, 'reporting');
  const d1 = await device(hub, alice);
  const d2 = await device(hub, alice);

  const readOnly = await delegated(
    hub,
    alice,
    svc,
    'devices.readonly profiles.readonly apps.readonly webhooks.readonly',
  );

  const app = await hub.call('POST', '/apps', {
    token: alice.token,
    body: { nick: 'alice-app', name: 'Alice app' },
  });
  assert.equal(app.status, 200, JSON.stringify(app.body));
  const webhook = async (user: User) => {
    const r = await hub.call('POST', '/webhooks/', {
      token: user.token,
      body: {
        nick: `${user.nick}-hook`,
        url: `${rx.url}/${user.nick}`,
        event_types: ['device.device_meta.updated'],
        enabled: true,
      },
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    return r.body as { id: string; secret: string };
  };
  const aliceHook = await webhook(alice);
  const bobHook = await webhook(bob);
  const step = await hub.call('POST', `/trails/${d2.id}/steps`, {
    token: alice.token,
    body: { rev: 0, state: { '#spec': 'pantavisor-service-system@1' }, 'commit-msg': 'first' },
  });
  assert.equal(step.status, 200, JSON.stringify(step.body));
  const meta = await hub.call('PATCH', `/devices/${d2.id}/device-meta`, {
    token: d2.token,
    body: { fw: '1.0' },
  });
  assert.equal(meta.status, 200, JSON.stringify(meta.body));
  const event = await until('the device-meta event', async () => {
    const r = await hub.call('GET', '/webhooks/events', { token: alice.token });
    return r.body.items?.find((e: { type: string }) => e.type === 'device.device_meta.updated')?.id as string;
  });
  const delivery = await until('its delivery', async () => {
    const r = await hub.call('GET', `/webhooks/${aliceHook.id}/deliveries`, { token: alice.token });
    return r.body.items?.[0]?.id as string | undefined;
  });
  const recovery = await hub.call('POST', `/webhooks/${aliceHook.id}/recover`, {
    token: alice.token,
    body: { since: new Date(Date.now() - 3_600_000).toISOString() },
  });
  assert.equal(recovery.status, 202, JSON.stringify(recovery.body));

  return {
    hub,
    rx,
    root,
    alice,
    bob,
    svc,
    d1,
    d2,
    readOnly,
    ids: {
      app: app.body.id,
      webhook: aliceHook.id,
      event,
      delivery,
      recovery: recovery.body.id,
      rev: '0',
      bobWebhook: bobHook.id,
    },
    secrets: [
      ...[root, alice, bob, svc].flatMap((u) => [u.password, u.refresh]),
      d1.secret,
      d2.secret,
      aliceHook.secret,
      bobHook.secret,
      SA_SECRET,
    ],
    stop: async () => {
      await hub.stop();
      await rx.stop();
    },
  };
}
