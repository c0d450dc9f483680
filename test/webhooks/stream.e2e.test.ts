// The live event stream (GET /webhooks/events/stream) end to end, on both profiles: scopes and bad
// input answered in the one error shape, filters as a subscription's, a resume with Last-Event-ID
// that skips and repeats nothing, heartbeats, the bound of open streams, and a shutdown that ends
// open streams at once instead of waiting out its bound.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import pg from 'pg';
import { readEventStream, type StreamEvent } from '../../bin/listen.ts';
import { deleteTopics, dropSchema, inSchema, redisDb, testConfig } from '../harness.ts';
import { createDevice, type Device, signup, startHub, type TestHub, type User } from '../hub.ts';

export interface OpenStream {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: an error answer's JSON
  error?: any;
  events: StreamEvent[];
  comments: string[];
  /** Resolves when the hub ends the stream (or it is closed here). */
  ended: Promise<void>;
  close(): void;
}

export async function openStream(
  hub: TestHub,
  token: string | undefined,
  o: { query?: string; lastEventId?: string } = {},
): Promise<OpenStream> {
  const aborted = new AbortController();
  const res = await fetch(`${hub.url}/webhooks/events/stream${o.query ?? ''}`, {
    headers: {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(o.lastEventId ? { 'last-event-id': o.lastEventId } : {}),
    },
    signal: aborted.signal,
  });
  const events: StreamEvent[] = [];
  const comments: string[] = [];
  if (res.status !== 200)
    return {
      status: res.status,
      error: await res.json(),
      events,
      comments,
      ended: Promise.resolve(),
      close() {},
    };
  assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
  const ended = readEventStream(
    res.body!,
    (e) => {
      events.push(e);
    },
    (c) => comments.push(c),
  ).catch(() => {}); // closed here
  return { status: 200, events, comments, ended, close: () => aborted.abort() };
}

export async function eventsOf(
  stream: OpenStream,
  count: number,
  timeoutMs = 20_000,
): Promise<StreamEvent[]> {
  const deadline = Date.now() + timeoutMs;
  while (stream.events.length < count) {
    if (Date.now() > deadline)
      throw new Error(`${stream.events.length} of ${count} events: ${JSON.stringify(stream.events)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
  return stream.events;
}

const profiles: {
  name: string;
  env: () => Promise<Record<string, string>>;
  cleanup: () => Promise<void>;
  /** The log's rows of a resource as stored, for a failure's message. */
  rows?: (prn: string) => Promise<string>;
}[] = [];
profiles.push({ name: 'embedded', env: async () => ({}), cleanup: async () => {} });
{
  const { postgresUrl, redisUrl, kafkaBrokers } = testConfig();
  const id = randomBytes(4).toString('hex');
  const schema = `stream_${id}`;
  // A Redis database of its own, emptied: the projections' checkpoints there start with the store.
  const isolatedRedis = redisDb(redisUrl, 9);
  profiles.push({
    name: 'distributed',
    env: async () => {
      const redis = new Redis(isolatedRedis);
      await redis.flushdb();
      redis.disconnect();
      return {
        HUB_PROFILE: 'distributed',
        HUB_REDIS_URL: isolatedRedis,
        HUB_POSTGRES_URL: inSchema(postgresUrl, schema),
        HUB_KAFKA_PREFIX: `stream-${id}-`,
      };
    },
    cleanup: async () => {
      await dropSchema(postgresUrl, schema);
      await deleteTopics(kafkaBrokers, `stream-${id}-`);
    },
    rows: async (prn) => {
      const client = new pg.Client({ connectionString: postgresUrl });
      await client.connect();
      try {
        const { rows } = await client.query(
          `SELECT logged::text AS logged_text, source_position, sequence, id, at FROM ${schema}.hub_event_log WHERE resource_prn = $1 ORDER BY logged, source_position, sequence, id`,
          [prn],
        );
        return rows.map((r) => Object.values(r).join(' ')).join('; ');
      } finally {
        await client.end();
      }
    },
  });
}

for (const profile of profiles) {
  describe(`live event stream on the ${profile.name} profile (e2e)`, function () {
    this.timeout(120_000);
    let hub: TestHub | undefined;
    let alice: User;
    let d1: Device;
    let d2: Device;
    const streams: OpenStream[] = [];
    const open = async (...args: Parameters<typeof openStream>) => {
      const s = await openStream(...args);
      streams.push(s);
      return s;
    };
    /** Opens a stream once the hub has freed the places of the streams closed before (it frees a
     * place once it sees its client go: a stream opened right after a close may still be refused). */
    const openFreed = async (o: Parameters<typeof openStream>[2] = {}) => {
      let s = await open(hub!, alice.token, o);
      for (let i = 0; i < 40 && s.status === 429; i++) {
        await new Promise((r) => setTimeout(r, 50));
        s = await open(hub!, alice.token, o);
      }
      return s;
    };
    const meta = async (device: Device, body: Record<string, unknown>) => {
      const r = await hub!.call('PATCH', `/devices/${device.id}/device-meta`, { token: device.token, body });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };

    before(async () => {
      hub = await startHub(
        {
          ...(await profile.env()),
          HUB_EVENT_STREAM_HEARTBEAT_MS: '300',
          HUB_EVENT_STREAMS_PER_ACCOUNT: '2',
        },
        ['api', 'projector', 'processor'],
      );
      alice = await signup(hub, `alice${randomBytes(3).toString('hex')}`);
      d1 = await createDevice(hub, alice);
      d2 = await createDevice(hub, alice);
      // Their device.created in the log first (the processor follows the store, on Kafka a while
      // behind): a stream opened later starts after them.
      for (let i = 0; i < 200; i++) {
        const created = await hub.call('GET', '/webhooks/events?type=device.created', { token: alice.token });
        if (created.body.total === 2) break;
        await new Promise((r) => setTimeout(r, 50));
      }
    });
    afterEach(() => {
      for (const s of streams.splice(0)) s.close();
    });
    after(async () => {
      await hub?.stop();
      await profile.cleanup();
    });

    it('answers without a token 401, without a webhooks read scope 403, and bad input 400 and 422, in the error shape', async () => {
      const anonymous = await open(hub!, undefined);
      assert.equal(anonymous.status, 401);
      assert.equal(anonymous.error.error, 'unauthorized');
      const device = await open(hub!, d1.token); // a device's token: devices and trails only
      assert.equal(device.status, 403);
      assert.equal(device.error.error, 'forbidden');
      assert.match(device.error.message, /webhooks\.readonly/);
      assert.equal(device.error.code, 403);
      assert.ok(device.error.request_id);
      const resume = await open(hub!, alice.token, { lastEventId: 'evt_nope' });
      assert.equal(resume.status, 400);
      assert.equal(resume.error.details[0].field, 'Last-Event-ID');
      const type = await open(hub!, alice.token, { query: '?event_types=device.exploded' });
      assert.equal(type.status, 422);
      assert.equal(type.error.details[0].field, 'event_types');
      const devices = await open(hub!, alice.token, { query: '?devices=kitchen' });
      assert.equal(devices.status, 422);
    });

    it('sends what a subscription with the same filters would get, each event as the log shows it', async () => {
      const filtered = await open(hub!, alice.token, {
        query: `?event_types=device.device_meta.updated&devices=${d1.id}&device_meta_keys=temp`,
      });
      const all = await open(hub!, alice.token);
      assert.equal(filtered.status, 200);
      await meta(d2, { temp: '20' }); // another device
      await meta(d1, { hum: '40' }); // another key
      const renamed = await hub!.call('PATCH', `/devices/${d1.id}`, {
        token: alice.token,
        body: { nick: `renamed-${randomBytes(3).toString('hex')}` },
      }); // another type
      assert.equal(renamed.status, 200, JSON.stringify(renamed.body));
      await meta(d1, { temp: '21' });
      await meta(d1, { temp: '22' });
      // In the log's order: once the last one is in, everything before it was read.
      const got = await eventsOf(filtered, 2);
      assert.deepEqual(
        got.map((e) => [JSON.parse(e.data).resource_prn, JSON.parse(e.data).data.keys]),
        [
          [d1.prn, ['temp']],
          [d1.prn, ['temp']],
        ],
      );
      const everything = await eventsOf(all, 5);
      // Another device's event may come before or after these (another partition, distributed).
      assert.deepEqual(everything.map((e) => e.event).sort(), [
        'device.device_meta.updated',
        'device.device_meta.updated',
        'device.device_meta.updated',
        'device.device_meta.updated',
        'device.updated',
      ]);
      // Each event as GET /webhooks/events/{eid} answers it, its type the SSE event name.
      for (const e of everything) {
        const one = await hub!.call('GET', `/webhooks/events/${JSON.parse(e.data).id}`, {
          token: alice.token,
        });
        assert.equal(one.status, 200);
        assert.deepEqual(JSON.parse(e.data), one.body);
        assert.equal(e.event, one.body.type);
      }
      // The list shows the same events. The stream follows the log's insertion order, which on
      // the distributed profile's partitions need not be the list's order of event times.
      const listed = await hub!.call('GET', '/webhooks/events?limit=5', { token: alice.token });
      assert.deepEqual(
        listed.body.items.map((e: { id: string }) => e.id).sort(),
        everything.map((e) => JSON.parse(e.data).id).sort(),
      );
    });

    it('resumes after the Last-Event-ID sent: nothing skipped, nothing repeated', async () => {
      // The last test's two streams were closed, and this account may have two open.
      const first = await openFreed({ query: `?devices=${d2.id}` });
      assert.equal(first.status, 200);
      for (const n of [1, 2, 3]) await meta(d2, { seq: String(n) });
      const seen = await eventsOf(first, 3);
      first.close();
      // Appended while no stream was open.
      for (const n of [4, 5]) await meta(d2, { seq: String(n) });
      const resumed = await openFreed({ query: `?devices=${d2.id}`, lastEventId: seen[1]!.id });
      assert.equal(resumed.status, 200);
      await meta(d2, { seq: '6' });
      const seqOf = (e: StreamEvent) => JSON.parse(e.data).data.device_meta.seq;
      // What the streams sent and what the log holds, to tell a skip, a repeat and a late append.
      const explain = async (problem: string) => {
        const log = await hub!.call(
          'GET',
          `/webhooks/events?resource_prn=${encodeURIComponent(d2.prn)}&limit=10`,
          { token: alice.token },
        );
        const sent = (events: StreamEvent[]) =>
          events.map((e) => `${e.id} ${JSON.parse(e.data).id} (seq ${seqOf(e)})`).join(', ');
        const held = log.body.items?.map(
          (e: { id: string; data: { device_meta: object } }) =>
            `${e.id} ${JSON.stringify(e.data.device_meta)}`,
        );
        const rows = profile.rows ? `; its rows: ${await profile.rows(d2.prn)}` : '';
        return new Error(
          `${problem}\nresumed after ${seen[1]!.id}; the first stream sent ${sent(seen)}; the resumed one ${sent(resumed.events)}; the log: ${held}${rows}`,
        );
      };
      const again = await eventsOf(resumed, 4).catch(async (err: Error) => {
        throw await explain(err.message);
      });
      if (again.map(seqOf).join() !== '3,4,5,6') throw await explain('not 3, 4, 5, 6');
      assert.equal(again[0]!.id, seen[2]!.id); // the id is the event's place in the log, the same on every read
      // The query parameter does what the header does (for clients that cannot set it).
      const byQuery = await open(hub!, alice.token, {
        query: `?devices=${d2.id}&last_event_id=${encodeURIComponent(again[2]!.id)}`,
      });
      assert.deepEqual((await eventsOf(byQuery, 1)).map(seqOf), ['6']);
      await new Promise((r) => setTimeout(r, 600)); // a few reads more: still nothing repeated
      assert.equal(byQuery.events.length, 1);
      assert.equal(resumed.events.length, 4);
    });

    it('sends heartbeats while quiet, and keeps to HUB_EVENT_STREAMS_PER_ACCOUNT', async () => {
      // The last test's streams were closed here; the hub frees their places once it sees them go.
      const freed = (query: string) => openFreed({ query });
      const one = await freed('?event_types=step.created');
      assert.equal(one.status, 200);
      const two = await freed('?event_types=step.created');
      assert.equal(two.status, 200);
      const three = await open(hub!, alice.token);
      assert.equal(three.status, 429);
      assert.equal(three.error.error, 'too_many_streams');
      const deadline = Date.now() + 5000;
      while (!one.comments.includes('heartbeat') && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      assert.ok(one.comments.includes('heartbeat'), JSON.stringify(one.comments));
      // Another account is not counted with this one's.
      const bob = await signup(hub!, `bob${randomBytes(3).toString('hex')}`);
      assert.equal((await open(hub!, bob.token)).status, 200);
      one.close();
      const again = await freed('');
      assert.equal(again.status, 200);
    });

    it('ends open streams at shutdown, without waiting out the drain bound', async () => {
      const open1 = await open(hub!, alice.token);
      const open2 = await open(hub!, alice.token);
      const started = Date.now();
      const stopped = hub!.stop();
      hub = undefined;
      await Promise.all([open1.ended, open2.ended]);
      // The bound for requests in flight is half of HUB_SHUTDOWN_TIMEOUT_MS (25 s). (The stop as a
      // whole may still wait for it: a connection the test's HTTP client opened and never sent a
      // request on is not idle to Node.)
      assert.ok(Date.now() - started < 5000, `streams ended in ${Date.now() - started} ms`);
      await stopped;
    });
  });
}
