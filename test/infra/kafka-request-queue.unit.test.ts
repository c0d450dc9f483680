// The kafkajs request queue as the Kafka bus patches it (stopIdleRequestQueueLoop): a check of the
// pending requests is scheduled while requests wait or the broker throttles, and never otherwise.
import assert from 'node:assert/strict';
import { KafkaRequestQueue } from '../../infra/bus/kafka.ts';

const quiet = { debug() {}, info() {}, warn() {}, error() {} };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A queue whose checks are counted (and send nothing: no connection behind it). */
function queue() {
  const q = new KafkaRequestQueue({
    maxInFlightRequests: 1,
    requestTimeout: 30_000,
    enforceRequestTimeout: false,
    clientId: 'unit',
    broker: 'nowhere:9092',
    logger: quiet,
  });
  const counted = { q, checks: 0 };
  const check = q.checkPendingRequests.bind(q);
  q.checkPendingRequests = () => {
    counted.checks++;
    // The real check, with no request to send: it only schedules the next one.
    const pending = q.pending;
    q.pending = [];
    check();
    q.pending = pending;
    if (pending.length > 0 && !q.throttleCheckTimeoutId) q.scheduleCheckPendingRequests();
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

  it('a request waiting is checked again every interval (10 ms)', async () => {
    const c = queue();
    c.q.pending.push({});
    c.q.scheduleCheckPendingRequests();
    await sleep(55);
    clearTimeout(c.q.throttleCheckTimeoutId!);
    assert.ok(c.checks >= 2 && c.checks <= 6, `${c.checks} checks in 55 ms`);
  });

  it('throttled by the broker: checked once the throttle ends, pending or not', async () => {
    for (const pending of [[], [{}]]) {
      const c = queue();
      c.q.pending = pending;
      c.q.throttledUntil = Date.now() + 60;
      c.q.scheduleCheckPendingRequests();
      await sleep(30);
      assert.equal(c.checks, 0);
      await sleep(60);
      clearTimeout(c.q.throttleCheckTimeoutId!);
      assert.ok(c.checks >= 1, 'checked after the throttle');
    }
  });
});
