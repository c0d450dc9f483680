import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { ConfigError, knobs, loadConfig } from '../../infra/config.ts';

describe('configuration (unit)', () => {
  it('defaults to the embedded profile on SQLite', () => {
    const c = loadConfig({});
    assert.equal(c.profile, 'embedded');
    assert.equal(c.eventStoreKind, 'sqlite');
    assert.equal(c.port, 8080);
    assert.deepEqual(c.kafkaBrokers, ['127.0.0.1:9092']);
  });

  it('serves the API on a thread per core by default (auto), at most 4, none on one core or without SO_REUSEPORT', () => {
    const cores = availableParallelism();
    const reusePort = process.platform === 'linux' || process.platform === 'freebsd';
    assert.equal(loadConfig({}).apiThreads, cores < 2 || !reusePort ? 0 : Math.min(cores, 4));
    assert.equal(loadConfig({ HUB_API_THREADS: 'auto' }).apiThreads, loadConfig({}).apiThreads);
    assert.equal(loadConfig({ HUB_API_THREADS: '0' }).apiThreads, 0);
    assert.equal(loadConfig({ HUB_API_THREADS: '3' }).apiThreads, 3);
    assert.throws(
      () => loadConfig({ HUB_API_THREADS: 'many' }),
      /HUB_API_THREADS must be auto or an integer/,
    );
    assert.throws(() => loadConfig({ HUB_API_THREADS: '65' }), /HUB_API_THREADS must be auto or an integer/);
  });

  it("the projector's followers linger 10 ms in the distributed profile and not in the embedded one (auto), or as set", () => {
    assert.equal(loadConfig({}).projectorLingerMs, 0);
    assert.equal(loadConfig({ HUB_PROFILE: 'distributed' }).projectorLingerMs, 10);
    assert.equal(loadConfig({ HUB_PROJECTOR_LINGER_MS: '25' }).projectorLingerMs, 25);
    assert.equal(
      loadConfig({ HUB_PROFILE: 'distributed', HUB_PROJECTOR_LINGER_MS: '0' }).projectorLingerMs,
      0,
    );
    assert.throws(
      () => loadConfig({ HUB_PROJECTOR_LINGER_MS: '5000' }),
      /HUB_PROJECTOR_LINGER_MS must be auto or an integer from 0 to 1000/,
    );
  });

  it('the distributed profile defaults to PostgreSQL', () => {
    assert.equal(loadConfig({ HUB_PROFILE: 'distributed' }).eventStoreKind, 'postgres');
  });

  it('an invalid value fails with one line naming the variable', () => {
    const cases: Record<string, string> = {
      HUB_PORT: 'eighty',
      HUB_PROFILE: 'cluster',
      HUB_REDIS_URL: 'http://x',
      HUB_BODY_LIMIT_BYTES: '10',
      HUB_EVENT_STORE: 'mongo',
    };
    for (const [variable, value] of Object.entries(cases)) {
      assert.throws(
        () => loadConfig({ [variable]: value }),
        (err: unknown) =>
          err instanceof ConfigError &&
          err.variable === variable &&
          err.message.startsWith(variable) &&
          !err.message.includes('\n'),
        variable,
      );
    }
  });

  it('never repeats a secret or a URL password in its error', () => {
    assert.throws(
      () => loadConfig({ HUB_POSTGRES_URL: 'mysql://hub:s3cret@db:5432/hub' }),
      (err: Error) => err.message.includes('hub:***@db') && !err.message.includes('s3cret'),
    );
    assert.throws(
      () => loadConfig({ HUB_MAIL_TRANSPORT: 'ftp://u:p4ss@h' }),
      (err: Error) => !err.message.includes('p4ss'),
    );
  });

  it("refuses SQLite in the distributed profile (one process's file, many processes)", () => {
    assert.throws(
      () => loadConfig({ HUB_PROFILE: 'distributed', HUB_EVENT_STORE: 'sqlite' }),
      /HUB_EVENT_STORE cannot be sqlite/,
    );
  });

  it('esdb needs its URL', () => {
    assert.throws(() => loadConfig({ HUB_EVENT_STORE: 'esdb' }), /HUB_ESDB_URL/);
  });

  it('README lists every variable with its default', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    for (const k of Object.values(knobs)) {
      const row = readme.split('\n').find((l) => l.startsWith(`| \`${k.env}\``));
      assert.ok(row, `README has no row for ${k.env}`);
      assert.ok(
        row.includes(k.default === '' ? '(empty)' : `\`${k.default}\``),
        `README default of ${k.env}`,
      );
    }
  });
});
