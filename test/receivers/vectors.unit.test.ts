// The shared webhook vectors: the file is what the hub's signer makes now, and the TypeScript
// receiver (`device-hub/webhooks`, the package's export of processors/delivery/signing.ts) gives
// each case its expected result and refusal reason. The Python and Go receivers read the same file
// (receivers.int.test.ts).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { verifyWebhook, WEBHOOK_REFUSALS, WebhookVerificationError } from 'device-hub/webhooks';
import { describe, it } from 'mocha';
import {
  WEBHOOK_VECTORS_FILE,
  type WebhookVector,
  type WebhookVectors,
  webhookVectors,
  webhookVectorsText,
} from '../fixtures/webhook-vectors.ts';

const fromFile = (): WebhookVectors => JSON.parse(readFileSync(WEBHOOK_VECTORS_FILE, 'utf8'));

/** What verifyWebhook makes of a case, in the file's terms. */
function outcome(v: WebhookVector, toleranceS: number): Pick<WebhookVector, 'expect' | 'reason'> {
  try {
    const payload = verifyWebhook({
      body: Buffer.from(v.body, 'utf8'),
      headers: v.headers,
      secrets: v.secrets,
      now: v.now,
      toleranceS: v.tolerance_s ?? toleranceS,
    });
    assert.deepEqual(payload, JSON.parse(v.body), `${v.name}: the payload returned is the body's`);
    return { expect: 'accepted', reason: null };
  } catch (e) {
    if (!(e instanceof WebhookVerificationError)) throw e;
    return { expect: 'refused', reason: e.reason };
  }
}

/** The cases whose outcome is not the one the file expects, each with what came instead. */
const disagreements = (vectors: WebhookVectors) =>
  vectors.cases.flatMap((v) => {
    const got = outcome(v, vectors.tolerance_s);
    return got.expect === v.expect && got.reason === v.reason
      ? []
      : [`${v.name}: expected ${v.reason ?? v.expect}, got ${got.reason ?? got.expect}`];
  });

describe('webhook vectors (unit)', () => {
  it('test/fixtures/webhook-vectors.json is what the signer makes (node test/fixtures/webhook-vectors.ts writes it)', () => {
    assert.equal(readFileSync(WEBHOOK_VECTORS_FILE, 'utf8'), webhookVectorsText());
  });

  it('covers what receivers meet: every refusal reason, rotation with two entries, both sides of the window', () => {
    const { cases, reasons } = fromFile();
    assert.deepEqual(Object.keys(reasons), Object.keys(WEBHOOK_REFUSALS));
    for (const reason of Object.keys(WEBHOOK_REFUSALS))
      assert.ok(
        cases.some((v) => v.reason === reason),
        `a case refused as ${reason}`,
      );
    assert.ok(cases.filter((v) => v.expect === 'accepted').length >= 10);
    const rotated = cases.find((v) => v.name === 'rotation_verified_with_the_old_secret')!;
    assert.equal(rotated.headers['webhook-signature']!.split(' ').length, 2);
    assert.equal(new Set(cases.map((v) => v.name)).size, cases.length, 'names are unique');
  });

  it('verifyWebhook gives every case its expected result and refusal reason', () => {
    const vectors = fromFile();
    assert.deepEqual(disagreements(vectors), []);
  });

  it('a tampered vector, and a flipped expectation, are disagreements', () => {
    const vectors = fromFile();
    const valid = vectors.cases.find((v) => v.name === 'valid')!;
    valid.body = valid.body.replace('"temp":"21.5"', '"temp":"21.6"');
    vectors.cases.find((v) => v.name === 'tampered_body')!.expect = 'accepted';
    vectors.cases.find((v) => v.name === 'tampered_body')!.reason = null;
    vectors.cases.find((v) => v.name === 'future_timestamp')!.reason = 'timestamp_too_old';
    assert.deepEqual(disagreements(vectors), [
      'valid: expected accepted, got no_matching_signature',
      'future_timestamp: expected timestamp_too_old, got timestamp_too_new',
      'tampered_body: expected accepted, got no_matching_signature',
    ]);
    // And the file check sees a signature the signer would not make.
    assert.notEqual(webhookVectorsText(vectors), webhookVectorsText(webhookVectors()));
  });
});
