// The `hub` binary as a user runs it.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from '../harness.ts';

const HUB = new URL('../../bin/hub.ts', import.meta.url).pathname;

describe('hub binary (e2e)', () => {
  it('hub start serves /healthz and /openapi.json on the printed port, and exits 0 on SIGTERM', async () => {
    const child = spawn(process.execPath, [HUB, 'start'], {
      env: { ...process.env, HUB_PORT: '0', HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-bin-')) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    try {
      const url = await new Promise<string>((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
          if (m) resolve(m[1]!);
        });
        child.once('exit', (code) => reject(new Error(`exited ${code}: ${out}`)));
      });
      assert.equal((await request(`${url}/healthz`)).status, 200);
      const doc = await request(`${url}/openapi.json`);
      assert.equal(doc.body.openapi, '3.1.0');
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('invalid configuration stops the start with one line naming the variable', () => {
    const r = spawnSync(process.execPath, [HUB, 'start'], {
      env: { ...process.env, HUB_PROFILE: 'cluster' },
      encoding: 'utf8',
    });
    assert.equal(r.status, 2);
    assert.equal(r.stderr.trim().split('\n').length, 1);
    assert.match(r.stderr, /HUB_PROFILE must be one of embedded, distributed/);
  });

  it('a dependency that does not answer at start is named with its variable, and doctor is suggested', () => {
    const r = spawnSync(process.execPath, [HUB, 'projections', 'status'], {
      env: { ...process.env, HUB_PROFILE: 'distributed', HUB_REDIS_URL: 'redis://127.0.0.1:1/7' },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /Redis does not answer \(HUB_REDIS_URL\)\. `hub doctor` checks/);
  });

  it('--help lists the commands', () => {
    const r = spawnSync(process.execPath, [HUB, '--help'], { encoding: 'utf8' });
    assert.equal(r.status, 0);
    assert.match(r.stdout, /start/);
  });
});

describe('embedded profile start (e2e)', () => {
  it('creates the SQLite event store in HUB_DATA_DIR and reports ready', async () => {
    const { startNode } = await import('../../infra/node.ts');
    const { testConfig } = await import('../harness.ts');
    const { existsSync } = await import('node:fs');
    const config = testConfig();
    const node = await startNode(config, ['api', 'projector']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(ready.body.checks, { eventstore: 'ok', projections: 'ok' });
      assert.ok(existsSync(join(config.dataDir, 'events.sqlite')));
    } finally {
      await node.stop();
    }
  });

  it('the distributed profile reports PostgreSQL readiness', async () => {
    const { startNode } = await import('../../infra/node.ts');
    const { testConfig } = await import('../harness.ts');
    const node = await startNode(testConfig({ HUB_PROFILE: 'distributed' }), ['api']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(node.store.kind, 'postgres');
    } finally {
      await node.stop();
    }
  });

  it('a distributed processor and dispatcher report Kafka readiness', async () => {
    const { startNode } = await import('../../infra/node.ts');
    const { testConfig } = await import('../harness.ts');
    const prefix = `ready-${Date.now().toString(36)}-`;
    const node = await startNode(testConfig({ HUB_PROFILE: 'distributed', HUB_KAFKA_PREFIX: prefix }), [
      'processor',
      'dispatcher',
    ]);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(ready.body.checks.kafka, 'ok');
    } finally {
      await node.stop();
    }
  });
});
