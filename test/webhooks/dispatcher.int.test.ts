// The dispatcher's per-subscription bounds with a real receiver and the embedded stores: a burst
// for one subscription is held only as far as its queue goes, and the rest waits in the schedule,
// due, instead of being taken and sent back for a second.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { benchSubscription } from '../../bench/report.ts';
import { MemoryBus } from '../../infra/bus/memory.ts';
import { TOPICS } from '../../infra/bus/port.ts';
import { openEventStore } from '../../infra/eventstore/open.ts';
import { type Job, SqliteDeliveryStore } from '../../processors/deliveries.ts';
import { Dispatcher } from '../../processors/dispatcher.ts';
import { Egress } from '../../processors/egress.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { memoryLogger, testConfig } from '../harness.ts';
import { event } from '../processors/eventlog.ts';
import { Receiver } from './receiver.ts';

describe('dispatcher bounds per subscription (int)', () => {
  it('holds a burst only as far as its subscription’s queue goes; the rest stays due', async () => {
    const config = testConfig();
    const store = await openEventStore(config);
    const deliveries = new SqliteDeliveryStore(join(config.dataDir, 'deliveries.sqlite'), {
      retentionMs: 86_400_000,
    });
    const rx = await new Receiver().start();
    const sealKey = randomBytes(32);
    const owner = 'prn:::accounts:/bounds';
    const sub = await benchSubscription(store, {
      owner,
      url: `${rx.url}/hang`,
      eventType: 'device.created',
      sealKey,
    });
    const metrics = new Registry();
    const bus = new MemoryBus({ logger: memoryLogger().logger });
    await bus.ensureTopics([{ topic: TOPICS.deliveries, partitions: 1 }]);
    const dispatcher = new Dispatcher({
      bus,
      registry: new SchemaRegistry(),
      deliveries,
      store,
      sealKey,
      egress: new Egress({ allowHttp: true, allowNetworks: ['127.0.0.0/8'] }),
      logger: memoryLogger().logger,
      metrics,
      version: 'test',
      timeoutMs: 1000,
      maxInFlight: 1024,
      maxInFlightPerSubscription: 2, // a queue of 16 waiting beside them
      rotationWindowMs: 0,
    });
    try {
      await dispatcher.start();
      const before = Date.now();
      const jobs: Job[] = Array.from({ length: 100 }, (_, i) => ({
        job_id: `job_bounds_${i}`,
        subscription_id: sub,
        owner,
        kind: 'event',
        event: event(owner, 'device.created', `d${i}`, Math.floor(before / 1000)),
        attempt: 0,
        enqueued: before,
      }));
      await dispatcher.take(jobs);
      await rx.waitFor('/hang', 2);
      await new Promise((r) => setTimeout(r, 300)); // claims in between find no room for the subscription
      const held = (await metrics.getSingleMetric('hub_webhook_jobs_held')!.get()).values[0]!.value;
      assert.ok(held >= 16 && held <= 18, `two attempts in flight and at most sixteen waiting: ${held}`);
      assert.equal(rx.at('/hang').length, 2, 'no more attempts than the subscription’s slots');
      const pending = await deliveries.pending();
      assert.equal(pending.count, 100);
      assert.ok(pending.oldestDue! <= Date.now(), 'the other 82 are due now, not sent back for later');
    } finally {
      await dispatcher.stop();
      await deliveries.close();
      await store.close();
      await rx.stop();
      await bus.close();
    }
  });
});
