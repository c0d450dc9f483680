// Limits: the per-account rate limit (429 with Retry-After), charged to the account once its token
// is verified and to the client address otherwise; the body limit on every write.
import assert from 'node:assert/strict';
import { signup, startHub, type TestHub } from '../hub.ts';

describe('limits (e2e)', () => {
  let hub: TestHub;
  before(async () => {
    // 1 request/s sustained, bursts of 30: signing up two users fits in the address's burst.
    hub = await startHub({
      HUB_RATE_LIMIT_PER_SECOND: '1',
      HUB_RATE_LIMIT_BURST: '30',
    });
  });
  after(() => hub.stop());

  it('limits each account on its own: one spending its burst gets 429 with Retry-After, another account from the same address does not', async () => {
    const a = await signup(hub, 'limited-a');
    const b = await signup(hub, 'limited-b');
    const statuses: number[] = [];
    let refused: Awaited<ReturnType<TestHub['call']>> | undefined;
    for (let i = 0; i < 40; i++) {
      const r = await hub.call('GET', '/devices', { token: a.token });
      statuses.push(r.status);
      if (r.status === 429) refused ??= r;
    }
    assert.ok(statuses.filter((s) => s === 200).length >= 30, statuses.join(' '));
    assert.ok(refused, `no 429 in ${statuses.join(' ')}`);
    assert.equal(refused.body.error, 'rate_limited');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    // The same address, another account: its own budget.
    assert.equal((await hub.call('GET', '/devices', { token: b.token })).status, 200);
  });

  it('charges requests whose token fails, or with other credentials, to the address: guessing is limited too', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 40; i++)
      statuses.push((await hub.call('GET', '/devices', { token: `forged.${i}.x` })).status);
    assert.ok(statuses.includes(401) && statuses.includes(429), statuses.join(' '));
    assert.ok(statuses.indexOf(429) > statuses.indexOf(401));
    // Other credentials (Basic, the operator callbacks) are charged to the address as well.
    const basic = { authorization: `Basic ${Buffer.from('saadmin:guess').toString('base64')}` };
    assert.equal((await hub.call('PUT', '/callbacks/devices/x', { headers: basic })).status, 429);
  });

  it('answers a body above HUB_BODY_LIMIT_BYTES with 413 in the error shape, and changes nothing', async () => {
    // A hub of its own: the first one's address budget is spent by now.
    const hub2 = await startHub({ HUB_BODY_LIMIT_BYTES: '4096' });
    try {
      const user = await signup(hub2, 'big-body');
      const before = await hub2.call('GET', '/devices', { token: user.token });
      const r = await hub2.call('POST', '/devices', {
        token: user.token,
        body: { 'user-meta': { note: 'x'.repeat(5000) } },
      });
      assert.equal(r.status, 413);
      assert.equal(r.body.error, 'payload_too_large');
      const after = await hub2.call('GET', '/devices', { token: user.token });
      assert.deepEqual(after.body, before.body);
    } finally {
      await hub2.stop();
    }
  });
});
