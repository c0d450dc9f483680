// The hub keeps snapshots as configured (HUB_SNAPSHOT_EVERY), also when its API runs on threads
// (`npm run test:threads`), and a restarted hub answers from them: a device reporting its metadata
// is snapshotted every N events, and after a restart its record is the same.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { createDevice, signup, startHub, type TestHub } from '../hub.ts';

describe('snapshots in the hub (e2e)', function () {
  this.timeout(90_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-snapshots-e2e-'));
  const env = { HUB_DATA_DIR: dataDir, HUB_SNAPSHOT_EVERY: '5' };
  let hub: TestHub | undefined;
  after(() => hub?.stop());

  /** The device snapshots in the store file, read beside the hub (WAL: readers never block it). */
  const stored = () => {
    const db = new DatabaseSync(join(dataDir, 'events.sqlite'), { readOnly: true });
    try {
      const rows = db.prepare("SELECT stream, revision FROM snapshots WHERE kind = 'device'").all();
      return rows.map((r) => ({ ...r }) as { stream: string; revision: number });
    } finally {
      db.close();
    }
  };

  it('a device reporting its metadata is snapshotted every N events; restarted, the hub answers the same record', async () => {
    hub = await startHub(env);
    const alice = await signup(hub, 'alice');
    const dev = await createDevice(hub, alice);
    for (let n = 1; n <= 12; n++) {
      const r = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
        token: dev.token,
        body: { uptime: String(n), [`k${n % 3}`]: String(n) },
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const before = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
    assert.equal(before.body['device-meta'].uptime, '12');
    // DeviceCreated at revision 0, the 12 reports at 1-12: snapshots at 4 and 9 (revision 12 is
    // 3 past the last). The write follows the command's answer: asked again for a moment.
    let snapshots = stored();
    for (let i = 0; i < 50 && snapshots[0]?.revision !== 9; i++) {
      await new Promise((r) => setTimeout(r, 100));
      snapshots = stored();
    }
    assert.deepEqual(snapshots, [{ stream: `device-${dev.id}`, revision: 9 }]);

    await hub.stop();
    hub = await startHub(env);
    const after = await hub.call('GET', `/devices/${dev.id}`, { token: alice.token });
    assert.equal(after.status, 200);
    assert.deepEqual(after.body, before.body);
    const patched = await hub.call('PATCH', `/devices/${dev.id}/device-meta`, {
      token: dev.token,
      body: { uptime: '13' },
    });
    assert.equal(patched.status, 200);
    assert.deepEqual(patched.body['device-meta'], { ...before.body['device-meta'], uptime: '13' });
  });
});
