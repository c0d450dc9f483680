// `hub doctor` as an operator runs it, against the real local services (infra/local.sh).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SMTPServer } from 'smtp-server';
import { knobs } from '../../infra/config.ts';

const HUB = new URL('../../bin/hub.ts', import.meta.url).pathname;

/** The test's environment without any HUB_* variable, plus the local services' URLs if given. */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('HUB_') || /^HUB_(POSTGRES_URL|REDIS_URL|KAFKA_BROKERS)$/.test(k)) env[k] = v;
  }
  return env;
}

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** Runs `hub doctor` without blocking this process (an SMTP server may have to answer it). */
async function doctor(env: Record<string, string>): Promise<Run> {
  const started = Date.now();
  const child = spawn(process.execPath, [HUB, 'doctor'], {
    env: { ...baseEnv(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => {
    stdout += d;
  });
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const killer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  const [status] = (await once(child, 'close')) as [number | null];
  clearTimeout(killer);
  return { status, stdout, stderr, ms: Date.now() - started };
}

const line = (out: string, level: 'ok' | 'warn' | 'FAIL', name: string) =>
  out.split('\n').find((l) => new RegExp(`^${level}\\s+${name}\\s`).test(l));

describe('hub doctor (e2e)', function () {
  this.timeout(60_000);

  it('embedded: checks the data directory, the SQLite store, mail and keys, and exits 0', async () => {
    const r = await doctor({
      HUB_PROFILE: 'embedded',
      HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-doctor-')),
      HUB_PORT: '0',
    });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    for (const name of ['config', 'listen', 'data-dir', 'sqlite', 'mail', 'keys', 'device-ca', 'callbacks'])
      assert.ok(line(r.stdout, 'ok', name), `no ok line for ${name}:\n${r.stdout}`);
    assert.doesNotMatch(r.stdout, /^FAIL/m);
    assert.match(r.stdout, /refuses everyone/); // HUB_SA_ADMIN_SECRET unset
    assert.match(r.stdout.trim().split('\n').at(-1)!, /checks: \d+ ok, \d+ warnings?, 0 failed$/);
    assert.equal(r.stderr, '');
  });

  it('embedded: a data dir that lost its signing key while holding data is a FAIL line', async () => {
    const { startNode } = await import('../../hub/node.ts');
    const { testConfig } = await import('../harness.ts');
    const config = testConfig();
    const node = await startNode(config, ['api', 'projector']);
    await fetch(`${node.url}/auth/accounts`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'lost@example.com', nick: 'lost', password: 'lost-password' }),
    });
    await node.stop();
    rmSync(join(config.dataDir, 'keys', 'jwt-es256.pem'));
    const r = await doctor({ HUB_PROFILE: 'embedded', HUB_DATA_DIR: config.dataDir, HUB_PORT: '0' });
    assert.equal(r.status, 1, r.stdout);
    assert.match(line(r.stdout, 'FAIL', 'keys') ?? '', /is missing, but the event store holds data/);
  });

  it('distributed: reaches PostgreSQL, Redis and Kafka and exits 0 (warnings allowed)', async () => {
    const r = await doctor({ HUB_PROFILE: 'distributed' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(line(r.stdout, 'ok', 'postgres') ?? '', /PostgreSQL \d+\S* at postgres:\/\/.*, schema \w+/);
    assert.match(line(r.stdout, 'ok', 'redis') ?? '', /Redis \d+\.\d+\S* at redis:\/\//);
    assert.match(line(r.stdout, 'ok', 'kafka') ?? '', /\d+ brokers?/);
    assert.ok(line(r.stdout, 'ok', 'topics') ?? line(r.stdout, 'warn', 'topics'), r.stdout);
    assert.match(
      line(r.stdout, 'ok', 'kafka-group') ?? '',
      /consumer session 10,000 ms .*within the broker's 6,000-/,
    );
    // Development-only defaults of the distributed profile are warnings, not failures.
    assert.ok(line(r.stdout, 'warn', 'keys'), r.stdout);
    assert.ok(line(r.stdout, 'warn', 'public-url'), r.stdout);
    assert.equal(r.stderr, '');
  });

  it("distributed with a consumer session the broker refuses: a FAIL line naming the broker's bounds", async () => {
    const r = await doctor({ HUB_PROFILE: 'distributed', HUB_KAFKA_SESSION_TIMEOUT_MS: '3000' });
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(
      line(r.stdout, 'FAIL', 'kafka-group') ?? '',
      /HUB_KAFKA_SESSION_TIMEOUT_MS=3000 is outside the broker's 6,000-[\d,]+ ms \(group\.min\.session\.timeout\.ms/,
    );
  });

  it('distributed with Redis and Kafka unreachable: FAIL lines naming them, exit 1, within seconds', async () => {
    const r = await doctor({
      HUB_PROFILE: 'distributed',
      HUB_REDIS_URL: 'redis://127.0.0.1:1',
      HUB_KAFKA_BROKERS: '127.0.0.1:1',
    });
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(line(r.stdout, 'FAIL', 'redis') ?? '', /redis:\/\/127\.0\.0\.1:1.*HUB_REDIS_URL/);
    assert.match(line(r.stdout, 'FAIL', 'kafka') ?? '', /127\.0\.0\.1:1.*HUB_KAFKA_BROKERS/);
    assert.ok(line(r.stdout, 'ok', 'postgres'), r.stdout);
    assert.match(r.stdout, /2 failed/);
    assert.ok(r.ms < 15_000, `took ${r.ms} ms`);
  });

  it('distributed on EventStoreDB: PostgreSQL is still checked, for the event log and the delivery records', async () => {
    const r = await doctor({
      HUB_PROFILE: 'distributed',
      HUB_EVENT_STORE: 'esdb',
      HUB_ESDB_URL: 'esdb://127.0.0.1:1?tls=false',
    });
    assert.match(
      line(r.stdout, 'ok', 'postgres') ?? '',
      /PostgreSQL \d+\S* at postgres:\/\/.*, schema \w+ \(the event log and the delivery records\)/,
    );
    assert.ok(line(r.stdout, 'FAIL', 'esdb'), r.stdout);
  });

  it('a Redis database the server does not have is a FAIL line (ioredis would use database 0)', async () => {
    const url = new URL(process.env.HUB_REDIS_URL ?? 'redis://127.0.0.1:6380');
    url.pathname = '/99';
    const r = await doctor({ HUB_PROFILE: 'distributed', HUB_REDIS_URL: url.toString() });
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(line(r.stdout, 'FAIL', 'redis') ?? '', /no database 99.*HUB_REDIS_URL/);
  });

  it('an invalid knob is a FAIL line naming it (every invalid one is listed), exit 1', async () => {
    const r = await doctor({ HUB_PORT: 'eighty', HUB_LOG_LEVEL: 'loud', HUB_REDIS_URI: 'redis://x' });
    assert.equal(r.status, 1, r.stdout + r.stderr);
    assert.match(line(r.stdout, 'FAIL', 'config') ?? '', /HUB_PORT must be an integer from 0 to 65535/);
    assert.match(r.stdout, /^FAIL\s+config\s+HUB_LOG_LEVEL must be one of/m);
    assert.match(r.stdout, /^warn\s+config\s+unknown variable HUB_REDIS_URI/m);
    assert.equal(r.stderr, '');
  });

  it('never prints a password or a secret', async () => {
    const password = 'doctor-Pa55word-never-shown';
    const pgUrl = new URL(process.env.HUB_POSTGRES_URL ?? knobs.postgresUrl.default);
    pgUrl.password = password;
    const secrets = {
      HUB_PROFILE: 'distributed',
      HUB_POSTGRES_URL: pgUrl.href,
      HUB_MAIL_TRANSPORT: `smtp://mailer:${password}@127.0.0.1:1`,
      HUB_SA_ADMIN_SECRET: `${password}-admin`,
    };
    const r = await doctor(secrets);
    assert.ok(line(r.stdout, 'ok', 'postgres') ?? line(r.stdout, 'FAIL', 'postgres'), r.stdout);
    assert.match(r.stdout, /postgres:\/\/[^:@/]+:\*\*\*@/);
    assert.match(line(r.stdout, 'FAIL', 'mail') ?? '', /smtp:\/\/mailer:\*\*\*@127\.0\.0\.1:1/);
    // An invalid URL is reported without its password too.
    const bad = await doctor({ HUB_POSTGRES_URL: `mysql://hub:${password}@127.0.0.1/hub` });
    assert.match(line(bad.stdout, 'FAIL', 'config') ?? '', /HUB_POSTGRES_URL must use postgres:/);
    for (const out of [r.stdout, r.stderr, bad.stdout, bad.stderr]) assert.ok(!out.includes(password), out);
  });

  it('mail over SMTP: verifies the server', async () => {
    const smtp = new SMTPServer({ authOptional: true, disabledCommands: ['STARTTLS'] });
    smtp.listen(0, '127.0.0.1');
    await once(smtp.server, 'listening');
    try {
      const { port } = smtp.server.address() as AddressInfo;
      const r = await doctor({
        HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-doctor-')),
        HUB_MAIL_TRANSPORT: `smtp://127.0.0.1:${port}`,
      });
      assert.equal(r.status, 0, r.stdout + r.stderr);
      assert.match(line(r.stdout, 'ok', 'mail') ?? '', new RegExp(`SMTP server at smtp://127.0.0.1:${port}`));
    } finally {
      await new Promise<void>((resolve) => smtp.close(() => resolve()));
    }
  });

  it('hub doctor --help describes it, and the top-level help lists it', () => {
    const help = spawnSync(process.execPath, [HUB, 'doctor', '--help'], { encoding: 'utf8' });
    assert.equal(help.status, 0);
    assert.match(help.stdout, /^Usage: hub doctor/);
    assert.match(help.stdout, /Exit status: 0 when no check failed/);
    const top = spawnSync(process.execPath, [HUB, '--help'], { encoding: 'utf8' });
    assert.match(top.stdout, /Operators:\n\s+doctor\s+Checks the configuration/);
  });
});
