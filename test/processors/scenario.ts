// Real API calls that make every one of the nine webhook event types, shared by the derivation
// tests of both profiles, and a wait for the account's event log to show them.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { type Bus, TOPICS } from '../../infra/bus/port.ts';
import { jobId, TIME_LED_IDS_FROM } from '../../processors/stream/derive.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { WEBHOOK_EVENTS } from '../../schemas/webhook-events.ts';
import type { TestHub, User } from '../hub.ts';

// biome-ignore lint/suspicious/noExplicitAny: events as the API answers them
type LoggedEvent = Record<string, any>;

export interface Scenario {
  device: { id: string; prn: string };
  /** The event types the calls should derive, in order. */
  expected: string[];
}

export async function everyEventType(hub: TestHub, owner: User): Promise<Scenario> {
  const ok = async (method: string, path: string, body?: unknown, token = owner.token) => {
    const r = await hub.call(method, path, { token, body });
    assert.ok(r.status < 300, `${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const d = await ok('POST', '/devices', { 'device-meta': { fw: '1.0' } });
  const login = await ok('POST', '/auth/login', { username: d.prn, password: d.secret });
  const deviceToken = login.token as string;
  await ok('PATCH', `/devices/${d.id}`, { nick: `renamed-${d.id.slice(-6)}` });
  await ok('PUT', `/devices/${d.id}/public`);
  await ok('PATCH', `/devices/${d.id}/device-meta`, { temp: '21', fw: null }, deviceToken);
  await ok('PATCH', `/devices/${d.id}/device-meta`, { temp: '21' }, deviceToken); // no change: no event
  await ok('PUT', `/devices/${d.id}/user-meta`, { site: 'lab' });
  await ok('POST', `/trails/${d.id}/steps`, { state: { os: 'v1' }, 'commit-msg': 'first' });
  await ok('PUT', `/trails/${d.id}/steps/0/progress`, { progress: 40, status: 'STARTED' }, deviceToken);
  await ok('PUT', `/trails/${d.id}/steps/0/progress`, { progress: 40, status: 'DONE' }, deviceToken);
  await ok('DELETE', `/devices/${d.id}/public`);
  await ok('DELETE', `/devices/${d.id}`);
  return {
    device: { id: d.id, prn: d.prn },
    expected: [
      'device.created',
      'device.updated',
      'device.public.toggled',
      'device.device_meta.updated',
      'device.user_meta.updated',
      'step.created',
      'step.progress.changed',
      'step.status.changed',
      'step.status.changed',
      'device.public.toggled',
      'device.deleted',
    ],
  };
}

/** What both profiles must show: the types in order, the envelope, and the data of each kind. */
export function assertDerived(log: LoggedEvent[], scenario: Scenario, owner: User): void {
  assert.deepEqual(
    log.map((e) => e.type),
    scenario.expected,
  );
  for (const e of log) {
    assert.match(e.id, /^evt_[0-9a-f]{32}$/);
    assert.match(e.api_version, /^\d{4}-\d\d-\d\d$/);
    assert.equal(e.owner, owner.prn);
    assert.equal(e.resource_prn, scenario.device.prn);
    assert.equal(e.livemode, true);
    assert.ok(Number.isInteger(e.created) && Math.abs(e.created - Date.now() / 1000) < 120);
    assert.equal('source_position' in e, false);
  }
  assert.deepEqual(
    log.filter((e) => e.type === 'step.status.changed').map((e) => e.data),
    [
      { rev: 0, status: 'STARTED', prev_status: 'NEW' },
      { rev: 0, status: 'DONE', prev_status: 'STARTED' },
    ],
  );
  const meta = log.find((e) => e.type === 'device.device_meta.updated')!.data;
  assert.deepEqual(meta, {
    device: scenario.device.prn,
    keys: ['fw', 'temp'],
    changed: { temp: '21' },
    removed: ['fw'],
    device_meta: { temp: '21' },
  });
  assert.deepEqual(
    log.filter((e) => e.type === 'device.public.toggled').map((e) => e.data.public),
    [true, false],
  );
}

/** The device's events from the log, oldest first, once there are at least `count`. */
export async function logOf(
  hub: TestHub,
  owner: User,
  prn: string,
  count: number,
  timeoutMs = 20_000,
): Promise<LoggedEvent[]> {
  const deadline = Date.now() + timeoutMs;
  let items: LoggedEvent[] = [];
  while (Date.now() < deadline) {
    const r = await hub.call('GET', `/webhooks/events?resource_prn=${encodeURIComponent(prn)}&limit=500`, {
      token: owner.token,
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    items = r.body.items;
    if (items.length >= count) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // Newest first, by `created` (seconds): the stable order of one device is its derivation order,
  // which the step-by-step data shows; sort by the log's position within a second.
  return items.reverse();
}

/** A subscription of `owner`, made through the API (the hub must allow loopback URLs). */
export async function subscribe(
  hub: TestHub,
  owner: User,
  filter: { event_types: string[]; device_meta_keys?: string[]; devices?: string[] },
  url = 'http://127.0.0.1:9/hook',
): Promise<string> {
  const r = await hub.call('POST', '/webhooks/', {
    token: owner.token,
    body: { nick: 'test', url, enabled: true, ...filter },
  });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.id;
}

/** The delivery jobs of one subscription on the deliveries topic, once there are `count`. */
export async function jobsOf(
  bus: Bus,
  subscription: string,
  count: number,
  timeoutMs = 20_000,
): Promise<LoggedEvent[]> {
  const registry = SchemaRegistry.load();
  const jobs: LoggedEvent[] = [];
  let done: () => void = () => {};
  const enough = new Promise<void>((resolve) => {
    done = resolve;
  });
  const consumer = await bus.consume({
    group: `test-${randomBytes(4).toString('hex')}`,
    topic: TOPICS.deliveries,
    handle: async (messages) => {
      for (const m of messages) {
        if (m.key !== subscription) continue;
        jobs.push(registry.decode('DeliveryJob', 1, m.value) as LoggedEvent);
      }
      if (jobs.length >= count) done();
    },
  });
  const timeout = setTimeout(done, timeoutMs);
  await enough;
  clearTimeout(timeout);
  await consumer.stop();
  return jobs;
}

/** Jobs for the scenario's status changes and its one `temp` metadata change, one per event. */
export function assertJobs(jobs: LoggedEvent[], log: LoggedEvent[], subscription: string): void {
  const wanted = log.filter(
    (e) =>
      e.type === 'step.status.changed' ||
      (e.type === 'device.device_meta.updated' && e.data.keys.includes('temp')),
  );
  assert.equal(wanted.length, 3);
  assert.deepEqual(jobs.map((j) => j.event.id).sort(), wanted.map((e) => e.id).sort());
  for (const j of jobs) {
    assert.equal(j.subscription_id, subscription);
    // From the cut-over on, the change's stored time (ms) leads the id. A job read back from the
    // delivery log has no such field: its id gives the ms, checked against the log's second.
    const created = log.find((e) => e.id === j.event.id)!.created as number;
    const timeLed = created * 1000 >= TIME_LED_IDS_FROM;
    const ms = j.event.created_ms ?? (timeLed ? Number.parseInt(j.job_id.slice(4, 16), 16) : 0);
    assert.equal(j.job_id, jobId(j.event.id, subscription, ms));
    if (timeLed) assert.equal(Math.floor(ms / 1000), created);
    assert.equal(j.kind, 'event');
    assert.equal(j.attempt, 1);
    assert.deepEqual(JSON.parse(j.event.data), log.find((e) => e.id === j.event.id)!.data);
  }
}

/** A validator of each event type's `data`, by type, from the catalogue's schemas (strict: a
 * schema with a keyword ajv does not know, or a `required` field it does not describe, throws). */
export function dataValidators(): Record<string, ValidateFunction> {
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  (addFormats as unknown as (a: Ajv2020) => void)(ajv);
  return Object.fromEntries(Object.entries(WEBHOOK_EVENTS).map(([type, e]) => [type, ajv.compile(e.schema)]));
}

/** Each event's `data` is of its type's schema; the failures, one line each. */
export function schemaFailures(events: LoggedEvent[], validators = dataValidators()): string[] {
  const failures: string[] = [];
  for (const e of events) {
    const validate = validators[e.type];
    if (!validate) failures.push(`${e.id}: ${e.type} is not in the catalogue`);
    else if (!validate(e.data))
      failures.push(`${e.id} ${e.type}: ${JSON.stringify(e.data)}: ${JSON.stringify(validate.errors)}`);
  }
  return failures;
}
