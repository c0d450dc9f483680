// The kafkajs request queue as the Kafka bus patches it (stopIdleRequestQueueLoop): a check of the
// pending requests is scheduled while requests wait or the broker throttles, and never otherwise.
import assert from 'node:assert/strict';
import { KafkaRequestQueue } from '../../infra/bus/kafka.ts';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A queue whose checks are counted. `busy`: its one request in flight is taken (by an answer
 * that never comes), so a pending request stays pending and nothing is sent anywhere. */
function queue(o: { busy?: boolean; pending?: number } = {}) {
  const q = new KafkaRequestQueue({
    maxInFlightRequests: 1,
    requestTimeout: 30_000,
    enforceRequestTimeout: false,
    clientId: 'unit',
    broker: 'nowhere:9092',
    logger: quiet,
  }) as InstanceType<typeof KafkaRequestQueue> & { inflight: Map<number, unknown> };
  if (o.busy) q.inflight.set(1, {});
  for (let i = 0; i < (o.pending ?? 0); i++) q.pending.push({});
  const counted = { q, checks: 0 };
  const check = q.checkPendingRequests.bind(q);
  q.checkPendingRequests = () => {
    counted.checks++;
    check();
  };
  return counted;
}

describe('kafkajs request queue, patched (unit)', () => {
  it('idle and unthrottled: no check is scheduled (kafkajs 2.2.4 ran one every millisecond)', async () => {
    const c = queue();
    c.q.checkPendingRequests(); // what every answer calls
    assert.equal(c.q.throttleCheckTimeoutId, null);
    await sleep(50);
    assert.equal(c.checks, 1);
  });

  it('a request waiting for a place in flight is checked again every 10 ms until it goes', async () => {
    const c = queue({ busy: true, pending: 1 });
    c.q.checkPendingRequests();
    await sleep(150);
    clearTimeout(c.q.throttleCheckTimeoutId!);
    // About 15; a stalled event loop on a busy machine fires fewer, never none.
    assert.ok(c.checks >= 3, `${c.checks} checks in 150 ms`);
    assert.equal(c.q.pending.length, 1);
  });

  it('throttled by the broker: checked once the throttle ends, pending or not', async () => {
    for (const pending of [0, 1]) {
      const c = queue({ busy: true, pending });
      c.q.throttledUntil = Date.now() + 60;
      c.q.scheduleCheckPendingRequests();
      await sleep(30);
      assert.equal(c.checks, 0);
      await sleep(100);
      clearTimeout(c.q.throttleCheckTimeoutId!);
      assert.ok(c.checks >= 1, 'checked after the throttle');
    }
  });
});
