// The dispatcher's signer against node:crypto's HMAC, computed here (not through signing.ts).
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { verifyWebhook, WebhookSigner } from '../../../processors/delivery/signing.ts';

const hmacHex = (secret: string, text: string) => createHmac('sha256', secret).update(text).digest('hex');

describe('webhook signer (unit)', () => {
  it('is HMAC-SHA256 of "{id}.{timestamp}.{body}", one entry per secret, for any key and body length', () => {
    const secrets = [
      'whsec_short',
      `whsec_${randomBytes(32).toString('base64url')}`, // as the hub makes them
      'k'.repeat(64), // exactly a block
      `whsec_${'long'.repeat(40)}`, // beyond a block: hashed first
      'clé ✓ secrète', // not ASCII
    ];
    const bodies = [
      '',
      '{"id":"evt_1","data":{"temp":"21"}}',
      JSON.stringify({ text: 'héllo ✓ 😀 '.repeat(100) }),
      JSON.stringify({ big: 'x'.repeat(40_000) }), // more than the reused buffer holds at first
      '{"after":"the big one"}', // the buffer grown stays right for a small one
    ];
    for (const body of bodies) {
      const expected = secrets.map((s) => `v1,${hmacHex(s, `del_0123abcd.1763790000.${body}`)}`).join(' ');
      const signer = new WebhookSigner(secrets);
      assert.equal(
        signer.header('del_0123abcd', 1_763_790_000, body),
        expected,
        `body of ${body.length} characters`,
      );
      // The dispatcher signs the bytes it sends.
      assert.equal(signer.header('del_0123abcd', 1_763_790_000, Buffer.from(body)), expected, 'as bytes');
    }
  });

  it('is what verifyWebhook accepts, with each secret on its own', () => {
    const signer = new WebhookSigner(['whsec_new', 'whsec_old']);
    const body = '{"id":"evt_2"}';
    const headers = {
      'webhook-id': 'del_1',
      'webhook-timestamp': '1763790000',
      'webhook-signature': signer.header('del_1', 1_763_790_000, body),
    };
    for (const secrets of ['whsec_new', 'whsec_old'])
      assert.deepEqual(verifyWebhook({ body, headers, secrets, now: 1_763_790_000 }), { id: 'evt_2' });
    assert.throws(
      () => verifyWebhook({ body, headers, secrets: 'whsec_other', now: 1_763_790_000 }),
      /no signature matches/,
    );
  });

  it('verifyWebhook finds the headers in any case, and refuses to verify with an empty secret', () => {
    const body = '{"id":"evt_3"}';
    const signed = (secret: string) => `v1,${hmacHex(secret, `del_2.1763790000.${body}`)}`;
    // As the specification spells them, and as frameworks that keep the sender's case hand them over.
    const capitals = {
      'Webhook-Id': 'del_2',
      'Webhook-Timestamp': '1763790000',
      'Webhook-Signature': signed('whsec_x'),
    };
    assert.deepEqual(verifyWebhook({ body, headers: capitals, secrets: 'whsec_x', now: 1_763_790_000 }), {
      id: 'evt_3',
    });
    // Signed with an empty key: a receiver whose secret setting is blank must not accept it.
    const forged = { ...capitals, 'Webhook-Signature': signed('') };
    for (const secrets of ['', [''], ['whsec_x', ''], []])
      assert.throws(
        () => verifyWebhook({ body, headers: forged, secrets, now: 1_763_790_000 }),
        /no secret to verify with/,
        JSON.stringify(secrets),
      );
  });
});
