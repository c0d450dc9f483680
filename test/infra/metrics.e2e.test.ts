// Every metric of docs/metrics.md, read from the exposition after real traffic: an embedded hub
// (every role in one process) gets API calls that derive all nine event types, and deliveries
// that succeed, are retried and are dead-lettered; /metrics must then carry each documented
// metric with samples, document each hub_ metric it carries, and follow the naming conventions.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { signup, startHub, type TestHub } from '../hub.ts';
import { everyEventType } from '../processors/scenario.ts';
import { Receiver } from '../webhooks/receiver.ts';

const DOC = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8');

/** The metrics the document lists: every backticked hub_ name in a table's first column or text. */
function documented(): Set<string> {
  return new Set([...DOC.matchAll(/`(hub_[a-z0-9_]+)`/g)].map((m) => m[1]!));
}

interface Exposed {
  type: string;
  samples: { name: string; labels: string; value: number }[];
}

function parseExposition(text: string): Map<string, Exposed> {
  const metrics = new Map<string, Exposed>();
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) metrics.set(type[1]!, { type: type[2]!, samples: [] });
    const sample = /^([a-z_:][a-z0-9_:]*)(\{[^}]*\})? (\S+)$/i.exec(line);
    if (!sample) continue;
    const name = sample[1]!;
    const family =
      metrics.get(name) ?? metrics.get(name.replace(/_(bucket|sum|count|created)$/, '')) ?? undefined;
    family?.samples.push({ name, labels: sample[2] ?? '', value: Number(sample[3]) });
  }
  return metrics;
}

const total = (m: Exposed | undefined, suffix = '', labels = '') =>
  (m?.samples ?? [])
    .filter((s) => s.name.endsWith(suffix) && s.labels.includes(labels))
    .reduce((n, s) => n + s.value, 0);

describe('metrics (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let rx: Receiver;
  let exposed: Map<string, Exposed>;

  before(async () => {
    rx = await new Receiver().start();
    hub = await startHub({ HUB_WEBHOOK_ALLOW_HTTP: 'true', HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8' }, [
      'api',
      'projector',
      'processor',
      'dispatcher',
    ]);
    const alice = await signup(hub, `metrics${Date.now().toString(36)}`);
    const subscribe = async (path: string, retry_policy?: unknown) => {
      const r = await hub.call('POST', '/webhooks/', {
        token: alice.token,
        body: {
          nick: 'm',
          url: `${rx.url}${path}`,
          event_types: ['device.created'],
          enabled: true,
          retry_policy,
        },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    };
    await subscribe('/ok/metrics');
    await subscribe('/status/500/metrics', { max_attempts: 2, delays_s: [1] }); // a retry, then a dead letter
    await subscribe('/status/410/metrics'); // dead-lettered at once
    await everyEventType(hub, alice);
    await rx.waitFor('/status/500/metrics', 2, 20_000);
    await rx.waitFor('/ok/metrics', 1);
    await rx.waitFor('/status/410/metrics', 1);
    await new Promise((r) => setTimeout(r, 300)); // the last attempt recorded
    const r = await fetch(`${hub.url}/metrics`);
    assert.equal(r.status, 200);
    exposed = parseExposition(await r.text());
  });
  after(async () => {
    await hub?.stop();
    await rx?.stop();
  });

  it('carries every documented metric, with samples', () => {
    const missing = [...documented()].filter((name) => !exposed.has(name) && !exposed.has(`${name}_total`));
    assert.deepEqual(missing, [], 'documented in docs/metrics.md but not exposed');
    const ours = [...documented()].filter((n) => !/^hub_(process|nodejs)_/.test(n));
    const empty = ours.filter((name) => exposed.get(name)!.samples.length === 0);
    assert.deepEqual(empty, [], 'exposed without a sample after traffic');
  });

  it('documents every hub_ metric it exposes', () => {
    const names = documented();
    const undocumented = [...exposed.keys()].filter((n) => n.startsWith('hub_') && !names.has(n));
    assert.deepEqual(undocumented, [], 'exposed but missing from docs/metrics.md');
    assert.ok(
      [...exposed.keys()].every((n) => n.startsWith('hub_')),
      'every metric has the hub_ prefix',
    );
  });

  it('follows the conventions: _total counters, base units, bounded labels', () => {
    for (const [name, m] of exposed) {
      if (m.type === 'counter') assert.match(name, /_total$/, `${name}: a counter ends in _total`);
      assert.doesNotMatch(name, /_(ms|milliseconds|minutes|kb|mb)$/, `${name}: base units only`);
      for (const s of m.samples) {
        // Ids never become label values: no label carries a device, account or subscription id.
        assert.doesNotMatch(s.labels, /[0-9a-f]{24}|prn:|sub_|evt_|del_/, `${name}${s.labels}`);
      }
    }
  });

  it('counts the traffic it saw', () => {
    const http = exposed.get('hub_http_request_duration_seconds');
    assert.ok(total(http, '_count', 'device-meta') >= 2, 'device-meta requests by route');
    assert.ok(total(exposed.get('hub_eventstore_append_duration_seconds'), '_count', 'outcome="ok"') > 0);
    assert.ok(total(exposed.get('hub_projection_events_applied_total')) > 0);
    assert.ok(total(exposed.get('hub_relay_events_total')) > 0);
    for (const type of ['device.created', 'device.device_meta.updated', 'step.status.changed'])
      assert.ok(total(exposed.get('hub_processor_events_derived_total'), '', `type="${type}"`) > 0, type);
    assert.ok(total(exposed.get('hub_processor_delivery_jobs_total')) >= 3);
    const attempts = exposed.get('hub_webhook_attempts_total');
    assert.ok(total(attempts, '', 'outcome="2xx"') >= 1);
    assert.ok(total(attempts, '', 'outcome="5xx"') >= 2);
    assert.ok(total(attempts, '', 'outcome="4xx"') >= 1);
    assert.ok(total(exposed.get('hub_webhook_retries_scheduled_total')) >= 1);
    assert.ok(total(exposed.get('hub_webhook_dead_lettered_total')) >= 2);
    assert.ok(total(exposed.get('hub_webhook_delivery_latency_seconds'), '_count') >= 1);
  });
});
