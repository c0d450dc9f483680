// Signing keys. One ES256 key pair signs every JWT; the HMAC key for emailed tokens is derived
// from it, so an operator manages one secret. Embedded: generated on first start and kept in
// HUB_DATA_DIR/keys. Distributed: HUB_JWT_PRIVATE_KEY, or (for development) generated once and
// shared through Redis, with a warning.
import { createHash, createPrivateKey, createPublicKey, hkdfSync, type KeyObject } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Redis } from 'ioredis';
import { exportJWK, exportPKCS8, generateKeyPair, type JWK } from 'jose';
import { ConfigError } from '../../infra/config.ts';
import type { Logger } from '../../infra/telemetry.ts';

export interface Keys {
  privateKey: KeyObject;
  /** SPKI PEM: what koa-jwt verifies with. */
  publicPem: string;
  jwk: JWK & { kid: string };
  kid: string;
  /** For HMACs of emailed tokens. */
  hmacKey: Buffer;
  /** AES-256-GCM key that seals device secrets in events. */
  sealKey: Buffer;
}

async function generatePem(): Promise<string> {
  const { privateKey } = await generateKeyPair('ES256', { extractable: true });
  return exportPKCS8(privateKey);
}

export async function fromPem(pem: string): Promise<Keys> {
  const privateKey = createPrivateKey(pem);
  const publicKey = createPublicKey(privateKey);
  const publicPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const jwk = await exportJWK(publicKey);
  const kid = createHash('sha256').update(publicPem).digest('base64url').slice(0, 16);
  const der = privateKey.export({ type: 'pkcs8', format: 'der' });
  const hmacKey = Buffer.from(hkdfSync('sha256', der, 'device-hub', 'emailed-token-hmac', 32));
  const sealKey = Buffer.from(hkdfSync('sha256', der, 'device-hub', 'device-secret-seal', 32));
  return { privateKey, publicPem, jwk: { ...jwk, kid, alg: 'ES256', use: 'sig' }, kid, hmacKey, sealKey };
}

/** Where the embedded profile keeps the key it generated. */
export const jwtKeyFile = (dataDir: string) => join(dataDir, 'keys', 'jwt-es256.pem');

export async function loadKeys(
  /** `holdsData`: the event store already has events, signed and sealed with the key there was. */
  options: { configured: string; dataDir?: string; redis?: Redis; holdsData?: boolean },
  logger: Logger,
): Promise<Keys> {
  if (options.configured) return fromPem(options.configured);
  // A new key would end every token and leave every sealed device and webhook secret unreadable:
  // made on a first start only, never in place of one that went missing.
  const missing = (variable: string, what: string) =>
    new ConfigError(
      variable,
      `${what}, but the event store holds data signed and sealed with it: restore it, or set HUB_JWT_PRIVATE_KEY to it (a new key would end every token and leave device and webhook secrets unreadable).`,
    );
  if (options.dataDir) {
    const file = jwtKeyFile(options.dataDir);
    let pem: string | undefined;
    try {
      pem = readFileSync(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    if (pem !== undefined) {
      try {
        return await fromPem(pem);
      } catch {
        throw new ConfigError(
          'HUB_DATA_DIR',
          `holds ${file}, which is not a private key in PEM: restore the hub's key.`,
        );
      }
    }
    if (options.holdsData) throw missing('HUB_DATA_DIR', `has lost its signing key ${file}`);
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    writeFileSync(file, await generatePem(), { mode: 0o600, flag: 'wx' });
    logger.info({ file }, 'generated the JWT signing key');
    return fromPem(readFileSync(file, 'utf8'));
  }
  if (options.redis) {
    logger.warn(
      'HUB_JWT_PRIVATE_KEY is not set: using a key generated once and shared through Redis (development only)',
    );
    const shared = await options.redis.get(REDIS_KEY);
    if (shared) return fromPem(shared);
    if (options.holdsData)
      throw missing(
        'HUB_JWT_PRIVATE_KEY',
        `is not set and the key shared through Redis (${REDIS_KEY}) is gone`,
      );
    await options.redis.set(REDIS_KEY, await generatePem(), 'NX');
    const pem = await options.redis.get(REDIS_KEY);
    if (pem) return fromPem(pem);
  }
  throw new Error('no signing key: set HUB_JWT_PRIVATE_KEY');
}

const REDIS_KEY = 'hub:keys:jwt-es256';
