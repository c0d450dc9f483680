// The pure parts of the stream processor: derivation of each event type, deterministic ids,
// replays skipped, matching, and the actor runtime's ordering and eviction.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { redacted } from '../../../processors/followers/relay.ts';
import { ActorRuntime, type ActorStates, MemoryActorStates } from '../../../processors/stream/actors.ts';
import {
  aggregateKey,
  type Change,
  type DeviceActor,
  derive,
  EVENT_TYPES,
  eventId,
  initialActor,
  jobId,
  TIME_LED_IDS_FROM,
  type WebhookEvent,
} from '../../../processors/stream/derive.ts';
import { matches, type SubscriptionFilter } from '../../../processors/stream/processor.ts';

const PRN = 'prn:::devices:/0123456789abcdef01234567';
const OWNER = 'prn:::accounts:/alice';
let position = 0;
// The data given in part where derivation reads no more of it.
const change = (type: string, data: Record<string, unknown>) =>
  ({
    id: `e${++position}`,
    type,
    stream: type.startsWith('Step') ? 'trail-0123456789abcdef01234567' : 'device-0123456789abcdef01234567',
    position,
    created: 1_800_000_000_123,
    data: { device_id: '0123456789abcdef01234567', owner_prn: OWNER, ...data },
  }) as unknown as Change;
const created = change('DeviceCreated', {
  prn: PRN,
  nick: 'sensor',
  owner_id: 'a1',
  owner_nick: 'alice',
  secret_sealed: 'x',
  challenge: 'c',
  user_meta: {},
  device_meta: { fw: '1.0' },
  certificate: null,
});

function run(changes: Change[], from = initialActor()): { state: DeviceActor; events: WebhookEvent[] } {
  let state = from;
  const events: WebhookEvent[] = [];
  for (const c of changes) {
    const r = derive(state, c);
    state = r.state;
    events.push(...r.events);
  }
  return { state, events };
}

describe('webhook event derivation (unit)', () => {
  it('derives each type from its change, with the envelope of the specification', () => {
    const { events } = run([
      created,
      change('DeviceRenamed', { nick: 'probe', previous_nick: 'sensor' }),
      change('DevicePublicSet', { public: true }),
      change('DeviceMetaUpdated', { changed: { temp: '20' }, removed: ['fw'] }),
      change('UserMetaReplaced', { meta: { site: 'lab' }, changed_keys: ['site'], removed_keys: [] }),
      change('StepPushed', { rev: 0, state: '{}', commit_msg: 'go', objects: [], public: true }),
      change('StepProgressReported', {
        rev: 0,
        progress: 10,
        status: 'STARTED',
        status_msg: '',
        prev_progress: 0,
        prev_status: 'NEW',
      }),
      change('DeviceMarkedGarbage', {}),
    ]);
    assert.deepEqual(
      events.map((e) => e.type),
      [
        'device.created',
        'device.updated',
        'device.public.toggled',
        'device.device_meta.updated',
        'device.user_meta.updated',
        'step.created',
        'step.progress.changed',
        'step.status.changed',
        'device.deleted',
      ],
    );
    assert.deepEqual(new Set(events.map((e) => e.type)), new Set(Object.keys(EVENT_TYPES)));
    for (const e of events) {
      assert.equal(e.owner, OWNER);
      assert.equal(e.resource_prn, PRN);
      assert.equal(e.created, 1_800_000_000);
      assert.equal(e.livemode, true);
      assert.match(e.api_version, /^\d{4}-\d\d-\d\d$/);
    }
    assert.deepEqual(events[7]!.data, { rev: 0, status: 'STARTED', prev_status: 'NEW' });
    assert.deepEqual(events[1]!.data, {
      device: PRN,
      changed: { nick: 'probe' },
      previous: { nick: 'sensor' },
    });
    assert.deepEqual(events[3]!.data, {
      device: PRN,
      keys: ['fw', 'temp'],
      changed: { temp: '20' },
      removed: ['fw'],
      device_meta: { temp: '20' },
    });
    assert.deepEqual(events[4]!.data.keys, ['site']);
  });

  it('ids are deterministic from the source event and the type, and differ between them', () => {
    const a = run([created]).events[0]!;
    const b = run([created]).events[0]!;
    assert.equal(a.id, b.id);
    assert.equal(a.id, eventId(created.id, 'device.created', created.created));
    assert.notEqual(eventId(created.id, 'device.updated', created.created), a.id);
    assert.notEqual(eventId('other', 'device.created', created.created), a.id);
  });

  it('ids of changes stored from the cut-over on lead with the stored time; earlier ones keep the hash', () => {
    const at = TIME_LED_IDS_FROM + 1000;
    const ids = Array.from({ length: 300 }, (_, i) => eventId(`c${i}`, 'device.device_meta.updated', at + i));
    for (const id of ids) assert.match(id, /^evt_[0-9a-f]{32}$/);
    assert.deepEqual([...ids].sort(), ids); // one a millisecond: sorted by time
    assert.equal(ids[0]!.slice(4, 16), at.toString(16).padStart(12, '0'));
    assert.equal(new Set(ids).size, ids.length);
    // Before the cut-over (and with no time given): the hash alone, as such ids always were.
    const before = eventId('c0', 'device.created', TIME_LED_IDS_FROM - 1);
    assert.equal(before, eventId('c0', 'device.created'));
    assert.equal(
      before,
      `evt_${createHash('sha256').update('c0\ndevice.created').digest('hex').slice(0, 32)}`,
    );
    // The change's id and type still tell events of one time apart.
    assert.notEqual(eventId('c0', 'device.created', at), eventId('c1', 'device.created', at));
    assert.notEqual(eventId('c0', 'device.created', at), eventId('c0', 'device.updated', at));
    // derive gives its events the change's stored time.
    const late = run([{ ...created, created: at }]).events[0]!;
    assert.equal(late.id, eventId(created.id, 'device.created', at));
  });

  it('a change at or below the last applied position derives nothing and changes nothing', () => {
    const once = run([created]);
    const again = derive(once.state, created);
    assert.deepEqual(again.events, []);
    assert.equal(again.state, once.state);
  });

  it('bookkeeping alone derives nothing; a flag set to its value and unchanged progress neither', () => {
    const { state } = run([created]);
    const { events } = run(
      [
        change('DevicePublicProcessed', {
          public: false,
          steps_marked_public: 0,
          steps_marked_non_public: 0,
        }),
        change('StepPublicitySet', { rev: 0, public: false, garbage: false }),
        change('DevicePublicSet', { public: false }),
        change('StepPushed', { rev: 1, state: '{}', commit_msg: '', objects: [], public: false }),
        change('StepProgressReported', {
          rev: 1,
          progress: 0,
          status: 'NEW',
          status_msg: 'same',
          prev_progress: 0,
          prev_status: 'NEW',
        }),
      ],
      state,
    );
    assert.deepEqual(
      events.map((e) => e.type),
      ['step.created'],
    );
  });

  it('device.deleted is the last event: a step pushed or reported in a race with the deletion tells nobody', () => {
    const { state, events } = run([
      created,
      change('StepPushed', { rev: 0, state: '{}', commit_msg: '', objects: [], public: false }),
      change('DeviceMarkedGarbage', { nick: 'sensor' }),
      change('StepPushed', { rev: 1, state: '{}', commit_msg: '', objects: [], public: false }),
      change('StepProgressReported', {
        rev: 0,
        progress: 5,
        status: 'STARTED',
        status_msg: '',
        prev_progress: 0,
        prev_status: 'NEW',
      }),
    ]);
    assert.deepEqual(
      events.map((e) => e.type),
      ['device.created', 'step.created', 'device.deleted'],
    );
    assert.equal(state.garbage, true);
  });

  it('an unowned device tells nobody; its claim is device.created for the new owner', () => {
    const unowned = change('DeviceCreated', { ...created.data, owner_prn: '', owner_id: '' });
    const { state, events } = run([unowned]);
    assert.deepEqual(events, []);
    const claimed = run(
      [
        change('DeviceClaimed', {
          owner_id: 'b',
          owner_prn: 'prn:::accounts:/bob',
          owner_nick: 'bob',
          nick: 'n',
        }),
      ],
      state,
    ).events;
    assert.deepEqual(
      claimed.map((e) => [e.type, e.owner]),
      [['device.created', 'prn:::accounts:/bob']],
    );
  });

  it('keys device and trail streams by device, others by stream', () => {
    assert.equal(aggregateKey('device-abc'), 'abc');
    assert.equal(aggregateKey('trail-abc'), 'abc');
    assert.equal(aggregateKey('account-xyz'), 'account-xyz');
  });
});

describe('subscription matching (unit)', () => {
  const meta = run([created, change('DeviceMetaUpdated', { changed: { temp: '1' }, removed: [] })])
    .events[1]!;
  const sub = (o: Partial<SubscriptionFilter>): SubscriptionFilter => ({
    id: 's1',
    owner: OWNER,
    enabled: true,
    event_types: ['device.device_meta.updated'],
    devices: [],
    user_meta_keys: [],
    device_meta_keys: [],
    ...o,
  });

  it('needs enabled, the same owner, the type listed, and the device and key filters when set', () => {
    assert.equal(matches(sub({}), meta), true);
    assert.equal(matches(sub({ enabled: false }), meta), false);
    assert.equal(matches(sub({ owner: 'prn:::accounts:/bob' }), meta), false);
    assert.equal(matches(sub({ event_types: ['device.created'] }), meta), false);
    assert.equal(matches(sub({ devices: [PRN] }), meta), true);
    assert.equal(matches(sub({ devices: ['prn:::devices:/other'] }), meta), false);
    assert.equal(matches(sub({ device_meta_keys: ['temp', 'x'] }), meta), true);
    assert.equal(matches(sub({ device_meta_keys: ['humidity'] }), meta), false);
    // A user-meta key filter does not narrow device-meta events.
    assert.equal(matches(sub({ user_meta_keys: ['humidity'] }), meta), true);
  });

  it('job ids are stable per event and subscription', () => {
    assert.equal(jobId('evt_1', 's1'), jobId('evt_1', 's1'));
    assert.notEqual(jobId('evt_1', 's1'), jobId('evt_1', 's2'));
    assert.match(jobId('evt_1', 's1'), /^job_[0-9a-f]{32}$/);
  });

  it("job ids lead with the change's stored time from the cut-over on, and keep the hash before", () => {
    const at = TIME_LED_IDS_FROM + 5000;
    for (const sub of ['s1', 's2', 'zz']) {
      assert.match(
        jobId('evt_1', sub, at),
        new RegExp(`^job_${at.toString(16).padStart(12, '0')}[0-9a-f]{20}$`),
      );
      assert.ok(jobId('evt_1', sub, at + 1) > jobId('evt_1', 'zz', at));
    }
    assert.notEqual(jobId('evt_1', 's1', at), jobId('evt_1', 's2', at));
    assert.equal(
      jobId('evt_1', 's1', TIME_LED_IDS_FROM - 1),
      `job_${createHash('sha256').update('evt_1\ns1').digest('hex').slice(0, 32)}`,
    );
  });
});

describe('actor runtime (unit)', () => {
  const behaviour = {
    initial: () => ({ seen: [] as number[] }),
    receive: (s: { seen: number[] }, m: number) => ({ state: { seen: [...s.seen, m] }, out: [m] }),
  };

  it('handles each key’s messages in order, one at a time, and returns the states to save', async () => {
    const states = new MemoryActorStates<{ seen: number[] }>();
    const runtime = new ActorRuntime({ behaviour, states, concurrency: 3 });
    const batch = Array.from({ length: 60 }, (_, i) => ({ key: `k${i % 7}`, message: i }));
    const { out, changed } = await runtime.run(batch);
    assert.equal(out.length, 60);
    for (const [key, state] of changed) {
      const mine = batch.filter((b) => b.key === key).map((b) => b.message);
      assert.deepEqual(state.seen, mine);
    }
    assert.equal(changed.size, 7);
    assert.equal(runtime.stats.actors, 7);
  });

  it('wakes evicted actors from the stored state, loading each key once per batch', async () => {
    const stored = new MemoryActorStates<{ seen: number[] }>();
    let loads = 0;
    const counting: ActorStates<{ seen: number[] }> = {
      load: (keys) => {
        loads += keys.length;
        return stored.load(keys);
      },
      save: (s) => stored.save(s),
      checkpoint: (name) => stored.checkpoint(name),
    };
    const runtime = new ActorRuntime({ behaviour, states: counting, maxActors: 2 });
    const first = await runtime.run([1, 2, 3, 4].map((m) => ({ key: `k${m}`, message: m })));
    await stored.save(first.changed);
    assert.equal(runtime.stats.actors, 2);
    const second = await runtime.run([
      { key: 'k1', message: 5 },
      { key: 'k1', message: 6 },
    ]);
    assert.deepEqual(second.changed.get('k1')!.seen, [1, 5, 6]);
    assert.equal(loads, 5);
  });
});

describe('change relay records (unit)', () => {
  it('leave out password and token hashes, sealed secrets and challenges', () => {
    assert.deepEqual(
      redacted({
        account_id: 'a',
        password_hash: 'scrypt$…',
        token_hash: 'x',
        secret_sealed: 'y',
        previous_sealed: 'z',
        secret_hash: 'h',
        challenge: 'c',
        nick: 'n',
      }),
      { account_id: 'a', nick: 'n' },
    );
  });
});
