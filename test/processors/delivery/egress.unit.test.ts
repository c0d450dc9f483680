// Where webhooks may go: the address rules, the URL rules, and the connector's lookup, which
// hands undici only addresses that passed (so a name that resolves to a private address, as in
// DNS rebinding, never gets a connection).
import assert from 'node:assert/strict';
import { Egress, EgressError } from '../../../processors/delivery/egress.ts';

describe('webhook egress rules (unit)', () => {
  const strict = new Egress({ allowHttp: false, allowNetworks: [] });

  it('refuses loopback, private, link-local, metadata, CGNAT and their IPv6 kin; allows public addresses', () => {
    for (const a of [
      '127.0.0.1',
      '10.1.2.3',
      '172.16.0.1',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      'fd00::1',
      'fe80::1',
      '::ffff:127.0.0.1',
      // IPv4-compatible and IPv4-translated IPv6, and the 6to4 relay: reserved too.
      '::127.0.0.1',
      '::a00:1',
      '::1.2.3.4',
      '::ffff:0:7f00:1',
      '192.88.99.1',
    ])
      assert.equal(strict.allows(a), false, a);
    for (const a of ['93.184.216.34', '1.1.1.1', '2606:4700:4700::1111', '::ffff:1.1.1.1'])
      assert.equal(strict.allows(a), true, a);
  });

  it('allows listed ranges and plain HTTP only when configured', () => {
    const dev = new Egress({ allowHttp: true, allowNetworks: ['127.0.0.0/8'] });
    assert.equal(dev.allows('127.0.0.1'), true);
    assert.equal(dev.allows('10.0.0.1'), false);
    assert.throws(() => strict.checkUrl('http://example.com/'), /must use https/);
    assert.equal(dev.checkUrl('http://example.com/').protocol, 'http:');
    assert.throws(() => strict.checkUrl('https://user:pw@example.com/'), /credentials/);
    assert.throws(() => strict.checkUrl('not a url'), EgressError);
  });

  it('refuses a URL whose name resolves to a private address, at saving and in the connector', async () => {
    await assert.rejects(strict.checkReachable('https://localhost/hook'), /public addresses only/);
    const { error } = await new Promise<{ error: Error | null }>((resolve) =>
      strict.lookup('localhost', {}, (error) => resolve({ error })),
    );
    assert.match(String(error?.message), /not public/);
    const dev = new Egress({ allowHttp: true, allowNetworks: ['127.0.0.0/8', '::1/128'] });
    const found = await new Promise<string>((resolve, reject) =>
      dev.lookup('localhost', {}, (error, address) => (error ? reject(error) : resolve(address as string))),
    );
    assert.ok(['127.0.0.1', '::1'].includes(found));
  });
});
