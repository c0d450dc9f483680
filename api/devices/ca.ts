// The certificate authority that issues device certificates from IDevID CSRs (@peculiar/x509).
// Configured with HUB_DEVICE_CA_CERT and HUB_DEVICE_CA_KEY (PEM); otherwise generated on first
// start and kept beside the signing key (embedded) or shared through Redis (development).
import 'reflect-metadata'; // @peculiar/x509's dependency injection needs it loaded first
import { randomBytes, webcrypto } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as x509 from '@peculiar/x509';
import type { Redis } from 'ioredis';

x509.cryptoProvider.set(webcrypto as never);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;

export class CsrError extends Error {}

export interface DeviceCa {
  certificatePem: string;
  /** Verifies the CSR's signature and issues a certificate for the device. */
  issue(csrPem: string, deviceId: string): Promise<{ certificate: string; subject: string }>;
}

async function fromPem(certPem: string, keyPem: string): Promise<DeviceCa> {
  const cert = new x509.X509Certificate(certPem);
  const der = Buffer.from(keyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const key = await webcrypto.subtle.importKey('pkcs8', der, ALG, false, ['sign']);
  return {
    certificatePem: cert.toString('pem'),
    async issue(csrPem, deviceId) {
      let csr: x509.Pkcs10CertificateRequest;
      try {
        csr = new x509.Pkcs10CertificateRequest(csrPem.trim());
      } catch {
        throw new CsrError('csr is not a PEM or DER certificate signing request');
      }
      let valid = false;
      try {
        valid = await csr.verify();
      } catch {
        throw new CsrError(
          'csr uses a key or signature algorithm that is not supported (use ECDSA on P-256, P-384 or P-521, or RSA)',
        );
      }
      if (!valid) throw new CsrError('csr signature does not verify against its public key');
      const issued = await x509.X509CertificateGenerator.create({
        serialNumber: randomBytes(16)
          .toString('hex')
          .replace(/^[89a-f]/, '1'),
        // The hub names the device, not the request: a CSR cannot claim another device's identity.
        subject: `CN=${deviceId}`,
        issuer: cert.subject,
        notBefore: new Date(Date.now() - 60_000),
        notAfter: new Date(Date.now() + 10 * 365 * 86400_000),
        publicKey: csr.publicKey,
        signingKey: key,
        signingAlgorithm: ALG,
        extensions: [
          new x509.SubjectAlternativeNameExtension([{ type: 'url', value: `prn:::devices:/${deviceId}` }]),
          new x509.BasicConstraintsExtension(false, undefined, true),
          new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
        ],
      });
      return { certificate: issued.toString('pem'), subject: csr.subject };
    },
  };
}

async function generate(): Promise<{ cert: string; key: string }> {
  const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: 'CN=Device Hub device CA',
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 20 * 365 * 86400_000),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, 0, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true),
    ],
  });
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey)).toString('base64');
  return {
    cert: cert.toString('pem'),
    key: `-----BEGIN PRIVATE KEY-----\n${pkcs8.match(/.{1,64}/g)!.join('\n')}\n-----END PRIVATE KEY-----\n`,
  };
}

/** Where the embedded profile keeps the CA certificate it generated (its key beside it). */
export const deviceCaFile = (dataDir: string) => join(dataDir, 'keys', 'device-ca.pem');

export interface DeviceCaSource {
  certPem: string;
  keyPem: string;
  dataDir?: string;
  redis?: Redis;
}

/** The CA's certificate and key in PEM: configured, else kept in the data dir (embedded) or shared
 * through Redis (distributed), made at the first start. */
export async function deviceCaPems(o: DeviceCaSource): Promise<{ cert: string; key: string }> {
  if (o.certPem && o.keyPem) return { cert: o.certPem, key: o.keyPem };
  if (o.dataDir) {
    const dir = join(o.dataDir, 'keys');
    try {
      return {
        cert: readFileSync(deviceCaFile(o.dataDir), 'utf8'),
        key: readFileSync(join(dir, 'device-ca.key'), 'utf8'),
      };
    } catch {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const { cert, key } = await generate();
      writeFileSync(join(dir, 'device-ca.key'), key, { mode: 0o600 });
      writeFileSync(deviceCaFile(o.dataDir), cert);
      return { cert, key };
    }
  }
  if (o.redis) {
    const { cert, key } = await generate();
    await o.redis.set('hub:keys:device-ca', JSON.stringify({ cert, key }), 'NX');
    const stored = JSON.parse((await o.redis.get('hub:keys:device-ca'))!);
    return { cert: stored.cert, key: stored.key };
  }
  throw new Error('no device CA: set HUB_DEVICE_CA_CERT and HUB_DEVICE_CA_KEY');
}

export async function loadDeviceCa(o: DeviceCaSource): Promise<DeviceCa> {
  const { cert, key } = await deviceCaPems(o);
  return fromPem(cert, key);
}
