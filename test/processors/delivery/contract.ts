// The delivery store contract: one suite, run once per adapter (SQLite, Redis). Times are passed
// explicitly, so leases are checked without waiting for them.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { NO_ATTEMPTS } from '../../../processors/delivery/health.ts';
import { type Attempt, type DeliveryStore, type Job, recordOf } from '../../../processors/delivery/port.ts';
import { event } from '../stream/eventlog.ts';

export function job(subscription: string): Job {
  const owner = 'prn:::accounts:/contract';
  return {
    job_id: `job_${randomBytes(8).toString('hex')}`,
    subscription_id: subscription,
    owner,
    kind: 'event',
    event: event(owner, 'device.created', 'd1', Math.floor(Date.now() / 1000)),
    attempt: 0,
    enqueued: Date.now(),
  };
}

export function attemptOf(j: Job, n: number, status: Attempt['status']): Attempt {
  const at = Date.now() + n;
  return {
    id: `del_${randomBytes(8).toString('hex')}`,
    job_id: j.job_id,
    subscription_id: j.subscription_id,
    owner: j.owner,
    event_id: j.event.id,
    event_type: j.event.type,
    kind: j.kind,
    attempt: n,
    status,
    outcome: status === 'succeeded' ? '2xx' : '5xx',
    response_code: status === 'succeeded' ? 200 : 500,
    error: null,
    duration_ms: 1,
    scheduled: at,
    started: at,
    finished: at,
    next: null,
    request: { url: 'https://example.com/hook', headers: {}, body: '{}' },
    response: null,
  };
}

export function deliveryStoreContract(name: string, open: () => Promise<DeliveryStore>) {
  describe(`delivery store contract: ${name}`, () => {
    let store: DeliveryStore;
    beforeEach(async () => {
      store = await open();
    });
    afterEach(() => store.close());

    it('enqueues once per job id, and claims due jobs with a lease', async () => {
      const a = job('sub_a');
      const b = job('sub_a');
      await store.enqueue([a, b]);
      await store.enqueue([a]); // sent twice by the processor
      const t = Date.now() + 1;
      assert.equal((await store.pending()).count, 2);
      const claimed = await store.claim(t, 10, 1000);
      assert.deepEqual(claimed.map((c) => c.job.job_id).sort(), [a.job_id, b.job_id].sort());
      assert.deepEqual(await store.claim(t + 500, 10, 1000), [], 'leased jobs are not claimed again');
      assert.equal((await store.pending()).count, 2, 'leased jobs are still pending');
      const again = await store.claim(t + 1001, 10, 1000);
      assert.equal(again.length, 2, 'a lease that ran out lets another dispatcher claim the job');
      // Finished by a dispatcher whose claim this store did not make (it took a lease over).
      const c = job('sub_a');
      await store.enqueue([c]);
      await store.finish(c, attemptOf(c, 1, 'succeeded'), null);
      assert.equal((await store.pending()).count, 2, 'a job finished without a lease here is finished');
    });

    it('holds the listed new jobs at enqueue: leased at once, never a job sent twice, the rest left due', async () => {
      const seen = job('sub_h');
      await store.enqueue([seen]);
      const [a, b, c] = [job('sub_h'), job('sub_h'), job('sub_h')];
      const t = Date.now();
      const held = await store.enqueue([seen, a, b, c, a], {
        ids: [seen.job_id, a.job_id, c.job_id],
        until: t + 5000,
      });
      assert.deepEqual(
        held.map((j) => j.job_id),
        [a.job_id, c.job_id],
        'the listed new jobs, each once; the one sent before is not held',
      );
      assert.equal((await store.pending()).count, 4);
      const due = await store.claim(t + 1000, 10, 1000);
      assert.deepEqual(due.map((d) => d.job.job_id).sort(), [seen.job_id, b.job_id].sort());
      for (const j of [a, seen, b]) await store.finish(j, attemptOf(j, 1, 'succeeded'), null);
      assert.deepEqual(
        (await store.claim(t + 6000, 10, 1000)).map((d) => d.job.job_id),
        [c.job_id],
        'a held job not finished is claimed once its lease ends',
      );
    });

    it("claims within each subscription's room; passes over the rest, pushed back only when they hid every other job", async () => {
      const slow = Array.from({ length: 10 }, () => job('sub_slow'));
      await store.enqueue(slow);
      await new Promise((r) => setTimeout(r, 5));
      const next = job('sub_next');
      await store.enqueue([next]);
      const t = Date.now() + 1;
      const first = await store.claim(t, 5, 1000, { of: { sub_slow: 2 }, otherwise: 5 });
      assert.deepEqual(
        first.map((c) => c.job.subscription_id),
        ['sub_slow', 'sub_slow', 'sub_next'],
        'two of the subscription with room for two, then the job behind them',
      );
      assert.ok((await store.nextDue())! <= t, 'the eight passed over are still due');
      // One job wanted, so eight looked at: all of a subscription with no room.
      assert.deepEqual(await store.claim(t, 1, 1000, { of: { sub_slow: 0 }, otherwise: 5 }), []);
      assert.deepEqual(await store.claim(t, 10, 1000), [], 'the run that hid every other job is pushed back');
      const later = await store.claim(t + 1000, 20, 1000, { of: {}, otherwise: 20 });
      assert.equal(later.filter((c) => slow.some((j) => j.job_id === c.job.job_id)).length, 10);
    });

    it('a renewed lease holds; a finish wins over a renewal racing it', async () => {
      const a = job('sub_b');
      const b = job('sub_b');
      await store.enqueue([a, b]);
      const t = Date.now() + 1;
      assert.equal((await store.claim(t, 10, 1000)).length, 2);
      await store.renew([a.job_id, b.job_id], t + 5000);
      assert.deepEqual(await store.claim(t + 2000, 10, 1000), [], 'renewed leases hold past the first end');
      await store.finish(a, attemptOf(a, 1, 'succeeded'), null);
      await store.finish(b, attemptOf(b, 1, 'failed'), t + 60_000);
      await store.renew([a.job_id, b.job_id], t + 10_000); // late: both finished meanwhile
      assert.deepEqual(await store.claim(t + 30_000, 10, 1000), [], 'no job comes back from a late renewal');
      assert.equal((await store.pending()).count, 1);
      assert.equal(await store.nextDue(), t + 60_000);
      const retry = await store.claim(t + 60_000, 10, 1000);
      assert.deepEqual(
        retry.map((c) => [c.job.job_id, c.due]),
        [[b.job_id, t + 60_000]],
      );
    });

    it('a job finished fresh (delivered before it was stored) is stored only when it is due again', async () => {
      const done = job('sub_f');
      const retried = job('sub_f');
      const t = Date.now();
      const first = attemptOf(done, 1, 'succeeded');
      await store.finish({ ...done, attempt: 1 }, first, null, true);
      await store.finish({ ...retried, attempt: 1 }, attemptOf(retried, 1, 'failed'), t + 60_000, true);
      assert.equal((await store.pending()).count, 1, 'only the retry is pending');
      assert.deepEqual(await store.claim(t + 59_000, 10, 1000), [], 'the retry is not due before its time');
      const due = await store.claim(t + 60_000, 10, 1000);
      assert.deepEqual(
        due.map((d) => [d.job.job_id, d.job.attempt, d.due]),
        [[retried.job_id, 1, t + 60_000]],
        'the retry, with its body, at its time',
      );
      assert.deepEqual(
        await store.attempt(first.id),
        recordOf(first),
        'the done one is known by its attempt',
      );
      assert.equal((await store.attempts('sub_f', { limit: 10, skip: 0 })).total, 2);
    });

    it('a job finished fresh that an earlier process had stored is done there too (handed off again after a crash)', async () => {
      const stored = job('sub_again');
      const deadLettered = job('sub_again');
      const t = Date.now();
      // Stored (spilled, leased) by a process that then crashed before the hand-off checkpoint.
      await store.enqueue([stored, deadLettered], {
        ids: [stored.job_id, deadLettered.job_id],
        until: t + 30_000,
      });
      // The batch is handed off again to the next process, which delivers both before storing them.
      await store.finish({ ...stored, attempt: 1 }, attemptOf(stored, 1, 'succeeded'), null, true);
      await store.finish(
        { ...deadLettered, attempt: 1 },
        attemptOf(deadLettered, 1, 'dead_lettered'),
        null,
        true,
      );
      assert.equal((await store.pending()).count, 0, 'neither is pending');
      assert.deepEqual(
        await store.claim(t + 31_000, 10, 1000),
        [],
        'neither comes back when the old lease ends',
      );
    });

    it('records attempts, lists them newest first with status filters', async () => {
      const j = job(`sub_${randomBytes(4).toString('hex')}`);
      await store.enqueue([j]);
      await store.claim(Date.now() + 1, 10, 1000);
      const first = attemptOf(j, 1, 'failed');
      await store.finish({ ...j, attempt: 1 }, first, Date.now());
      await store.claim(Date.now() + 1, 10, 1000);
      const second = attemptOf(j, 2, 'dead_lettered');
      await store.finish({ ...j, attempt: 2 }, second, null);
      const all = await store.attempts(j.subscription_id, { limit: 10, skip: 0 });
      assert.equal(all.total, 2);
      assert.deepEqual(
        all.items.map((a) => a.id),
        [second.id, first.id],
      );
      assert.equal(
        (await store.attempts(j.subscription_id, { status: 'failed', limit: 10, skip: 0 })).total,
        2,
      );
      assert.deepEqual(
        (await store.attempts(j.subscription_id, { status: 'dead_lettered', limit: 10, skip: 0 })).items,
        [recordOf(second)],
      );
      assert.equal(
        (await store.attempts(j.subscription_id, { status: 'succeeded', limit: 10, skip: 0 })).total,
        0,
      );
      assert.deepEqual(await store.attempt(first.id), recordOf(first));
      assert.deepEqual(
        (await store.attemptsOfEvent(j.owner, j.event.id)).map((a) => a.id),
        [first.id, second.id],
      );
      assert.equal((await store.pending()).count, 0);
    });

    it('reads an attempt back as it was written: every field, in order, whatever its strings hold', async () => {
      const j = job('sub_r');
      const odd = 'quotes " and \\ backslash, é, 日本, emoji 🎉, a tab\t, a newline\n, nul \u0000';
      const written: Attempt = {
        ...attemptOf(j, 3, 'failed'),
        error: odd,
        next: Date.now() + 60_000,
        request: {
          url: 'https://example.com/hook?q="x"',
          headers: { 'x-custom': odd, 'content-type': 'application/json' },
          body: JSON.stringify({ id: 'evt_1', data: { note: odd } }),
        },
        response: {
          status: 503,
          headers: JSON.parse('{"retry-after":"5","__proto__":"a header like any other"}'),
          body: odd,
          truncated: true,
        },
      };
      await store.finish({ ...j, attempt: 3 }, written, null, true);
      const read = await store.attempt(written.id);
      const record = recordOf(written);
      assert.equal(read?.next_attempt_at, new Date(written.next!).toISOString());
      assert.equal(JSON.stringify(read), JSON.stringify(record));
      assert.deepEqual(read, record);
      assert.deepEqual((await store.attemptsOfEvent(j.owner, j.event.id))[0], record);
      assert.deepEqual((await store.attempts('sub_r', { limit: 1, skip: 0 })).items[0], record);
    });

    it("keeps each subscription's endpoint health with its attempts, a late attempt's outcome not undoing a newer one", async () => {
      const sub = `sub_${randomBytes(4).toString('hex')}`;
      const other = `sub_${randomBytes(4).toString('hex')}`;
      assert.deepEqual(await store.health([sub, other]), [NO_ATTEMPTS, NO_ATTEMPTS]);
      const t = Date.now();
      /** A finish of a new job of `s`, fresh, its attempt ended at `at`. */
      const ended = (s: string, status: Attempt['status'], at: number, next: number | null = null) => {
        const j = job(s);
        return store.finish({ ...j, attempt: 1 }, { ...attemptOf(j, 1, status), finished: at }, next, true);
      };
      // Finished together: one commit (or script call) for several attempts of a subscription.
      await Promise.all([ended(sub, 'failed', t, t + 60_000), ended(sub, 'dead_lettered', t + 10)]);
      assert.deepEqual(await store.health([sub, other]), [
        { lastSuccess: null, lastFailure: t + 10, consecutiveFailures: 2, failingSince: t },
        NO_ATTEMPTS,
      ]);
      await ended(sub, 'succeeded', t + 20);
      await ended(other, 'failed', t + 5, t + 60_000);
      assert.deepEqual(await store.health([sub, other]), [
        { lastSuccess: t + 20, lastFailure: t + 10, consecutiveFailures: 0, failingSince: null },
        { lastSuccess: null, lastFailure: t + 5, consecutiveFailures: 1, failingSince: t + 5 },
      ]);
      await ended(sub, 'failed', t + 15); // ended before the success recorded: not a failure since
      assert.deepEqual((await store.health([sub]))[0], {
        lastSuccess: t + 20,
        lastFailure: t + 15,
        consecutiveFailures: 0,
        failingSince: null,
      });
      await ended(sub, 'failed', t + 30);
      await ended(sub, 'succeeded', t + 25); // ended before the failure recorded: it still fails
      assert.deepEqual((await store.health([sub]))[0], {
        lastSuccess: t + 25,
        lastFailure: t + 30,
        consecutiveFailures: 1,
        failingSince: t + 30,
      });
    });

    it("leases a half-open circuit's probe to one taker at a time, until its end or an attempt recorded", async () => {
      const sub = `sub_${randomBytes(4).toString('hex')}`;
      const t = Date.now();
      assert.equal(await store.probe(sub, t, t + 1000), false, 'no probe without a health');
      const failed = () => {
        const j = job(sub);
        return store.finish({ ...j, attempt: 1 }, attemptOf(j, 1, 'failed'), null, true);
      };
      await failed();
      assert.equal(await store.probe(sub, t, t + 1000), true);
      assert.equal(await store.probe(sub, t + 500, t + 1500), false, 'held by the first taker');
      assert.equal(await store.probe(sub, t + 1000, t + 2000), true, 'taken again once its lease ended');
      await failed();
      assert.equal(await store.probe(sub, t + 1100, t + 2100), true, 'an attempt recorded ended the lease');
      assert.equal((await store.health([sub]))[0]!.consecutiveFailures, 2);
    });
  });
}
