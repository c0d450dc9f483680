// Webhook signatures, both sides: the dispatcher signs, receivers verify. The signed text is
// `{Webhook-Id}.{Webhook-Timestamp}.{raw body}`; the signature is the hex HMAC-SHA256 of it keyed
// with the subscription's signing secret (its UTF-8 bytes, `whsec_` prefix included), sent as
// `v1,<hex>`. While a rotation overlaps the header carries one entry per secret.
//
// Receivers: `import { verifyWebhook } from 'device-hub/webhooks'` (this file has no other imports
// than node:crypto, so it can be copied as is). See docs/webhooks.md for an example receiver.
import { createHash, createHmac, hash, randomBytes, timingSafeEqual } from 'node:crypto';

export const newSigningSecret = () => `whsec_${randomBytes(32).toString('base64url')}`;

export function signature(secret: string, id: string, timestamp: number, body: string | Buffer): string {
  return createHmac('sha256', secret).update(`${id}.${timestamp}.`).update(body).digest('hex');
}

/**
 * The dispatcher's side: a subscription's secrets made ready to sign many deliveries, each
 * `header()` the `Webhook-Signature` value (one `v1,<hex>` entry per secret, separated by a space).
 * The HMAC is RFC 2104's, from two one-shot SHA-256 digests over key blocks padded once here: a
 * createHmac per delivery set up a MAC context and imported the key each time, and in the
 * dispatcher signing took 12 % of its thread (9 % with this). Equal to `signature()`, as the unit
 * tests check.
 */
export class WebhookSigner {
  /** Per secret: the inner key block (64 bytes), and the outer one with room for the inner digest. */
  private readonly pads: { inner: Buffer; outer: Buffer }[];

  constructor(secrets: string[]) {
    this.pads = secrets.map((secret) => {
      let key = Buffer.from(secret, 'utf8');
      if (key.length > BLOCK) key = createHash('sha256').update(key).digest();
      const inner = Buffer.alloc(BLOCK, 0x36);
      const outer = Buffer.alloc(BLOCK + 32, 0x5c);
      for (let i = 0; i < key.length; i++) {
        inner[i]! ^= key[i]!;
        outer[i]! ^= key[i]!;
      }
      return { inner, outer };
    });
  }

  /** The three `Webhook-*` headers of a delivery, as the dispatcher sends them (the vectors of
   * test/fixtures/webhook-vectors.json are made by this too). */
  headers(id: string, timestamp: number, body: string | Buffer) {
    return {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': this.header(id, timestamp, body),
    };
  }

  /** `body` as sent: its UTF-8 bytes, or the string they encode. */
  header(id: string, timestamp: number, body: string | Buffer): string {
    // The signed text, after the inner key block, in a buffer reused while it is big enough.
    const prefix = `${id}.${timestamp}.`;
    const most = BLOCK + prefix.length * 3 + body.length * 3; // UTF-8: at most 3 bytes a UTF-16 unit
    if (scratch.length < most) scratch = Buffer.allocUnsafe(Math.max(most, scratch.length * 2));
    let end = BLOCK + scratch.write(prefix, BLOCK, 'utf8');
    end += typeof body === 'string' ? scratch.write(body, end, 'utf8') : body.copy(scratch, end);
    let out = '';
    for (const { inner, outer } of this.pads) {
      inner.copy(scratch, 0);
      // The inner digest as hex, written into the outer block: a Buffer out of hash() cost twice
      // what the hash did.
      outer.write(hash('sha256', scratch.subarray(0, end), 'hex'), BLOCK, 'hex');
      out += `${out === '' ? '' : ' '}v1,${hash('sha256', outer, 'hex')}`;
    }
    return out;
  }
}
const BLOCK = 64; // SHA-256's block size
let scratch = Buffer.allocUnsafe(16_384);

/**
 * Why a delivery is refused, by name: the same names in the TypeScript, Python and Go receivers
 * and in the shared vectors (test/fixtures/webhook-vectors.json). The checks run in this order, and
 * the first that fails names the refusal.
 */
export const WEBHOOK_REFUSALS = {
  no_secret: 'no secret to verify with, or an empty one (a blank setting would let anyone sign)',
  missing_header: 'Webhook-Id, Webhook-Timestamp or Webhook-Signature is absent or empty',
  malformed_timestamp: 'Webhook-Timestamp is not 1 to 12 ASCII digits (Unix seconds)',
  timestamp_too_old: 'Webhook-Timestamp is more than the tolerance before now: a replay, or a clock far off',
  timestamp_too_new: 'Webhook-Timestamp is more than the tolerance after now: a clock far off',
  malformed_signature: 'Webhook-Signature has no entry of the shape v1,<64 lower-case hex digits>',
  no_matching_signature:
    'no v1 entry is the signature of this id, timestamp and body with any of the secrets',
} as const;
export type WebhookRefusal = keyof typeof WEBHOOK_REFUSALS;

export class WebhookVerificationError extends Error {
  readonly reason: WebhookRefusal;

  constructor(reason: WebhookRefusal, message: string) {
    super(message);
    this.name = 'WebhookVerificationError';
    this.reason = reason;
  }
}

/**
 * Verifies a delivery as received: the raw body bytes (not re-serialised JSON), the request
 * headers, and the secrets the receiver accepts (during a rotation, the old and the new one).
 * Throws WebhookVerificationError, its `reason` one of WEBHOOK_REFUSALS, when a header is missing
 * or malformed, the timestamp is more than `toleranceS` seconds from `now` (either way), or no `v1`
 * entry matches any secret. Returns the parsed payload.
 */
export function verifyWebhook(o: {
  body: string | Buffer;
  headers: Record<string, string | string[] | undefined>;
  secrets: string | string[];
  toleranceS?: number;
  /** Unix seconds. */
  now?: number;
}): unknown {
  // A secret that is empty (a receiver's setting left blank) would let anyone sign: refused.
  const secrets = Array.isArray(o.secrets) ? o.secrets : [o.secrets];
  if (secrets.length === 0 || secrets.some((s) => typeof s !== 'string' || s === ''))
    throw new WebhookVerificationError(
      'no_secret',
      'no secret to verify with: each must be a non-empty string',
    );
  // Header names in any case: Node lower-cases them, other frameworks keep the sender's.
  const header = (name: string) => {
    let v = o.headers[name];
    if (v === undefined)
      for (const key of Object.keys(o.headers))
        if (key.toLowerCase() === name) {
          v = o.headers[key];
          break;
        }
    return Array.isArray(v) ? v[0] : v;
  };
  const id = header('webhook-id');
  const timestamp = header('webhook-timestamp');
  const signatures = header('webhook-signature');
  if (!id || !timestamp || !signatures)
    throw new WebhookVerificationError('missing_header', 'missing Webhook-* headers');
  if (!/^\d{1,12}$/.test(timestamp))
    throw new WebhookVerificationError('malformed_timestamp', 'malformed Webhook-Timestamp');
  const now = o.now ?? Math.floor(Date.now() / 1000);
  const toleranceS = o.toleranceS ?? 300;
  if (now - Number(timestamp) > toleranceS)
    throw new WebhookVerificationError(
      'timestamp_too_old',
      'stale Webhook-Timestamp: a replay, or a clock far off',
    );
  if (Number(timestamp) - now > toleranceS)
    throw new WebhookVerificationError(
      'timestamp_too_new',
      'Webhook-Timestamp in the future: a clock far off',
    );
  const given = signatures
    .split(/\s+/)
    .filter(Boolean)
    .map((entry) => /^v1,([0-9a-f]{64})$/.exec(entry)?.[1])
    .filter((hex): hex is string => hex !== undefined)
    .map((hex) => Buffer.from(hex, 'hex'));
  if (given.length === 0)
    throw new WebhookVerificationError('malformed_signature', 'no v1 signature in Webhook-Signature');
  for (const secret of secrets) {
    const expected = Buffer.from(signature(secret, id, Number(timestamp), o.body), 'hex');
    if (given.some((g) => timingSafeEqual(g, expected))) return JSON.parse(o.body.toString());
  }
  throw new WebhookVerificationError('no_matching_signature', 'no signature matches');
}
