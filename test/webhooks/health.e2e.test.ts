// Endpoint health end to end on the embedded profile, with a real receiver that goes down: the
// subscription's health shows it failing, the hub disables it once the (shortened) failure period
// is over and emails its owner, nothing more is sent, and PATCH {"enabled": true} brings it back
// (the reason cleared, the jobs it held delivered, health healthy again).
import assert from 'node:assert/strict';
import { readMail, signup, startHub, type TestHub, type User } from '../hub.ts';
import { Receiver } from './receiver.ts';

describe('webhooks: endpoint health (e2e)', function () {
  this.timeout(90_000);
  let hub: TestHub;
  let rx: Receiver;
  let alice: User;

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({
      HUB_WEBHOOK_ALLOW_HTTP: 'true',
      HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
      HUB_WEBHOOK_TIMEOUT_MS: '1000',
      HUB_WEBHOOK_DISABLE_AFTER_S: '3',
    });
    alice = await signup(hub, 'alice');
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  const read = async (id: string) => {
    const r = await hub.call('GET', `/webhooks/${id}`, { token: alice.token });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body;
  };
  const sendTest = async (id: string) => {
    const r = await hub.call('POST', `/webhooks/${id}/test`, { token: alice.token });
    assert.equal(r.status, 202, JSON.stringify(r.body));
  };
  const until = async <T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000) => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const seen = await probe();
      if (seen !== undefined) return seen;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  };

  it('an endpoint down past the failure period is disabled, its owner emailed; PATCH enabled brings it back', async () => {
    rx.behave('/down', 'fail');
    const created = await hub.call('POST', '/webhooks/', {
      token: alice.token,
      body: {
        nick: 'flaky receiver',
        url: `${rx.url}/down?token=kept-out-of-emails`,
        event_types: ['device.created'],
        enabled: true,
        retry_policy: { max_attempts: 20, delays_s: [1] },
      },
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const { id, secret } = created.body as { id: string; secret: string };
    assert.deepEqual(created.body.health, {
      circuit: 'closed',
      consecutive_failures: 0,
      failing_since: null,
      last_success_at: null,
      last_failure_at: null,
      next_probe_at: null,
    });
    assert.equal(created.body.disabled_reason, null);
    const started = Date.now() - 1;
    for (let i = 0; i < 6; i++) await sendTest(id);

    const failing = await until('failures in its health', async () => {
      const s = await read(id);
      return s.health.consecutive_failures >= 1 ? s : undefined;
    });
    assert.equal(failing.enabled, true);
    assert.ok(Date.parse(failing.health.failing_since) >= started);

    const disabled = await until('the hub to disable it', async () => {
      const s = await read(id);
      return s.enabled ? undefined : s;
    });
    assert.equal(disabled.disabled_reason, 'endpoint_failing');
    assert.equal(disabled.health.last_success_at, null);
    assert.ok(disabled.health.consecutive_failures >= 5, JSON.stringify(disabled.health));
    const failedFor = Date.parse(disabled.health.last_failure_at) - Date.parse(disabled.health.failing_since);
    assert.ok(failedFor < 3000 + 6000, `disabled within a probe of the period: ${failedFor} ms`);
    assert.ok(Date.parse(disabled['time-modified']) - Date.parse(disabled.health.failing_since) >= 3000);

    const mail = await readMail(
      hub,
      alice.email,
      /disabled your webhook subscription flaky receiver/,
      started,
    );
    assert.match(mail.text, new RegExp(id));
    assert.match(mail.text, /"enabled": true/);
    assert.ok(!mail.text.includes('kept-out-of-emails'), 'the URL without its query');
    assert.ok(!mail.text.includes(secret));

    // Deliveries stop: nothing reaches the receiver while it is disabled, the jobs wait.
    const sent = rx.at('/down').length;
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal(rx.at('/down').length, sent, 'nothing sent while disabled');

    rx.behave('/down', 'ok');
    const enabled = await hub.call('PATCH', `/webhooks/${id}`, {
      token: alice.token,
      body: { enabled: true },
    });
    assert.equal(enabled.status, 200, JSON.stringify(enabled.body));
    assert.equal(enabled.body.enabled, true);
    assert.equal(enabled.body.disabled_reason, null);
    assert.equal(enabled.body.health.circuit, 'half_open', 'enabled again: probed at once');
    await sendTest(id);
    // The jobs it held, then the new one: delivered (each test once; retries of one count once).
    const delivered = await until('deliveries to succeed again', async () => {
      const ok = rx.at('/down').filter((r) => r.status === 200);
      return new Set(ok.map((r) => JSON.parse(r.body).id)).size >= 7 ? ok : undefined;
    });
    assert.ok(delivered.length >= 7);
    const healthy = await read(id);
    assert.equal(healthy.health.circuit, 'closed');
    assert.equal(healthy.health.consecutive_failures, 0);
    assert.equal(healthy.health.failing_since, null);
    assert.ok(Date.parse(healthy.health.last_success_at) > Date.parse(disabled.health.last_failure_at));
  });
});
