// Password hashing (scrypt) and the tokens we email (verification, password reset): an HMAC of
// the account, a nonce recorded in the account's events and the purpose, so only the server can
// make one and the event store never holds a usable link.
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  randomBytes,
  scrypt,
  timingSafeEqual,
} from 'node:crypto';

const N = 16384;
const R = 8;
const P = 1;
const LENGTH = 32;

function derive(password: string, salt: Buffer, n: number, r: number, p: number): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password, salt, LENGTH, { N: n, r, p, maxmem: 64 * 1024 * 1024 }, (err, key) =>
      err ? reject(err) : resolve(key),
    ),
  );
}

/** `scrypt$N$r$p$salt$hash`, base64url. */
export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  const key = await derive(password, salt, N, R, P);
  return `scrypt$${N}$${R}$${P}$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const [scheme, n, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const key = await derive(password, Buffer.from(salt, 'base64url'), Number(n), Number(r), Number(p));
  const expected = Buffer.from(hash, 'base64url');
  return key.length === expected.length && timingSafeEqual(key, expected);
}

/** A hash to compare against when the account does not exist, so both cases take as long. */
export const DUMMY_HASH = `scrypt$${N}$${R}$${P}$${Buffer.alloc(16).toString('base64url')}$${Buffer.alloc(32).toString('base64url')}`;

export const nonce = () => randomBytes(16).toString('base64url');
export const secretToken = (bytes = 32) => randomBytes(bytes).toString('base64url');
export const sha256 = (text: string) => createHash('sha256').update(text).digest('base64url');

export type EmailedPurpose = 'verify' | 'reset';

export function emailedToken(key: Buffer, purpose: EmailedPurpose, accountId: string, n: string): string {
  const mac = createHmac('sha256', key).update(`${purpose}.${accountId}.${n}`).digest('base64url');
  return `${accountId}.${n}.${mac}`;
}

/** The account and nonce of a token we made for this purpose, or undefined when it is not ours. */
export function readEmailedToken(
  key: Buffer,
  purpose: EmailedPurpose,
  token: string,
): { accountId: string; nonce: string } | undefined {
  const [accountId, n, mac] = token.split('.');
  if (!accountId || !n || !mac) return undefined;
  const expected = Buffer.from(emailedToken(key, purpose, accountId, n).split('.')[2]!);
  const given = Buffer.from(mac);
  return given.length === expected.length && timingSafeEqual(given, expected)
    ? { accountId, nonce: n }
    : undefined;
}

/** Seals a secret the server must show again later (device secrets): AES-256-GCM, iv.tag.data. */
export function seal(key: Buffer, secret: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const data = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
  return `${iv.toString('base64url')}.${cipher.getAuthTag().toString('base64url')}.${data.toString('base64url')}`;
}

export function unseal(key: Buffer, sealed: string): string {
  const [iv, tag, data] = sealed.split('.');
  const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv!, 'base64url'));
  decipher.setAuthTag(Buffer.from(tag!, 'base64url'));
  return Buffer.concat([decipher.update(Buffer.from(data!, 'base64url')), decipher.final()]).toString('utf8');
}

export function sameSecret(a: string, b: string): boolean {
  const x = createHash('sha256').update(a).digest();
  const y = createHash('sha256').update(b).digest();
  return timingSafeEqual(x, y);
}
