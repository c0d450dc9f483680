// The event log contract: one suite, run once per adapter (memory, SQLite, Redis, PostgreSQL), and
// its tail's (every adapter but Redis, which is only read to move it).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { EventType, WebhookEvent } from '../../../processors/stream/derive.ts';
import { type EventLog, LOG_POSITION } from '../../../processors/stream/eventlog.ts';

let position = 0;
export function event(owner: string, type: EventType, device: string, createdS: number): WebhookEvent {
  return {
    id: `evt_${randomBytes(16).toString('hex')}`,
    type,
    api_version: '2026-11-01',
    created: createdS,
    owner,
    resource_prn: `prn:::devices:/${device}`,
    livemode: true,
    data: { n: ++position },
    source_position: position,
    sequence: 0,
    created_ms: createdS * 1000,
  };
}

export function eventLogContract(
  name: string,
  open: (
    retentionMs: number,
  ) => Promise<{ log: Omit<EventLog, 'head' | 'tail'>; keysOf?: (owner: string) => Promise<number> }>,
) {
  describe(`event log contract: ${name}`, () => {
    const now = () => Math.floor(Date.now() / 1000);

    it('lists newest first with filters and pages, and appends idempotently by id', async () => {
      const { log } = await open(86_400_000);
      const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
      const t = now();
      const events = [
        event(owner, 'device.created', 'a', t - 30),
        event(owner, 'device.device_meta.updated', 'a', t - 20),
        event(owner, 'device.device_meta.updated', 'b', t - 20),
        event(owner, 'step.created', 'b', t - 10),
      ];
      await log.append(events);
      await log.append(events.slice(1, 3)); // processed again after a crash
      const all = await log.list(owner, { limit: 10, skip: 0 });
      assert.equal(all.total, 4);
      assert.deepEqual(
        all.items.map((e) => e.id),
        [...events].reverse().map((e) => e.id),
      );
      assert.deepEqual(all.items[0], events[3]);
      const meta = await log.list(owner, { type: 'device.device_meta.updated', limit: 10, skip: 0 });
      assert.deepEqual(
        meta.items.map((e) => e.id),
        [events[2]!.id, events[1]!.id],
      );
      const b = await log.list(owner, { resource_prn: 'prn:::devices:/b', limit: 1, skip: 1 });
      assert.equal(b.total, 2);
      assert.deepEqual(
        b.items.map((e) => e.id),
        [events[2]!.id],
      );
      const both = await log.list(owner, {
        type: 'device.device_meta.updated',
        resource_prn: 'prn:::devices:/a',
        limit: 10,
        skip: 0,
      });
      assert.deepEqual(
        both.items.map((e) => e.id),
        [events[1]!.id],
      );
      const window = await log.list(owner, {
        since: (t - 20) * 1000,
        until: (t - 10) * 1000,
        limit: 10,
        skip: 0,
      });
      assert.deepEqual(
        window.items.map((e) => e.id),
        [events[2]!.id, events[1]!.id],
      );
      assert.deepEqual(await log.get(owner, events[0]!.id), events[0]);
      assert.equal(await log.get('prn:::accounts:/other', events[0]!.id), undefined);
      assert.equal((await log.list('prn:::accounts:/other', { limit: 10, skip: 0 })).total, 0);
    });

    it('keeps events for the retention only: older ones are not stored, stored ones go, and so do their keys', async () => {
      const { log, keysOf } = await open(2000);
      const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
      const old = event(owner, 'device.created', 'a', now() - 10);
      const fresh = event(owner, 'device.updated', 'a', now());
      await log.append([old, fresh]);
      assert.equal(await log.get(owner, old.id), undefined);
      assert.deepEqual(
        (await log.list(owner, { limit: 10, skip: 0 })).items.map((e) => e.id),
        [fresh.id],
      );
      await new Promise((r) => setTimeout(r, 2600));
      assert.equal(await log.get(owner, fresh.id), undefined);
      assert.equal((await log.list(owner, { limit: 10, skip: 0 })).total, 0);
      if (keysOf) assert.equal(await keysOf(owner), 0);
    });
  });
}

/** Every event of `owner` a reader gets from `from`, reading `limit` at a time as a stream does. */
export async function readAll(log: EventLog, owner: string, from: string, limit = 2) {
  const seen: { id: string; position: string }[] = [];
  let position = from;
  for (;;) {
    const tail = await log.tail(owner, position, limit);
    for (const { event, position: p } of tail.items) seen.push({ id: event.id, position: p });
    assert.ok(tail.items.length <= limit);
    position = tail.position;
    if (!tail.more) return { seen, position };
  }
}

export function eventLogTailContract(name: string, open: () => Promise<EventLog>) {
  describe(`event log tail contract: ${name}`, () => {
    const now = () => Math.floor(Date.now() / 1000);

    it("reads one account's appends from a position in the order they were appended, each once", async () => {
      const log = await open();
      const owner = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
      const other = `prn:::accounts:/${randomBytes(4).toString('hex')}`;
      await log.append([event(owner, 'device.created', 'a', now() - 5)]); // before the head: not read
      const head = await log.head();
      assert.match(head, LOG_POSITION);
      const t = now();
      // A late change (an older `created`) appended after a newer one is read after it: the tail
      // follows the appends, not the events' time.
      const first = [event(owner, 'device.created', 'b', t), event(other, 'device.created', 'x', t)];
      const late = [event(owner, 'device.updated', 'b', t - 60), event(owner, 'step.created', 'b', t - 30)];
      await log.append(first);
      await log.append(late);
      await log.append([first[0]!]); // derived again: logged once
      const { seen, position } = await readAll(log, owner, head);
      assert.deepEqual(
        seen.map((s) => s.id),
        [first[0]!.id, late[0]!.id, late[1]!.id],
      );
      for (const s of seen) assert.match(s.position, LOG_POSITION);
      // From any event's position on: exactly what came after it.
      assert.deepEqual(
        (await readAll(log, owner, seen[0]!.position)).seen.map((s) => s.id),
        [late[0]!.id, late[1]!.id],
      );
      assert.deepEqual((await readAll(log, owner, position)).seen, []);
      const more = event(owner, 'device.deleted', 'b', now());
      await log.append([more]);
      assert.deepEqual(
        (await readAll(log, owner, position)).seen.map((s) => s.id),
        [more.id],
      );
      assert.deepEqual(
        (await readAll(log, other, head)).seen.map((s) => s.id),
        [first[1]!.id],
      );
    });
  });
}
