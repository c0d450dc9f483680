// The subscriptions' rate limits without I/O: the slots a rate spaces (GCRA's virtual scheduling),
// when a job holding a slot is still on time for it, and what the dispatcher's throttle answers.
import assert from 'node:assert/strict';
import { MemoryRateSlots, nextSlot, type RateSlots } from '../../../infra/rate-limits.ts';
import type { Held } from '../../../processors/delivery/held.ts';
import type { Job } from '../../../processors/delivery/port.ts';
import { onTime, Throttle } from '../../../processors/delivery/throttle.ts';

const job = (slotted?: boolean): Job => ({
  job_id: 'job_1',
  subscription_id: 'sub',
  owner: 'prn:::accounts:/a',
  kind: 'event',
  event: {} as Job['event'],
  attempt: 0,
  enqueued: 0,
  ...(slotted ? { slotted } : {}),
});

/** Slots at a fixed clock, each reservation recorded. */
class Recorded implements RateSlots {
  free: number | undefined;
  reserved = 0;
  private readonly now: number;
  constructor(now: number) {
    this.now = now;
  }
  async reserve(_key: string, perSecond: number): Promise<number> {
    this.reserved++;
    const { slot, free } = nextSlot(this.free, this.now, perSecond);
    this.free = free;
    return slot - this.now;
  }
}

describe('throttle (unit)', () => {
  it('slots: the first at once, each next one interval after the one before, once the key is idle at once again', () => {
    let free: number | undefined;
    const slots = [0, 0, 0, 0].map(() => {
      const next = nextSlot(free, 1000, 4);
      free = next.free;
      return next.slot;
    });
    assert.deepEqual(slots, [1000, 1250, 1500, 1750]);
    assert.deepEqual(nextSlot(free, 5000, 4), { slot: 5000, free: 5250 }); // idle meanwhile: no credit
  });

  it('in process: a reservation answers the wait until its slot, per key', async () => {
    const slots = new MemoryRateSlots();
    const waits = [await slots.reserve('a', 10), await slots.reserve('a', 10), await slots.reserve('a', 10)];
    assert.equal(waits[0], 0);
    assert.ok(waits[1]! > 90 && waits[1]! <= 100, String(waits));
    assert.ok(waits[2]! > 190 && waits[2]! <= 200, String(waits));
    assert.equal(await slots.reserve('b', 10), 0, 'another key has its own slots');
  });

  it('a slot is on time for half an interval after it, and at least 25 ms', () => {
    assert.equal(onTime(1000, 1000, 5), true);
    assert.equal(onTime(1000, 1100, 5), true);
    assert.equal(onTime(1000, 1101, 5), false);
    assert.equal(onTime(1000, 1025, 1000), true);
    assert.equal(onTime(1000, 1026, 1000), false);
  });

  it('unlimited: no wait, no slot taken', async () => {
    const slots = new Recorded(1000);
    const held: Held = { job: job(true), due: 0 };
    assert.equal(await new Throttle(slots).wait(held, null, 1000), 0);
    assert.equal(slots.reserved, 0);
    assert.equal(held.job.slotted, undefined, 'a slot held under an old limit is let go');
  });

  it('over the rate: waits for its own slot, marked as holding it; on time then, it goes without another', async () => {
    const slots = new Recorded(1000);
    const throttle = new Throttle(slots);
    const first: Held = { job: job(), due: 1000 };
    const second: Held = { job: job(), due: 1000 };
    assert.equal(await throttle.wait(first, 5, 1000), 0);
    assert.equal(first.job.slotted, undefined);
    assert.equal(await throttle.wait(second, 5, 1000), 200);
    assert.equal(second.job.slotted, true);
    // Claimed again at its slot (due 1200), 30 ms late: it goes, and takes no slot more.
    assert.equal(await throttle.wait({ job: second.job, due: 1200 }, 5, 1230), 0);
    assert.equal(second.job.slotted, undefined, 'a retry after this attempt is not a slot');
    assert.equal(slots.reserved, 2);
  });

  it('a job that missed its slot takes the next free one instead of going beside its holder', async () => {
    const slots = new Recorded(1500);
    slots.free = 1600; // slots up to 1400 taken by others
    const late: Held = { job: job(true), due: 1200 };
    assert.equal(await new Throttle(slots).wait(late, 5, 1500), 100);
    assert.equal(late.job.slotted, true);
    assert.equal(slots.reserved, 1);
  });
});
