// Turns on a stream between API threads (infra/threads.ts StreamTurns), without threads: the
// "threads" are names, the store an append that fails on a stale revision.
import assert from 'node:assert/strict';
import { WrongExpectedRevisionError } from '../../infra/eventstore/port.ts';
import { StreamTurns } from '../../infra/threads.ts';

/** One stream's revision; an append at any other revision is a conflict. */
function stream() {
  const log: string[] = [];
  let revision = -1;
  return {
    log,
    get revision() {
      return revision;
    },
    append: (who: string, expected: number) => async () => {
      if (expected !== revision) throw new WrongExpectedRevisionError('s', expected, revision);
      revision++;
      log.push(who);
      return revision;
    },
  };
}

const tick = () => new Promise((r) => setImmediate(r));

/** The usual race: a appends first; b, which decided on the empty stream, loses and gets the turn. */
async function bLostToA(turnMs: number) {
  const s = stream();
  const turns = new StreamTurns<string>(turnMs);
  await turns.run('s', 'a', s.append('a', -1));
  await assert.rejects(turns.run('s', 'b', s.append('b', -1)), WrongExpectedRevisionError);
  return { s, turns };
}

describe('StreamTurns (unit)', () => {
  it('lets appends through at once while no append lost a race', async () => {
    const s = stream();
    const turns = new StreamTurns<string>(1000);
    for (const who of ['a', 'b', 'a']) await turns.run('s', who, s.append(who, s.revision));
    assert.deepEqual(s.log, ['a', 'b', 'a']);
  });

  it("holds other threads' appends after a conflict until the loser appends again", async () => {
    // b decided on a state before a's append: it loses and gets the turn.
    const { s, turns } = await bLostToA(10_000);
    // a, deciding on the state it just wrote, would win again at once; it waits instead.
    let aDone = false;
    const a = turns.run('s', 'a', s.append('a', 0)).finally(() => (aDone = true));
    await tick();
    await tick();
    assert.equal(aDone, false);
    assert.deepEqual(s.log, ['a']);
    // b's retry, on a fresh read, appends: the turn ends and a's append runs after it (and, on
    // its now stale revision, loses in turn).
    await turns.run('s', 'b', s.append('b', 0));
    await assert.rejects(a, WrongExpectedRevisionError);
    assert.deepEqual(s.log, ['a', 'b']);
    // a holds the turn now; its retry goes through.
    await turns.run('s', 'a', s.append('a', 1));
    assert.deepEqual(s.log, ['a', 'b', 'a']);
  });

  it('ends a turn its holder does not use within the time given', async () => {
    const { s, turns } = await bLostToA(30);
    // b decided that nothing was left to do and appends no more: a waits out the turn, then appends.
    const started = Date.now();
    await turns.run('s', 'a', s.append('a', 0));
    assert.ok(Date.now() - started >= 25, `waited ${Date.now() - started} ms`);
    assert.deepEqual(s.log, ['a', 'a']);
  });

  it('gives the turn to every thread that lost, in order, before the others append again', async () => {
    const s = stream();
    const turns = new StreamTurns<string>(10_000);
    await turns.run('s', 'a', s.append('a', -1));
    // b and c decided on the empty stream and append at once: both lose, b first.
    await Promise.all([
      assert.rejects(turns.run('s', 'b', s.append('b', -1)), WrongExpectedRevisionError),
      assert.rejects(turns.run('s', 'c', s.append('c', -1)), WrongExpectedRevisionError),
    ]);
    // a's next command and c's retry (both on a fresh read) wait while b holds the turn.
    let aSettled = false;
    const a = turns.run('s', 'a', s.append('a', 0)).finally(() => (aSettled = true));
    const c = turns.run('s', 'c', s.append('c', 0));
    await tick();
    assert.deepEqual(s.log, ['a']);
    // b's retry appends; the turn passes to c, whose waiting append was decided before b's: it
    // loses a second time and keeps the turn for its next retry, while a still waits.
    await turns.run('s', 'b', s.append('b', 0));
    await assert.rejects(c, WrongExpectedRevisionError);
    await tick();
    await tick();
    assert.equal(aSettled, false, "a's append waits for c's turn");
    assert.deepEqual(s.log, ['a', 'b']);
    await turns.run('s', 'c', s.append('c', 1));
    // The line is empty: a's stale append goes and loses; its retry then holds a turn of its own.
    await assert.rejects(a, WrongExpectedRevisionError);
    await turns.run('s', 'a', s.append('a', 2));
    assert.deepEqual(s.log, ['a', 'b', 'c', 'a']);
  });

  it("ends a thread's turns and places in line when the thread is gone", async () => {
    const { s, turns } = await bLostToA(10_000);
    const a = turns.run('s', 'a', s.append('a', 0));
    await tick();
    assert.deepEqual(s.log, ['a']);
    turns.forget('b');
    await a;
    assert.deepEqual(s.log, ['a', 'a']);
  });

  it('holds only the contended stream', async () => {
    const { turns } = await bLostToA(10_000);
    const other = stream();
    await turns.run('t', 'a', other.append('a', -1));
    assert.deepEqual(other.log, ['a']);
  });
});
