// Read-your-writes over HTTP, on a real node of the embedded profile: a write answers its
// position, a read waits for the projection to pass it, and answers 503 (never stale data)
// when the projection cannot catch up within HUB_READ_WAIT_MS. Once with each caller's last write
// remembered (the main thread's, and Redis's alike), once as the API threads do it: a read waits
// for the store's head, whoever wrote last.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from '../../api/app.ts';
import {
  consistency,
  type LastWrites,
  MemoryLastWrites,
  StoreHeadLastWrites,
} from '../../api/consistency.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import { MemoryReadStore } from '../../infra/readstore/memory.ts';
import { createMetrics } from '../../infra/telemetry.ts';
import { waitForPosition } from '../../projections/consistency.ts';
import { ProjectionMetrics, ProjectionRunner } from '../../projections/runner.ts';
import { streamCatalog } from '../../projections/streams.ts';
import { memoryLogger, request, testConfig } from '../harness.ts';
import { newEventStore } from './contract.ts';

readYourWrites('each caller’s last write remembered', () => new MemoryLastWrites(), false);
readYourWrites('waiting for the store’s head (API threads)', (store) => new StoreHeadLastWrites(store), true);

function readYourWrites(
  name: string,
  lastWrites: (store: EventStore) => LastWrites,
  everyReadWaits: boolean,
) {
  describe(`read-your-writes, ${name} (e2e)`, () => {
    const config = testConfig({ HUB_READ_WAIT_MS: '400' });
    const logger = memoryLogger('silent').logger;
    const metrics = createMetrics();
    const store = newEventStore();
    const readStore = new MemoryReadStore();
    const runner = new ProjectionRunner({
      store,
      readStore,
      projection: streamCatalog,
      logger,
      metrics: new ProjectionMetrics(metrics.registry),
    });
    const reads = consistency(lastWrites(store), (projections, position) =>
      waitForPosition(readStore, projections, position, config.readWaitMs),
    );
    let url = '';
    let close = async () => {};

    before(async () => {
      const { app } = createApp({
        config,
        logger,
        metrics,
        mount: [
          (routes) => {
            routes.add({
              method: 'post',
              path: '/probe/streams/{id}',
              tag: 'probe',
              summary: 'Appends an event to a stream.',
              responses: { 200: { description: 'ok' } },
              handler: async (ctx) => {
                ctx.state.caller = ctx.get('x-caller') || undefined;
                const r = await store.append(ctx.params.id!, [
                  { id: randomUUID(), type: 'Probed', data: {} },
                ]);
                await reads.written(ctx, r.position);
                ctx.body = { revision: r.nextRevision };
              },
            });
            routes.add({
              method: 'get',
              path: '/probe/streams/{id}',
              tag: 'probe',
              summary: 'Reads the stream catalog entry.',
              responses: { 200: { description: 'ok' } },
              handler: async (ctx) => {
                ctx.state.caller = ctx.get('x-caller') || undefined;
                await reads.readable(ctx, ['streams']);
                const generation = await readStore.activeGeneration('streams');
                ctx.body = (await readStore.get('streams', generation, `stream:${ctx.params.id}`)) ?? {};
              },
            });
          },
        ],
      });
      const server = createServer(app.callback()).listen(0, '127.0.0.1');
      await once(server, 'listening');
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      close = async () => {
        server.closeAllConnections();
        server.close();
      };
      runner.start();
      await runner.caughtUp();
    });
    after(async () => {
      await runner.stop();
      await close();
      await store.close();
    });

    it('a write answers X-Hub-Position, and the next read sees it', async () => {
      for (let i = 0; i < 20; i++) {
        const w = await request(`${url}/probe/streams/s1`, {
          method: 'POST',
          headers: { 'x-caller': 'alice' },
        });
        assert.ok(Number(w.headers.get('x-hub-position')) > 0);
        const r = await request(`${url}/probe/streams/s1`, { headers: { 'x-caller': 'alice' } });
        assert.equal(r.status, 200);
        assert.equal(r.body.revision, w.body.revision, 'the read saw the write just made');
      }
    });

    it('metrics show the projection checkpoint, lag and applied events after traffic', async () => {
      const text = (await request(`${url}/metrics`)).body as string;
      const checkpoint = Number(
        /hub_projection_checkpoint_position\{projection="streams"\} (\d+)/.exec(text)?.[1],
      );
      assert.ok(checkpoint >= 20);
      assert.match(text, /hub_projection_lag_events\{projection="streams"\} 0/);
      assert.match(text, /hub_projection_lag_seconds\{projection="streams"\} 0/);
      assert.match(text, /hub_projection_events_applied_total\{projection="streams"\} [1-9]\d*/);
      assert.match(text, /hub_projection_batch_duration_seconds_count\{projection="streams"\} [1-9]/);
    });

    it('answers 503 stale_read when the projection cannot catch up in time, for the writer and for X-Hub-Min-Position', async () => {
      await runner.stop();
      const w = await request(`${url}/probe/streams/s2`, { method: 'POST', headers: { 'x-caller': 'bob' } });
      const started = Date.now();
      const r = await request(`${url}/probe/streams/s2`, { headers: { 'x-caller': 'bob' } });
      assert.equal(r.status, 503);
      assert.equal(r.body.error, 'stale_read');
      assert.equal(r.headers.get('retry-after'), '1');
      assert.ok(Date.now() - started >= 390);
      const other = await request(`${url}/probe/streams/s2`, {
        headers: { 'x-hub-min-position': w.headers.get('x-hub-position')! },
      });
      assert.equal(other.status, 503);
      // Another caller, who wrote nothing, is held up only where every read waits for the head.
      assert.equal(
        (await request(`${url}/probe/streams/s1`, { headers: { 'x-caller': 'carol' } })).status,
        everyReadWaits ? 503 : 200,
      );
    });
  });
}
