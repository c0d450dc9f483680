// The operator commands, as an operator runs them, on the distributed profile.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { streamCatalog } from '../../projections/streams.ts';
import { testConfig } from '../harness.ts';
import { signup, startHub } from '../hub.ts';

const HUB = new URL('../../bin/hub.ts', import.meta.url).pathname;
const env = {
  ...process.env,
  HUB_PROFILE: 'distributed',
  HUB_REPLAY_DROP_GRACE_MS: '0',
  HUB_LOG_LEVEL: 'warn',
};
const hub = (...args: string[]) =>
  spawnSync(process.execPath, [HUB, ...args], { env, encoding: 'utf8', timeout: 60_000 });

describe('hub projections (e2e)', function () {
  this.timeout(90_000);

  before(async () => {
    const store = new PostgresEventStore({ url: testConfig().postgresUrl });
    for (let i = 0; i < 50; i++)
      await store.append(`cli-${i % 5}`, [{ id: randomUUID(), type: 'Probed', data: { i } }]);
    await store.close();
  });

  it('replay rebuilds into a new generation and switches reads; status shows it', () => {
    const before = hub('projections', 'status');
    assert.equal(before.status, 0, before.stderr);
    const row = (out: string) =>
      out
        .split('\n')
        .find((l) => l.startsWith('streams\t'))!
        .split('\t');
    const generation = Number(row(before.stdout)[2]);
    const replay = hub('projections', 'replay', 'streams');
    assert.equal(replay.status, 0, replay.stderr);
    assert.match(
      replay.stdout,
      new RegExp(`replayed streams into generation ${generation + 1} \\(\\d+ events`),
    );
    assert.match(replay.stderr, /\[#+\.*\] 100\.0% [\d,]+\/[\d,]+ [\d,]+ events\/s ETA/);
    const after = row(hub('projections', 'status').stdout);
    assert.equal(Number(after[2]), generation + 1);
    assert.equal(after[1], String(streamCatalog.version), 'version');
    assert.ok(Number(after[3]) >= 50, 'checkpoint');
  });

  it('names the known projections when asked for an unknown one', () => {
    const r = hub('projections', 'replay', 'nope');
    assert.equal(r.status, 2);
    assert.match(r.stderr, /unknown projection 'nope'; known: streams/);
  });

  it('explains that embedded read models are rebuilt at start', () => {
    const r = spawnSync(process.execPath, [HUB, 'projections', 'replay', 'streams'], {
      env: { ...env, HUB_PROFILE: 'embedded', HUB_EMBEDDED_STATE: 'memory' },
      encoding: 'utf8',
    });
    assert.equal(r.status, 2);
    assert.match(r.stderr, /rebuilt at every start/);
  });

  it('embedded, read models on disk: replays with the hub stopped, and is refused while it runs', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-cli-replay-'));
    const embedded = { ...env, HUB_PROFILE: 'embedded', HUB_DATA_DIR: dataDir };
    const hubHere = await startHub({ HUB_DATA_DIR: dataDir });
    await signup(hubHere, 'replayer');
    const running = spawnSync(process.execPath, [HUB, 'projections', 'replay', 'accounts'], {
      env: embedded,
      encoding: 'utf8',
    });
    assert.equal(running.status, 2);
    assert.match(running.stderr, /in use by another hub/);
    await hubHere.stop();
    const replay = spawnSync(process.execPath, [HUB, 'projections', 'replay', 'accounts'], {
      env: embedded,
      encoding: 'utf8',
    });
    assert.equal(replay.status, 0, replay.stderr);
    assert.match(replay.stdout, /replayed accounts into generation 2 \(\d+ events/);
    const status = spawnSync(process.execPath, [HUB, 'projections', 'status'], {
      env: embedded,
      encoding: 'utf8',
    });
    const row = status.stdout
      .split('\n')
      .find((l) => l.startsWith('accounts\t'))!
      .split('\t');
    assert.equal(row[2], '2', 'generation');
    assert.ok(Number(row[3]) > 0 && row[3] === row[4], 'the checkpoint, at the head');
    assert.equal(row[5], '0', 'lag');
    // The hub started again answers from the replayed generation.
    const again = await startHub({ HUB_DATA_DIR: dataDir });
    try {
      const login = await again.call('POST', '/auth/login', {
        body: { username: 'replayer', password: 'pw-replayer-secret' },
      });
      assert.equal(login.status, 200);
      assert.equal(await again.node.readStore.activeGeneration('accounts'), 2);
    } finally {
      await again.stop();
    }
  });
});
