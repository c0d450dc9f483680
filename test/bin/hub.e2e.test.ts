// The `hub` binary as a user runs it.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inSchema, request } from '../harness.ts';

const HUB = new URL('../../bin/hub.ts', import.meta.url).pathname;
/** What `npm start` and the `hub` command run: Node with the profile's flags, then bin/hub.ts. */
const LAUNCHER = new URL('../../bin/hub', import.meta.url).pathname;

describe('hub binary (e2e)', () => {
  it('hub start serves /healthz and /openapi.json on the printed port, and exits 0 on SIGTERM', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-bin-'));
    // Through the launcher, as `npm start` runs it: it replaces itself with Node (the refusal
    // below names this process id as the hub's), with the embedded profile's young generation.
    const child = spawn(LAUNCHER, ['start'], {
      env: { ...process.env, HUB_PROFILE: 'embedded', HUB_PORT: '0', HUB_DATA_DIR: dataDir },
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
      assert.deepEqual(
        readFileSync(`/proc/${child.pid}/cmdline`, 'utf8').split('\0').filter(Boolean).slice(1),
        ['--max-semi-space-size=8', '--heap-growing-percent=100', realpathSync(HUB), 'start'],
      );
      const doc = await request(`${url}/openapi.json`);
      assert.equal(doc.body.openapi, '3.1.0');
      // A second hub refuses, in one line, its data dir or its port while this one has them.
      const port = new URL(url).port;
      for (const [env, refusal] of [
        [
          { HUB_PORT: '0', HUB_DATA_DIR: dataDir },
          new RegExp(`HUB_DATA_DIR ${dataDir} is in use by another hub \\(process ${child.pid}\\)`),
        ],
        [
          { HUB_PORT: port, HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-bin-')) },
          new RegExp(`HUB_PORT ${port} is in use`),
        ],
      ] as const) {
        const second = spawnSync(process.execPath, [HUB, 'start'], {
          env: { ...process.env, ...env },
          encoding: 'utf8',
        });
        assert.equal(second.status, 2, second.stderr);
        assert.equal(second.stderr.trim().split('\n').length, 1, second.stderr);
        assert.match(second.stderr, refusal);
      }
      assert.equal((await request(`${url}/healthz`)).status, 200, 'the first one serves on');
      const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      // Given back with the process: the dir can be taken again.
      const { lockDataDir } = await import('../../hub/node.ts');
      await lockDataDir(dataDir)();
    } finally {
      child.kill('SIGKILL');
    }
  });

  it("the launcher picks the profile's flags and Node, through a link to it as npm's bin makes", async () => {
    // A copy of the launcher in a package of its own, linked from a .bin beside it (relatively, as
    // npm links), with stand-ins for Node that print the command line they are handed, one a line.
    const root = mkdtempSync(join(tmpdir(), 'hub-launcher-'));
    const print = '#!/bin/sh\necho "$(basename "$(dirname "$(dirname "$0")")")"\nprintf \'%s\\n\' "$@"\n';
    mkdirSync(join(root, 'pkg/bin'), { recursive: true });
    mkdirSync(join(root, 'pkg/node_modules/.bin'), { recursive: true });
    mkdirSync(join(root, 'path/bin'), { recursive: true });
    mkdirSync(join(root, '.bin'));
    writeFileSync(join(root, 'pkg/bin/hub'), readFileSync(LAUNCHER), { mode: 0o755 });
    writeFileSync(join(root, 'pkg/node_modules/.bin/node'), print, { mode: 0o755 });
    writeFileSync(join(root, 'path/bin/node'), print, { mode: 0o755 });
    symlinkSync('../pkg/bin/hub', join(root, '.bin/hub'));
    const { hubNodeFlags } = await import('../../bench/report.ts');
    try {
      const run = (env: Record<string, string | undefined>) => {
        const r = spawnSync(join(root, '.bin/hub'), ['processor', 'two words'], {
          env: {
            ...process.env,
            HUB_PROFILE: undefined,
            NODE_OPTIONS: undefined,
            PATH: `${join(root, 'path/bin')}:${process.env.PATH}`,
            ...env,
          },
          encoding: 'utf8',
        });
        assert.equal(r.status, 0, r.stderr);
        return r.stdout.trimEnd().split('\n');
      };
      const hub = join(realpathSync(root), 'pkg/bin/hub.ts');
      // The package's own Node (`node_modules/.bin` beside it), the profile's young generation.
      assert.deepEqual(run({ HUB_PROFILE: 'distributed' }), [
        'node_modules',
        '--max-semi-space-size=32',
        hub,
        'processor',
        'two words',
      ]);
      const embedded = [
        'node_modules',
        '--max-semi-space-size=8',
        '--heap-growing-percent=100',
        hub,
        'processor',
        'two words',
      ];
      assert.deepEqual(run({ HUB_PROFILE: 'embedded' }), embedded);
      assert.deepEqual(run({}), embedded, 'embedded is the default');
      // A size in NODE_OPTIONS rules: the launcher passes none that would override it.
      assert.deepEqual(run({ HUB_PROFILE: 'distributed', NODE_OPTIONS: '--max-semi-space-size=4' }), [
        'node_modules',
        hub,
        'processor',
        'two words',
      ]);
      // Each flag on its own: the one NODE_OPTIONS names is left out, the other passed.
      assert.deepEqual(run({ HUB_PROFILE: 'embedded', NODE_OPTIONS: '--max-semi-space-size=4' }), [
        'node_modules',
        '--heap-growing-percent=100',
        hub,
        'processor',
        'two words',
      ]);
      // The benchmarks start their hubs with the flags the launcher passes.
      assert.deepEqual(hubNodeFlags({ HUB_PROFILE: 'distributed' }), ['--max-semi-space-size=32']);
      assert.deepEqual(hubNodeFlags({ HUB_PROFILE: 'embedded' }), [
        '--max-semi-space-size=8',
        '--heap-growing-percent=100',
      ]);
      // Without Node beside the package (installed as a dependency, hoisted): PATH's.
      rmSync(join(root, 'pkg/node_modules'), { recursive: true });
      assert.deepEqual(run({ HUB_PROFILE: 'distributed' }), [
        'path',
        '--max-semi-space-size=32',
        hub,
        'processor',
        'two words',
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
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

  it("a store file that cannot be opened points at HUB_DATA_DIR, not at the distributed profile's servers", () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hub-bin-'));
    mkdirSync(join(dataDir, 'events.sqlite')); // a directory where the file should be
    const r = spawnSync(process.execPath, [HUB, 'start'], {
      env: { ...process.env, HUB_PORT: '0', HUB_DATA_DIR: dataDir },
      encoding: 'utf8',
      timeout: 60_000,
    });
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /cannot be used \(HUB_DATA_DIR: its permissions, its disk's space\)/);
    assert.doesNotMatch(r.stderr, /HUB_POSTGRES_URL/);
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

  it('--help lists the commands; --version prints the version; an option or argument no command takes is refused', () => {
    const r = spawnSync(process.execPath, [HUB, '--help'], { encoding: 'utf8' });
    assert.equal(r.status, 0);
    assert.match(r.stdout, /start/);
    const version = spawnSync(process.execPath, [HUB, '--version'], { encoding: 'utf8' });
    assert.equal(version.status, 0);
    assert.equal(
      version.stdout.trim(),
      JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version,
    );
    for (const [args, refusal] of [
      [['start', '--port', '9000'], /Unknown option '--port'/],
      [['start', 'extra'], /'hub start' takes no arguments/],
      [['projections', 'status', 'extra'], /usage: hub projections status/],
    ] as const) {
      const refused = spawnSync(process.execPath, [HUB, ...args], {
        env: { ...process.env, HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-bin-')) },
        encoding: 'utf8',
      });
      assert.equal(refused.status, 2, `${args.join(' ')}: ${refused.stderr}`);
      assert.match(refused.stderr, refusal);
    }
  });

  it('projections status asks and creates nothing: a data dir with no hub data is refused; embedded shows no lag it cannot see', async () => {
    const missing = join(tmpdir(), `hub-missing-${process.pid}-${Date.now()}`);
    const none = spawnSync(process.execPath, [HUB, 'projections', 'status'], {
      env: { ...process.env, HUB_DATA_DIR: missing },
      encoding: 'utf8',
    });
    assert.equal(none.status, 2, none.stderr);
    assert.match(none.stderr, /holds no hub data/);
    assert.ok(!existsSync(missing), 'no data dir was made');
    const { startNode } = await import('../../hub/node.ts');
    const { testConfig } = await import('../harness.ts');
    // Read models in memory: out of another process's sight (on disk, status reads them).
    const config = testConfig({ HUB_EMBEDDED_STATE: 'memory' });
    const node = await startNode(config, ['api', 'projector']);
    try {
      await request(`${node.url}/auth/accounts`, {
        method: 'POST',
        body: { email: 'status@example.com', nick: 'status', password: 'status-password' },
      });
      const status = spawnSync(process.execPath, [HUB, 'projections', 'status'], {
        env: { ...process.env, HUB_DATA_DIR: config.dataDir, HUB_EMBEDDED_STATE: 'memory' },
        encoding: 'utf8',
      });
      assert.equal(status.status, 0, status.stderr);
      const accounts = status.stdout
        .split('\n')
        .find((l) => l.startsWith('accounts\t'))!
        .split('\t');
      assert.deepEqual([accounts[3], accounts[5]], ['-', '-'], 'no checkpoint or lag of another process');
      assert.ok(Number(accounts[4]) > 0, 'the head it reads');
      assert.match(status.stdout, /hub_projection_lag_events/);
    } finally {
      await node.stop();
    }
  });
});

describe('embedded profile start (e2e)', () => {
  it('creates the SQLite event store in HUB_DATA_DIR and reports ready', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { testConfig } = await import('../harness.ts');
    const { existsSync } = await import('node:fs');
    const config = testConfig();
    const node = await startNode(config, ['api', 'projector']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(ready.body.checks, { eventstore: 'ok', projections: 'ok', schedule: 'ok' });
      assert.ok(existsSync(join(config.dataDir, 'events.sqlite')));
    } finally {
      await node.stop();
    }
  });

  it('one hub per data dir; a data dir that lost its signing key is refused, not given a new key', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { testConfig } = await import('../harness.ts');
    const config = testConfig();
    const node = await startNode(config, ['api', 'projector']);
    let again: Awaited<ReturnType<typeof startNode>> | undefined;
    try {
      await assert.rejects(
        startNode(config, ['api', 'projector']),
        /HUB_DATA_DIR .* is in use by another hub \(process \d+, this one\)/,
      );
      const r = await request(`${node.url}/auth/accounts`, {
        method: 'POST',
        body: { email: 'keeper@example.com', nick: 'keeper', password: 'keeper-password' },
      });
      assert.equal(r.status, 200);
      await node.stop();
      const keyFile = join(config.dataDir, 'keys', 'jwt-es256.pem');
      const key = readFileSync(keyFile, 'utf8');
      rmSync(keyFile);
      await assert.rejects(startNode(config, ['api', 'projector']), /HUB_DATA_DIR has lost its signing key/);
      assert.ok(!existsSync(keyFile), 'no new key was made');
      writeFileSync(keyFile, key, { mode: 0o600 });
      again = await startNode(config, ['api', 'projector']); // the failed start gave the dir back
      const login = await request(`${again.url}/auth/.well-known/jwks.json`);
      assert.equal(login.status, 200);
    } finally {
      await node.stop();
      await again?.stop();
    }
  });

  it('a delivery schedule that cannot be read makes the hub not ready (it said ready, deliveries stuck)', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { testConfig } = await import('../harness.ts');
    const config = testConfig();
    const first = await startNode(config, ['api', 'projector']);
    await first.stop();
    const file = join(config.dataDir, 'deliveries.sqlite');
    const bytes = readFileSync(file);
    bytes.write('not a database, not at all!', 0); // its header
    writeFileSync(file, bytes);
    const node = await startNode(config, ['api', 'projector']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 503);
      assert.deepEqual(ready.body.details, [{ field: 'schedule', problem: 'does not answer' }]);
    } finally {
      await node.stop().catch(() => {});
    }
  });

  /** The distributed profile on a PostgreSQL schema of its own (an empty event store: the default
   * one holds whatever other suites and checkouts wrote, perhaps without the key shared in Redis). */
  const distributedEnv = async (env: Record<string, string> = {}) => {
    const { testConfig } = await import('../harness.ts');
    const { postgresUrl } = testConfig();
    const schema = `ready_${Date.now().toString(36)}_${process.pid}`;
    return {
      schema,
      config: testConfig({
        HUB_PROFILE: 'distributed',
        HUB_POSTGRES_URL: inSchema(postgresUrl, schema),
        ...env,
      }),
    };
  };

  it('the distributed profile reports PostgreSQL readiness', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { dropSchema } = await import('../harness.ts');
    const { schema, config } = await distributedEnv();
    const node = await startNode(config, ['api']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(node.store.kind, 'postgres');
      assert.equal(ready.body.checks.logs, 'ok', 'the PostgreSQL of the event log and the delivery records');
    } finally {
      await node.stop();
      await dropSchema(config.postgresUrl, schema);
    }
  });

  it('a distributed processor and dispatcher report Kafka readiness', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { deleteTopics, dropSchema } = await import('../harness.ts');
    const prefix = `ready-${Date.now().toString(36)}-`;
    const { schema, config } = await distributedEnv({ HUB_KAFKA_PREFIX: prefix });
    const node = await startNode(config, ['processor', 'dispatcher']);
    try {
      const ready = await request(`${node.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.equal(ready.body.checks.kafka, 'ok');
    } finally {
      await node.stop();
      await dropSchema(config.postgresUrl, schema);
      await deleteTopics(config.kafkaBrokers, prefix);
    }
  });
});
