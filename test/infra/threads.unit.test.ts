// ThreadChannel over a real MessageChannel (both ends in this thread): calls, errors, batching.
import assert from 'node:assert/strict';
import { MessageChannel } from 'node:worker_threads';
import { WrongExpectedRevisionError } from '../../infra/eventstore/port.ts';
import { type Endpoint, errorsCrossThreads, ThreadChannel } from '../../infra/threads.ts';

/** Both ends of a channel, counting the messages each end posts. */
function pair() {
  const { port1, port2 } = new MessageChannel();
  const posted = { a: 0, b: 0 };
  const counting = (port: Endpoint, side: 'a' | 'b'): Endpoint => ({
    postMessage: (v) => {
      posted[side]++;
      port.postMessage(v);
    },
    on: (e, l) => port.on(e, l),
  });
  const a = new ThreadChannel(counting(port1, 'a'));
  const b = new ThreadChannel(counting(port2, 'b'));
  return { a, b, posted, close: () => port1.close() };
}

describe('ThreadChannel (unit)', () => {
  it('calls the served methods, sync or async, with their arguments', async () => {
    const { a, b, close } = pair();
    const counter = {
      n: 0,
      add(k: number) {
        this.n += k;
        return this.n;
      },
      async later(s: string) {
        return `${s}!`;
      },
    };
    a.serve('counter', counter, ['add', 'later']);
    const remote = b.remote<{ add(k: number): Promise<number>; later(s: string): Promise<string> }>(
      'counter',
      ['add', 'later'],
    );
    assert.equal(await remote.add(2), 2);
    assert.equal(await remote.add(3), 5);
    assert.equal(await remote.later('hi'), 'hi!');
    assert.equal(counter.n, 5);
    close();
  });

  it('refuses a method that is not listed, and a target that is not served', async () => {
    const { a, b, close } = pair();
    a.serve('store', { append: () => 1, close: () => 'closed' }, ['append']);
    await assert.rejects(b.call('store', 'close', []), /no method store\.close served/);
    await assert.rejects(b.call('other', 'append', []), /no method other\.append served/);
    close();
  });

  it('an error of a registered class arrives as that class with its fields; any other as an Error', async () => {
    errorsCrossThreads(WrongExpectedRevisionError);
    const { a, b, close } = pair();
    a.serve(
      'store',
      {
        append: async () => {
          throw new WrongExpectedRevisionError('device-1', 3, 5);
        },
        broken: () => {
          throw new TypeError('not a function');
        },
      },
      ['append', 'broken'],
    );
    const err = await b.call('store', 'append', []).catch((e: unknown) => e);
    assert.ok(err instanceof WrongExpectedRevisionError);
    assert.equal(err.stream, 'device-1');
    assert.equal(err.actual, 5);
    assert.match(err.message, /device-1/);
    const other = await b.call('store', 'broken', []).catch((e: unknown) => e);
    assert.ok(other instanceof Error && !(other instanceof TypeError));
    assert.equal(other.message, 'not a function');
    close();
  });

  it('the calls of one turn travel as one message, and so do their answers', async () => {
    const { a, b, posted, close } = pair();
    a.serve('echo', { echo: (x: number) => x }, ['echo']);
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => b.call('echo', 'echo', [i])));
    assert.deepEqual(answers, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert.deepEqual(posted, { a: 1, b: 1 });
    close();
  });

  it('a send that may wait goes with the next message, or alone once its time is up', async () => {
    const { a, b, posted, close } = pair();
    const heard: number[] = [];
    a.serve('news', { tell: (n: number) => heard.push(n) }, ['tell']);
    a.serve('echo', { echo: (x: number) => x }, ['echo']);
    // Three news items then a call, in different turns: the call's message carries them all.
    for (const n of [1, 2, 3]) {
      b.sendSoon('news', 'tell', [n], 1000);
      await new Promise((r) => setImmediate(r));
    }
    assert.equal(posted.b, 0, 'nothing posted for news alone within its time');
    assert.equal(await b.call('echo', 'echo', [7]), 7);
    assert.deepEqual(heard, [1, 2, 3]);
    assert.equal(posted.b, 1);
    // Nothing else to go: the news goes by itself after its wait, once for both.
    b.sendSoon('news', 'tell', [4], 30);
    b.sendSoon('news', 'tell', [5], 30);
    await new Promise((r) => setTimeout(r, 10));
    assert.deepEqual(heard, [1, 2, 3]);
    await new Promise((r) => setTimeout(r, 60));
    assert.deepEqual(heard, [1, 2, 3, 4, 5]);
    assert.equal(posted.b, 2);
    close();
  });

  it('a call whose value cannot be copied fails alone', async () => {
    const { a, b, close } = pair();
    a.serve('echo', { echo: (x: unknown) => x }, ['echo']);
    const [bad, good] = await Promise.allSettled([
      b.call('echo', 'echo', [() => 1]),
      b.call('echo', 'echo', [2]),
    ]);
    assert.equal(bad.status, 'rejected');
    assert.deepEqual(good, { status: 'fulfilled', value: 2 });
    close();
  });

  it('once closed, the calls waiting and later ones fail with the reason', async () => {
    const { a, b, close } = pair();
    a.serve('slow', { never: () => new Promise(() => {}) }, ['never']);
    const waiting = b.call('slow', 'never', []);
    await new Promise((r) => setTimeout(r, 20));
    b.close(new Error('thread gone'));
    await assert.rejects(waiting, /thread gone/);
    await assert.rejects(b.call('slow', 'never', []), /thread gone/);
    close();
  });
});
