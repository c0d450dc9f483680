// How the PostgreSQL logs group their appends into statements (GroupedInserts in
// processors/stream/postgres-logs.ts), with a write that records what each statement carried.
import assert from 'node:assert/strict';
import { GroupedInserts } from '../../../processors/stream/postgres-logs.ts';

/** Statements as the rows they carried, each answered when `answer` is called (in order). */
function statements() {
  const sent: number[][] = [];
  const pending: (() => void)[] = [];
  const write = (rows: number[]) => {
    sent.push(rows);
    return new Promise<void>((r) => pending.push(r));
  };
  const answer = () => pending.shift()?.();
  return { sent, write, answer };
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('grouped inserts of the PostgreSQL logs (unit)', () => {
  it('without a linger, sends at once; what comes while two are in flight goes together in the next', async () => {
    const s = statements();
    const inserts = new GroupedInserts(s.write);
    const answered: number[] = [];
    const add = (rows: number[]) => inserts.add(rows).then(() => answered.push(rows[0]!));
    void add([1]);
    void add([2]);
    void add([3]);
    void add([4, 5]);
    assert.deepEqual(s.sent, [[1], [2]]);
    s.answer();
    await sleep(0);
    assert.deepEqual(s.sent, [[1], [2], [3, 4, 5]]);
    s.answer();
    s.answer();
    await sleep(0);
    assert.deepEqual(answered, [1, 2, 3, 4]);
  });

  it('with a linger, appends within it go in one statement; a full statement goes at once', async () => {
    const s = statements();
    const inserts = new GroupedInserts(s.write, 30);
    const done = [inserts.add([1]), inserts.add([2])];
    await sleep(5);
    done.push(inserts.add([3]));
    assert.equal(s.sent.length, 0, 'nothing sent within the linger');
    await sleep(60);
    assert.deepEqual(s.sent, [[1, 2, 3]]);
    s.answer();
    await Promise.all(done);
    const full = Array.from({ length: 256 }, (_, i) => 100 + i);
    void inserts.add(full);
    assert.equal(s.sent.length, 2, '256 rows went at once');
    assert.equal(s.sent[1]!.length, 256);
    s.answer();
  });

  it('a flush sends what lingers at once and resolves once every statement is answered', async () => {
    const s = statements();
    const inserts = new GroupedInserts(s.write, 60_000);
    const answered: number[] = [];
    for (const n of [1, 2]) void inserts.add([n]).then(() => answered.push(n));
    let flushed = false;
    const flushing = inserts.flush().then(() => {
      flushed = true;
    });
    assert.deepEqual(s.sent, [[1, 2]], 'sent without waiting for the linger');
    void inserts.add([3]).then(() => answered.push(3)); // meanwhile: in the same flush
    await sleep(5);
    assert.equal(flushed, false, 'not before its statement is answered');
    s.answer();
    await sleep(5);
    assert.deepEqual(s.sent, [[1, 2], [3]]);
    assert.equal(flushed, false);
    s.answer();
    await flushing;
    assert.deepEqual(answered, [1, 2, 3]);
    await inserts.flush(); // nothing left: at once
  });
});
