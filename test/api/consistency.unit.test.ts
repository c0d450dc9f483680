// Read-your-writes bookkeeping: a stored write is answered even when remembering it fails or hangs.
import assert from 'node:assert/strict';
import type { Context } from 'koa';
import { consistency, type LastWrites, MemoryLastWrites } from '../../api/consistency.ts';

const context = () => {
  const headers: Record<string, string> = {};
  return {
    ctx: {
      state: { caller: 'alice' },
      set: (k: string, v: string) => (headers[k] = v),
    } as unknown as Context,
    headers,
  };
};

describe('read-your-writes (unit)', () => {
  it('remembers a write, and the next read waits for its position', async () => {
    const waited: number[] = [];
    const c = consistency(new MemoryLastWrites(), async (_names, position) => {
      waited.push(position);
    });
    const { ctx, headers } = context();
    await c.written(ctx, 42);
    assert.equal(headers['X-Hub-Position'], '42');
    await c.readable({ ...ctx, get: () => '' } as unknown as Context, ['devices']);
    assert.deepEqual(waited, [42]);
  });

  it('X-Hub-Min-Position is a decimal integer: waited for when larger than the last write; anything else refused (400)', async () => {
    const waited: number[] = [];
    const c = consistency(new MemoryLastWrites(), async (_names, position) => {
      waited.push(position);
    });
    const { ctx } = context();
    await c.written(ctx, 5);
    const reading = (header: string) => ({ ...ctx, get: () => header }) as unknown as Context;
    await c.readable(reading('1000'), ['devices']);
    await c.readable(reading('3'), ['devices']);
    assert.deepEqual(waited, [1000, 5]);
    for (const bad of ['abc', '-1', '1e3', '0x10', '1.5', '9'.repeat(16)]) {
      await assert.rejects(
        c.readable(reading(bad), ['devices']),
        (err: { status?: number; code?: string }) => {
          assert.equal(err.status, 400, bad);
          assert.equal(err.code, 'bad_request');
          return true;
        },
      );
    }
    assert.equal(waited.length, 2, 'a refused read waits for nothing');
  });

  it('a store of last writes that fails or hangs neither fails the answer nor holds it past a second', async () => {
    const failures: string[] = [];
    for (const lastWrites of [
      { remote: true, get: async () => 0, record: () => Promise.reject(new Error('Connection is closed.')) },
      { remote: true, get: async () => 0, record: () => new Promise<void>(() => {}) },
    ] satisfies LastWrites[]) {
      const c = consistency(
        lastWrites,
        async () => {},
        (err) => failures.push((err as Error).message),
      );
      const { ctx, headers } = context();
      const started = Date.now();
      await c.written(ctx, 7);
      assert.ok(Date.now() - started < 1500, `took ${Date.now() - started} ms`);
      assert.equal(headers['X-Hub-Position'], '7', 'the client can still ask for its write');
    }
    assert.equal(failures.length, 2);
    assert.match(failures[0]!, /Connection is closed/);
    assert.match(failures[1]!, /not remembered within/);
  });
});
