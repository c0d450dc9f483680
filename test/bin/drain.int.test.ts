// Graceful shutdown of every role, each its own process on the real PostgreSQL, Redis and Kafka:
// under a steady load of device-meta writes, each role in turn gets SIGTERM, must exit 0 within
// HUB_SHUTDOWN_TIMEOUT_MS, and is started again. Afterwards every accepted write has exactly one
// event in the account's log, and the receiver got every one of those events (duplicates only
// with the same event id).
import assert from 'node:assert/strict';
import {
  audit,
  type Cluster,
  endProcess,
  fleet,
  startCluster,
  steadyLoad,
  subscribe,
} from '../faults/cluster.ts';
import { signup } from '../hub.ts';
import { Receiver } from '../webhooks/receiver.ts';

const SHUTDOWN_BOUND_MS = 15_000;
const RATE = 80; // writes per second, across the devices

describe('graceful shutdown of every role under load (int)', function () {
  this.timeout(180_000);
  let rx: Receiver;
  let cluster: Cluster;

  before(async () => {
    rx = await new Receiver().start();
    cluster = await startCluster('drain', 12, { HUB_SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_BOUND_MS) });
  });
  after(async () => {
    await cluster?.stop();
    await rx?.stop();
  });

  it('SIGTERM drains each role with exit 0; every accepted write is delivered after the restarts', async () => {
    const { hub } = cluster;
    const alice = await signup(hub, `drain${Date.now().toString(36)}`);
    await subscribe(hub, alice, `${rx.url}/ok/drain`);
    const devices = await fleet(hub, alice, 8);
    const load = steadyLoad(cluster.api, devices, RATE);

    // Each role in turn: SIGTERM mid-load, a clean exit within the bound, a new process.
    const drains: Record<string, { code: number | null; ms: number }> = {};
    for (const role of ['processor', 'dispatcher', 'projector', 'api'] as const) {
      await new Promise((r) => setTimeout(r, 1500));
      const before = load.accepted.size;
      drains[role] = await endProcess(cluster.roles.get(role)!.child, 'SIGTERM');
      await cluster.restart(role);
      await load.acceptingAgain(before, `${role} restarted`);
    }
    await new Promise((r) => setTimeout(r, 1500));
    await load.stop();
    for (const [role, d] of Object.entries(drains)) {
      assert.equal(
        d.code,
        0,
        `${role} exits 0 on SIGTERM: ${cluster.roles
          .get(role as 'api')!
          .output()
          .slice(-1500)}`,
      );
      assert.ok(d.ms < SHUTDOWN_BOUND_MS, `${role} drained in ${d.ms} ms`);
    }
    assert.ok(load.accepted.size > RATE * 5, `${load.accepted.size} writes accepted of ${load.sent()}`);

    // Every role serves its own metrics.
    const ownMetric = {
      api: 'hub_http_request_duration_seconds_count',
      projector: 'hub_projection_events_applied_total',
      processor: 'hub_processor_changes_total',
      dispatcher: 'hub_webhook_attempts_total',
    } as const;
    for (const [role, metric] of Object.entries(ownMetric)) {
      const r = await fetch(`${cluster.roles.get(role as keyof typeof ownMetric)!.url}/metrics`);
      assert.equal(r.status, 200, `${role} serves /metrics`);
      assert.match(await r.text(), new RegExp(`^${metric}`, 'm'), `${role} exposes ${metric}`);
    }

    // Every accepted write reaches the receiver, by event id.
    const figures = await audit(hub, alice, load.accepted, rx, ['/ok/drain']);
    process.stderr.write(
      `drain: ${JSON.stringify(drains)} ${JSON.stringify(figures)} refused ${load.refused()}\n`,
    );
  });
});
