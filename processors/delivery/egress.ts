// Where webhooks may go: HTTPS to public addresses only. A URL is checked when a subscription is
// saved and again at every attempt; at delivery the connection goes to the very address that was
// checked (the lookup below is undici's), so DNS rebinding cannot slip a private address in.
// Plain HTTP and listed address ranges can be allowed for development and tests.
import { lookup } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/** Loopback, private, link-local (cloud metadata), CGNAT, multicast, reserved, and their IPv6 kin.
 * (No rule for IPv4-mapped IPv6: BlockList would apply it to every IPv4 address; `allows`
 * unwraps mapped addresses instead.) */
const FORBIDDEN = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24], // the 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  FORBIDDEN.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 96], // unspecified, loopback, and IPv4-compatible (deprecated: ::127.0.0.1)
  ['::ffff:0:0:0', 96], // IPv4-translated (::ffff:0:127.0.0.1)
  ['64:ff9b::', 96],
  ['64:ff9b:1::', 48],
  ['2001::', 32], // Teredo
  ['2002::', 16], // 6to4
  ['fec0::', 10],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const)
  FORBIDDEN.addSubnet(net, bits, 'ipv6');

export interface EgressPolicy {
  allowHttp: boolean;
  /** CIDR ranges allowed although private (e.g. `127.0.0.0/8` in tests). */
  allowNetworks: string[];
}

export class EgressError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EgressError';
  }
}

export class Egress {
  /** As given: the dispatcher's HTTP thread makes its own Egress from it. */
  readonly policy: EgressPolicy;
  private readonly allowHttp: boolean;
  private readonly allowed = new BlockList();

  constructor(policy: EgressPolicy) {
    this.policy = { allowHttp: policy.allowHttp, allowNetworks: [...policy.allowNetworks] };
    this.allowHttp = policy.allowHttp;
    for (const cidr of policy.allowNetworks) {
      const [net, bits] = cidr.split('/');
      const family = isIP(net ?? '') === 6 ? 'ipv6' : 'ipv4';
      this.allowed.addSubnet(net!, Number(bits ?? (family === 'ipv6' ? 128 : 32)), family);
    }
  }

  /** The URL's own rules (scheme, no credentials); throws EgressError. */
  checkUrl(raw: string): URL {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      throw new EgressError('is not a URL');
    }
    if (url.protocol !== 'https:' && !(this.allowHttp && url.protocol === 'http:'))
      throw new EgressError(this.allowHttp ? 'must use https or http' : 'must use https');
    if (url.username || url.password) throw new EgressError('must not carry credentials');
    return url;
  }

  /** Whether an address may be called. */
  allows(address: string): boolean {
    const family = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    const mapped = family === 'ipv6' ? /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] : undefined;
    if (mapped) return this.allows(mapped);
    if (this.allowed.check(address, family)) return true;
    return !FORBIDDEN.check(address, family);
  }

  /** The checks that need no lookup: the URL's own rules, and its host when that is an address.
   * Throws EgressError. */
  checkTarget(raw: string): { url: URL; address: boolean } {
    const url = this.checkUrl(raw);
    const host = url.hostname.replace(/^\[|\]$/g, '');
    if (!isIP(host)) return { url, address: false };
    if (!this.allows(host)) throw new EgressError(`${host} is not a public address`);
    return { url, address: true };
  }

  /** Resolves the URL's host and throws EgressError unless every address is allowed. */
  async checkReachable(raw: string): Promise<void> {
    const { url, address } = this.checkTarget(raw);
    if (address) return;
    const host = url.hostname;
    const addresses = await new Promise<string[]>((resolve, reject) =>
      lookup(host, { all: true }, (err, found) =>
        err ? reject(new EgressError('does not resolve')) : resolve(found.map((a) => a.address)),
      ),
    );
    // Which address it was stays out of the answer: it would tell what internal names resolve to.
    if (addresses.some((a) => !this.allows(a)))
      throw new EgressError('does not resolve to public addresses only');
  }

  /** A lookup for undici's connector: resolves, refuses forbidden addresses, and hands back
   * only allowed ones, so the socket connects to an address that was checked. */
  readonly lookup: LookupFunction = (hostname, options, callback) => {
    lookup(hostname, { ...options, all: true }, (err, found) => {
      if (err) return callback(err, '', 0);
      const ok = (found as { address: string; family: number }[]).filter((a) => this.allows(a.address));
      if (ok.length === 0 || ok.length < (found as unknown[]).length) {
        return callback(
          Object.assign(new EgressError(`${hostname} resolves to an address that is not public`), {
            code: 'EHUBEGRESS',
          }),
          '',
          0,
        );
      }
      if ((options as { all?: boolean }).all)
        return (callback as unknown as (e: null, a: typeof ok) => void)(null, ok);
      callback(null, ok[0]!.address, ok[0]!.family);
    });
  };
}
