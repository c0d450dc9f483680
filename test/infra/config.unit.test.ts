import assert from 'node:assert/strict';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { deviceCaFile, loadDeviceCa } from '../../api/devices/ca.ts';
import { autoApiThreads, ConfigError, knobs, loadConfig } from '../../infra/config.ts';

describe('configuration (unit)', () => {
  it('defaults to the embedded profile on SQLite', () => {
    const c = loadConfig({});
    assert.equal(c.profile, 'embedded');
    assert.equal(c.eventStoreKind, 'sqlite');
    assert.equal(c.port, 8080);
    assert.deepEqual(c.kafkaBrokers, ['127.0.0.1:9092']);
  });

  it('serves the API on a thread per core by default (auto), at most 4, one fewer in a distributed process with other roles, none on one core or without SO_REUSEPORT', () => {
    const cores = availableParallelism();
    const reusePort = process.platform === 'linux' || process.platform === 'freebsd';
    assert.equal(loadConfig({}).apiThreads, cores < 2 || !reusePort ? 0 : Math.min(cores, 4));
    assert.equal(loadConfig({ HUB_API_THREADS: 'auto' }).apiThreads, loadConfig({}).apiThreads);
    assert.equal(loadConfig({ HUB_API_THREADS: '0' }).apiThreads, 0);
    assert.equal(loadConfig({ HUB_API_THREADS: '3' }).apiThreads, 3);
    // A distributed process running more than the API leaves a core to its main thread.
    const auto = cores < 2 || !reusePort ? 0 : Math.min(cores, 4);
    assert.equal(autoApiThreads('distributed', ['api']), auto);
    assert.equal(
      autoApiThreads('distributed', ['api', 'projector', 'processor']),
      auto && Math.min(cores - 1, 4),
    );
    assert.equal(autoApiThreads('embedded', ['api', 'projector', 'processor']), auto);
    const distributed = loadConfig({ HUB_PROFILE: 'distributed' });
    assert.equal(distributed.apiThreadsAuto, true);
    assert.equal(distributed.apiThreads, auto && Math.min(cores - 1, 4), 'every role, as `hub start`');
    assert.equal(loadConfig({ HUB_PROFILE: 'distributed', HUB_API_THREADS: '2' }).apiThreadsAuto, false);
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

  it("a Kafka group member's session is 10 s unless set", () => {
    assert.equal(loadConfig({}).kafkaSessionTimeoutMs, 10_000);
    assert.equal(loadConfig({ HUB_KAFKA_SESSION_TIMEOUT_MS: '6000' }).kafkaSessionTimeoutMs, 6000);
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
      // Under three heartbeats (one a second), a member would leave at any hiccup.
      HUB_KAFKA_SESSION_TIMEOUT_MS: '2000',
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

  it('refuses an empty host or data dir, and keys or certificates the hub could not use', async () => {
    assert.throws(() => loadConfig({ HUB_HOST: '' }), /HUB_HOST must not be empty/);
    assert.throws(() => loadConfig({ HUB_DATA_DIR: ' ' }), /HUB_DATA_DIR must not be empty/);
    const pemOf = (k: KeyObject) => k.export({ type: 'pkcs8', format: 'pem' }).toString();
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    const p384 = generateKeyPairSync('ec', { namedCurve: 'secp384r1' }).privateKey;
    const p256 = generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).privateKey;
    for (const key of ['garbage', pemOf(rsa), pemOf(p384)])
      assert.throws(
        () => loadConfig({ HUB_JWT_PRIVATE_KEY: key }),
        /^ConfigError: HUB_JWT_PRIVATE_KEY must be/,
      );
    assert.equal(loadConfig({ HUB_JWT_PRIVATE_KEY: pemOf(p256) }).jwtPrivateKey, pemOf(p256));
    // One line in the environment: \n escapes read as newlines.
    assert.equal(
      loadConfig({ HUB_JWT_PRIVATE_KEY: pemOf(p256).replace(/\n/g, '\\n') }).jwtPrivateKey,
      pemOf(p256),
    );
    assert.throws(
      () => loadConfig({ HUB_DEVICE_CA_CERT: 'garbage', HUB_DEVICE_CA_KEY: pemOf(p256) }),
      /HUB_DEVICE_CA_CERT must be an X.509/,
    );
    assert.throws(
      () => loadConfig({ HUB_DEVICE_CA_KEY: pemOf(p256) }),
      /HUB_DEVICE_CA_CERT must be set with/,
    );
    const dir = mkdtempSync(join(tmpdir(), 'hub-ca-'));
    await loadDeviceCa({ certPem: '', keyPem: '', dataDir: dir }); // generates one there
    const ca = readFileSync(deviceCaFile(dir), 'utf8');
    const caKey = readFileSync(join(dir, 'keys', 'device-ca.key'), 'utf8');
    assert.equal(loadConfig({ HUB_DEVICE_CA_CERT: ca, HUB_DEVICE_CA_KEY: caKey }).deviceCaKey, caKey);
    assert.throws(
      () => loadConfig({ HUB_DEVICE_CA_CERT: ca, HUB_DEVICE_CA_KEY: pemOf(p384) }),
      /HUB_DEVICE_CA_KEY must be an EC key on the curve P-256/,
    );
    assert.throws(() => loadConfig({ HUB_DEVICE_CA_CERT: ca }), /HUB_DEVICE_CA_KEY must be set with/);
    assert.throws(
      () => loadConfig({ HUB_DEVICE_CA_CERT: ca, HUB_DEVICE_CA_KEY: pemOf(p256) }),
      /HUB_DEVICE_CA_KEY is not the key of HUB_DEVICE_CA_CERT/,
    );
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
