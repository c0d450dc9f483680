// `hub doctor`: checks the configuration and every dependency the hub needs under it, and says
// what is wrong and how to fix it. It writes nothing: it only reads the event store, and creates
// no directory, table, topic or key. Every connection has a short timeout, so an unreachable dependency
// fails in seconds instead of after the clients' usual retries. Secrets are never shown: URLs
// have their password replaced by ***, and any configured secret is scrubbed from every detail.
import { X509Certificate } from 'node:crypto';
import { accessSync, constants, existsSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import { Kafka, logLevel } from 'kafkajs';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { fromPem, jwtKeyFile } from '../api/auth/keys.ts';
import { deviceCaFile } from '../api/devices/ca.ts';
import { TOPICS } from './bus/port.ts';
import { type Config, ConfigError, knobs, loadConfig } from './config.ts';
import { nameOwner } from './eventstore/aggregate.ts';
import { openEventStore } from './eventstore/open.ts';
import { databaseProblem } from './readstore/redis.ts';

export type Level = 'ok' | 'warn' | 'fail';

export interface CheckResult {
  /** Short name of what was checked: config, postgres, redis, kafka, mail… */
  name: string;
  level: Level;
  /** False only for `fail`: a warning is something to look at, not a broken hub. */
  ok: boolean;
  /** What was found, or what is wrong and how to fix it. Never holds a secret. */
  detail: string;
}

export interface DoctorOptions {
  /** Bound of one connection attempt or request, ms (the whole check gets a little more). */
  timeoutMs?: number;
}

const result = (name: string, level: Level, detail: string): CheckResult => ({
  name,
  level,
  ok: level !== 'fail',
  detail,
});

/** Variables named HUB_* that are not knobs but belong to the tooling (benchmarks, infra/local.sh). */
const TOOLING = /^HUB_(BENCH|INFRA|APT)_/;

/** A URL as the doctor shows it: its password replaced by ***. */
export function redactUrl(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password) url.password = '***';
    return url.href;
  } catch {
    return raw.replace(/\/\/([^:/@]*):[^@/]*@/, '//$1:***@');
  }
}

/** Runs every check that applies to the configuration in `env`, in a stable order. */
export async function runDoctor(
  env: Record<string, string | undefined> = process.env,
  options: DoctorOptions = {},
): Promise<CheckResult[]> {
  const timeoutMs = options.timeoutMs ?? 4000;
  const loaded = configChecks(env);
  if (!loaded.config) return scrub(loaded.results, secretsOf(env));
  const config = loaded.config;
  const bounded = (name: string, check: () => Promise<CheckResult | CheckResult[]>) =>
    withTimeout(name, check, timeoutMs + 2000);
  const checks: Array<Promise<CheckResult | CheckResult[]>> = [bounded('listen', () => listenCheck(config))];
  if (config.profile === 'embedded') {
    checks.push(
      Promise.resolve(dataDirCheck(config)),
      bounded('sqlite', async () => sqliteCheck(config)),
    );
  } else {
    // PostgreSQL keeps the event log and the delivery records, whichever the event store.
    checks.push(bounded('postgres', () => postgresCheck(config, timeoutMs)));
    if (config.eventStoreKind === 'esdb') checks.push(bounded('esdb', () => esdbCheck(config)));
    checks.push(bounded('redis', () => redisCheck(config, timeoutMs)));
    checks.push(bounded('kafka', () => kafkaChecks(config, timeoutMs)));
  }
  checks.push(
    bounded('mail', () => mailCheck(config, timeoutMs)),
    bounded('keys', () => keysCheck(config)),
    Promise.resolve(deviceCaCheck(config)),
    Promise.resolve(publicUrlCheck(config)),
    Promise.resolve(webhooksCheck(config)),
    Promise.resolve(callbacksCheck(config)),
    Promise.resolve(captchaCheck(config)),
    bounded('admins', () => adminsCheck(config)),
  );
  const results = [...loaded.results, ...(await Promise.all(checks)).flat()];
  return scrub(results, secretsOf(env));
}

/** Loads the configuration; reports every invalid variable, not only the first. */
function configChecks(env: Record<string, string | undefined>): {
  config: Config | undefined;
  results: CheckResult[];
} {
  const results: CheckResult[] = [];
  const defaults = new Map(Object.values(knobs).map((k) => [k.env, k.default]));
  const unknown = Object.keys(env)
    .filter((name) => name.startsWith('HUB_') && !defaults.has(name) && !TOOLING.test(name))
    .sort();
  if (unknown.length > 0) {
    results.push(
      result(
        'config',
        'warn',
        `unknown variable${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} (misspelt? README.md lists every knob); ignored`,
      ),
    );
  }
  // loadConfig stops at the first invalid variable: put its default in and load again, to list all.
  const probe = { ...env };
  const failed = new Set<string>();
  for (;;) {
    try {
      const config = loadConfig(probe);
      if (failed.size > 0) break;
      const set = Object.keys(env).filter((name) => defaults.has(name)).length;
      results.unshift(
        result(
          'config',
          'ok',
          `${config.profile} profile, event store ${config.eventStoreKind}, ${set} HUB_* variable${set === 1 ? '' : 's'} set`,
        ),
      );
      return { config, results };
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      if (failed.has(err.variable)) break;
      failed.add(err.variable);
      results.push(result('config', 'fail', `${err.message}; see README.md, Configuration`));
      probe[err.variable] = defaults.get(err.variable) ?? '';
    }
  }
  results.push(result('skipped', 'warn', 'the other checks run once the configuration loads'));
  return { config: undefined, results };
}

/** Can this process serve HTTP on HUB_HOST:HUB_PORT? */
async function listenCheck(config: Config): Promise<CheckResult> {
  const where = `${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.port}`;
  const server = createServer();
  try {
    await new Promise<void>((ok, ko) => {
      server.once('error', ko);
      server.listen({ host: config.host, port: config.port, exclusive: true }, ok);
    });
    return result(
      'listen',
      'ok',
      config.port === 0 ? `${config.host}, port chosen at start (HUB_PORT=0)` : `${where} is free`,
    );
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      return result('listen', 'warn', `${where} is in use (by a running hub?): set HUB_PORT to a free port`);
    if (code === 'EACCES')
      return result(
        'listen',
        'fail',
        `${where}: not allowed (ports below 1024 need privileges); set HUB_PORT`,
      );
    if (code === 'EADDRNOTAVAIL' || code === 'ENOTFOUND' || code === 'EAI_AGAIN')
      return result('listen', 'fail', `HUB_HOST ${config.host} is not an address of this machine`);
    return result('listen', 'fail', `${where}: ${(err as Error).message}`);
  } finally {
    if (server.listening) await new Promise((r) => server.close(r));
  }
}

function dataDirCheck(config: Config): CheckResult {
  const dir = resolve(config.dataDir);
  if (existsSync(dir)) {
    if (!statSync(dir).isDirectory())
      return result('data-dir', 'fail', `${dir} is not a directory: set HUB_DATA_DIR`);
    try {
      accessSync(dir, constants.R_OK | constants.W_OK | constants.X_OK);
    } catch {
      return result(
        'data-dir',
        'fail',
        `${dir} is not writable by this user (uid ${process.getuid?.() ?? '?'}): fix its owner or set HUB_DATA_DIR`,
      );
    }
    return result('data-dir', 'ok', `${dir} exists and is writable`);
  }
  let parent = dirname(dir);
  while (!existsSync(parent) && parent !== dirname(parent)) parent = dirname(parent);
  try {
    if (!statSync(parent).isDirectory()) throw new Error('not a directory');
    accessSync(parent, constants.W_OK | constants.X_OK);
  } catch {
    return result(
      'data-dir',
      'fail',
      `${dir} does not exist and cannot be created (${parent} is not a writable directory): set HUB_DATA_DIR`,
    );
  }
  return result(
    'data-dir',
    'ok',
    `${dir} does not exist yet: created at the first start (${parent} is writable)`,
  );
}

/** Opens the embedded event store and reads its head; a missing file is made at the first start.
 * Opened read-write as the hub opens it (a file the hub cannot write fails here too), but only read. */
/** The embedded event store's head position, 0 when there is none (or it does not read). */
function storedHead(config: Config): number {
  const file = resolve(config.dataDir, 'events.sqlite');
  if (config.eventStoreKind !== 'sqlite' || !existsSync(file)) return 0;
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(file, { readOnly: true });
    return (db.prepare('SELECT coalesce(max(position), 0) AS p FROM events').get() as { p: number }).p;
  } catch {
    return 0; // the sqlite check says what is wrong with it
  } finally {
    db?.close();
  }
}

function sqliteCheck(config: Config): CheckResult {
  const file = resolve(config.dataDir, 'events.sqlite');
  if (!existsSync(file)) {
    return result('sqlite', 'ok', `no event store yet at ${file}: created at the first start`);
  }
  let db: DatabaseSync | undefined;
  try {
    db = new DatabaseSync(file);
    db.exec('PRAGMA busy_timeout = 3000');
    const { v } = db.prepare('SELECT sqlite_version() AS v').get() as { v: string };
    const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'").get();
    if (!table)
      return result(
        'sqlite',
        'fail',
        `${file} is a SQLite file without the events table: not a hub event store`,
      );
    const { p } = db.prepare('SELECT coalesce(max(position), 0) AS p FROM events').get() as { p: number };
    return result('sqlite', 'ok', `SQLite ${v} at ${file}, head position ${p}`);
  } catch (err) {
    return result('sqlite', 'fail', `${file} does not open: ${(err as Error).message}`);
  } finally {
    db?.close();
  }
}

async function postgresCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
  const url = new URL(config.postgresUrl);
  const schema = url.searchParams.get('schema') ?? 'public';
  url.searchParams.delete('schema');
  const shown = redactUrl(url.href);
  if (!/^[a-z_][a-z0-9_]*$/.test(schema))
    return result('postgres', 'fail', `HUB_POSTGRES_URL ?schema=${schema} is not a valid schema name`);
  const client = new pg.Client({
    connectionString: url.href,
    connectionTimeoutMillis: timeoutMs,
    query_timeout: timeoutMs,
    statement_timeout: timeoutMs,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    const info = await client.query<{
      version: string;
      standby: boolean;
      user: string;
      schemaExists: boolean;
    }>(
      `SELECT current_setting('server_version') AS version, pg_is_in_recovery() AS standby, current_user AS user,
              EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1) AS "schemaExists"`,
      [schema],
    );
    const { version, standby, user, schemaExists } = info.rows[0]!;
    // With EventStoreDB, PostgreSQL holds only the logs.
    const logsOnly = config.eventStoreKind !== 'postgres';
    const what = `PostgreSQL ${version.split(' ')[0]} at ${shown}, schema ${schema}${logsOnly ? ' (the event log and the delivery records)' : ''}`;
    if (standby)
      return result(
        'postgres',
        'fail',
        `${what} is a read-only standby: point HUB_POSTGRES_URL at the primary`,
      );
    const table = schemaExists
      ? (
          await client.query<{ t: string | null }>('SELECT to_regclass($1)::text AS t', [
            `${schema}.${logsOnly ? 'hub_event_log' : 'hub_events'}`,
          ])
        ).rows[0]!.t
      : null;
    if (table && logsOnly) return result('postgres', 'ok', what);
    if (table) {
      const head = await client.query<{ p: string }>(
        `SELECT coalesce(max(position), 0)::text AS p FROM ${schema}.hub_events`,
      );
      return result('postgres', 'ok', `${what}, head position ${head.rows[0]!.p}`);
    }
    const canCreate = schemaExists
      ? (await client.query<{ c: boolean }>(`SELECT has_schema_privilege($1, 'CREATE') AS c`, [schema]))
          .rows[0]!.c
      : (
          await client.query<{ c: boolean }>(
            `SELECT has_database_privilege(current_database(), 'CREATE') AS c`,
          )
        ).rows[0]!.c;
    if (!canCreate) {
      return result(
        'postgres',
        'fail',
        `${what}: no ${logsOnly ? 'log tables' : 'events table'} yet, and user ${user} may not create ${logsOnly ? 'them' : 'it'}: GRANT CREATE ON ${schemaExists ? `SCHEMA ${schema}` : 'DATABASE'} to ${user}`,
      );
    }
    return result(
      'postgres',
      'ok',
      `${what}, no ${logsOnly ? 'logs' : 'events'} yet (the tables are created at the first start)`,
    );
  } catch (err) {
    return result(
      'postgres',
      'fail',
      `${shown}: ${reason(err)}; check HUB_POSTGRES_URL and that PostgreSQL runs`,
    );
  } finally {
    await client.end().catch(() => {});
  }
}

async function esdbCheck(config: Config): Promise<CheckResult> {
  const shown = redactUrl(config.esdbUrl);
  const { EsdbEventStore } = await import('./eventstore/esdb.ts');
  const store = new EsdbEventStore(config.esdbUrl);
  try {
    const head = await store.head();
    return result('esdb', 'ok', `EventStoreDB at ${shown}, head position ${head}`);
  } catch (err) {
    // gRPC errors end in an empty "Resolution note:".
    const why = reason(err).replace(/\.?\s*Resolution note:\s*$/, '');
    return result('esdb', 'fail', `${shown}: ${why}; check HUB_ESDB_URL and that EventStoreDB runs`);
  } finally {
    await store.close().catch(() => {});
  }
}

async function redisCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
  const shown = redactUrl(config.redisUrl);
  const redis = new Redis(config.redisUrl, {
    lazyConnect: true,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  // With no retries, connect() rejects with "Connection is closed": the cause comes as an event.
  let cause: unknown;
  redis.on('error', (err) => {
    cause ??= err;
  });
  try {
    await redis.connect();
    await redis.ping();
    const info = await redis.info().catch(() => '');
    const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
    const what = `Redis ${field('redis_version') ?? '(version unknown)'} at ${shown}`;
    const unusable = await databaseProblem(redis);
    if (unusable) return result('redis', 'fail', `${what}: ${unusable}; check HUB_REDIS_URL`);
    if (field('role') === 'slave')
      return result('redis', 'fail', `${what} is a read-only replica: point HUB_REDIS_URL at the primary`);
    const policy = field('maxmemory_policy');
    if (Number(field('maxmemory') ?? 0) > 0 && policy && policy !== 'noeviction') {
      return result(
        'redis',
        'warn',
        `${what} has maxmemory-policy ${policy}: it may evict read models and the delivery schedule; set noeviction`,
      );
    }
    return result('redis', 'ok', what);
  } catch (err) {
    return result(
      'redis',
      'fail',
      `${shown}: ${reason(cause ?? err)}; check HUB_REDIS_URL and that Redis runs`,
    );
  } finally {
    redis.disconnect();
  }
}

/** The cluster (kafka) and whether the hub's topics exist yet (topics: missing is a warning). */
async function kafkaChecks(config: Config, timeoutMs: number): Promise<CheckResult[]> {
  const brokers = config.kafkaBrokers.join(',');
  const kafka = new Kafka({
    clientId: 'hub-doctor',
    brokers: config.kafkaBrokers,
    connectionTimeout: Math.min(timeoutMs, 3000),
    requestTimeout: timeoutMs,
    retry: { retries: 0, initialRetryTime: 100, maxRetryTime: 500 },
    logLevel: logLevel.NOTHING,
  });
  const admin = kafka.admin({ retry: { retries: 0 } });
  try {
    await admin.connect();
    const cluster = await admin.describeCluster();
    const existing = new Set(await admin.listTopics());
    const n = cluster.brokers.length;
    const results = [
      result(
        'kafka',
        'ok',
        `Kafka cluster ${cluster.clusterId} at ${brokers}: ${n} broker${n === 1 ? '' : 's'}`,
      ),
    ];
    const wanted = [TOPICS.changes, TOPICS.deliveries].map((t) => config.kafkaPrefix + t);
    const present = wanted.filter((t) => existing.has(t));
    const missing = wanted.filter((t) => !existing.has(t));
    const { topics } =
      present.length > 0 ? await admin.fetchTopicMetadata({ topics: present }) : { topics: [] };
    const found = topics.map((t) => `${t.name} (${t.partitions.length} partitions)`).join(', ');
    results.push(
      missing.length === 0
        ? result('topics', 'ok', found)
        : result(
            'topics',
            'warn',
            `${missing.join(', ')} missing${found ? ` (found ${found})` : ''}: the processor and dispatcher create them at start with ${config.kafkaPartitions} partitions (HUB_KAFKA_PARTITIONS)`,
          ),
    );
    return results;
  } catch (err) {
    return [
      result('kafka', 'fail', `${brokers}: ${reason(err)}; check HUB_KAFKA_BROKERS and that Kafka runs`),
    ];
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

async function mailCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
  const transport = config.mailTransport;
  const distributed = config.profile === 'distributed';
  const send = 'set an smtp:// URL for users to get verification and password-reset emails';
  if (transport === 'log') {
    return result(
      'mail',
      distributed ? 'warn' : 'ok',
      `HUB_MAIL_TRANSPORT=log: emails are not sent, only their recipient and subject logged; ${send}`,
    );
  }
  if (transport === 'file') {
    const dir = resolve(config.dataDir, 'mail');
    return result(
      'mail',
      distributed ? 'warn' : 'ok',
      `HUB_MAIL_TRANSPORT=file: emails are not sent but written to ${dir}${distributed ? ' on the projector host' : ''}; ${send}`,
    );
  }
  const shown = redactUrl(transport);
  const smtp = nodemailer.createTransport({
    url: transport,
    connectionTimeout: timeoutMs,
    greetingTimeout: timeoutMs,
    socketTimeout: timeoutMs,
  });
  try {
    await smtp.verify();
    return result('mail', 'ok', `SMTP server at ${shown} accepts connections, sender ${config.mailFrom}`);
  } catch (err) {
    return result('mail', 'fail', `SMTP ${shown}: ${reason(err)}; check HUB_MAIL_TRANSPORT`);
  } finally {
    smtp.close();
  }
}

async function keysCheck(config: Config): Promise<CheckResult> {
  if (config.jwtPrivateKey) {
    // Loading the configuration checked that it is an ES256 key.
    const { kid } = await fromPem(config.jwtPrivateKey);
    return result('keys', 'ok', `HUB_JWT_PRIVATE_KEY is set: an ES256 key, kid ${kid}`);
  }
  if (config.profile === 'distributed') {
    return result(
      'keys',
      'warn',
      'HUB_JWT_PRIVATE_KEY is not set: a key generated once and shared through Redis signs tokens (development only); set an ES256 PKCS#8 PEM',
    );
  }
  const file = resolve(jwtKeyFile(config.dataDir));
  if (!existsSync(file)) {
    // Made at the first start only: the hub refuses to make one for a store that holds data.
    const held = storedHead(config);
    return held > 0
      ? result(
          'keys',
          'fail',
          `${file} is missing, but the event store holds data (head ${held}) signed and sealed with it: restore it, or set HUB_JWT_PRIVATE_KEY to it; the hub does not start without it`,
        )
      : result('keys', 'ok', `signing key generated at the first start into ${file}`);
  }
  try {
    const { kid } = await fromPem(readFileSync(file, 'utf8'));
    return result('keys', 'ok', `signing key ${file}, kid ${kid}`);
  } catch (err) {
    return result(
      'keys',
      'fail',
      `${file} does not load (${reason(err)}): restore it, or remove it to generate a new one (tokens already issued stop verifying)`,
    );
  }
}

function deviceCaCheck(config: Config): CheckResult {
  // Loading the configuration checked the rest: both set or neither, parsed, the key P-256 and
  // the certificate's own.
  if (config.deviceCaCert) {
    const x509 = new X509Certificate(config.deviceCaCert);
    const until = new Date(x509.validTo);
    const what = `${x509.subject.replace(/\n/g, ', ')}, valid until ${until.toISOString().slice(0, 10)}`;
    if (until.getTime() < Date.now())
      return result('device-ca', 'fail', `HUB_DEVICE_CA_CERT has expired: ${what}`);
    if (until.getTime() < Date.now() + 30 * 86_400_000)
      return result('device-ca', 'warn', `HUB_DEVICE_CA_CERT expires within 30 days: ${what}`);
    return result('device-ca', 'ok', `HUB_DEVICE_CA_CERT ${what}`);
  }
  if (config.profile === 'distributed') {
    return result(
      'device-ca',
      'warn',
      'HUB_DEVICE_CA_CERT/KEY are not set: a CA generated once and shared through Redis signs device certificates (development only)',
    );
  }
  const file = resolve(deviceCaFile(config.dataDir));
  return existsSync(file)
    ? result('device-ca', 'ok', `device CA ${file}`)
    : result('device-ca', 'ok', `device CA generated at the first start into ${dirname(file)}`);
}

function publicUrlCheck(config: Config): CheckResult {
  if (config.publicUrl)
    return result('public-url', 'ok', `links in emails and redirects use ${config.publicUrl}`);
  const listening = `http://${config.host}:${config.port}`;
  if (config.profile === 'distributed') {
    return result(
      'public-url',
      'warn',
      `HUB_PUBLIC_URL is not set: links in emails use the projector's own address (${listening}), which users may not reach; set it to the API's public address`,
    );
  }
  return result(
    'public-url',
    'ok',
    `HUB_PUBLIC_URL is not set: links use the listening address (${listening})`,
  );
}

function webhooksCheck(config: Config): CheckResult {
  const loose = [
    config.webhookAllowHttp ? 'HUB_WEBHOOK_ALLOW_HTTP=true (plain http:// URLs)' : '',
    config.webhookAllowNetworks.length > 0
      ? `HUB_WEBHOOK_ALLOW_NETWORKS=${config.webhookAllowNetworks.join(',')} (private addresses)`
      : '',
  ].filter(Boolean);
  if (loose.length > 0)
    return result('webhooks', 'warn', `${loose.join(', ')}: development and tests only; unset in production`);
  return result('webhooks', 'ok', 'webhooks reach https:// URLs at public addresses only');
}

function callbacksCheck(config: Config): CheckResult {
  const secret = config.saAdminSecret;
  if (!secret)
    return result('callbacks', 'ok', 'HUB_SA_ADMIN_SECRET is not set: /callbacks refuses everyone');
  return result(
    'callbacks',
    'ok',
    'HUB_SA_ADMIN_SECRET is set: the operator account saadmin may use /callbacks',
  );
}

/** HUB_ADMINS names nicks; one that no account holds yet is reserved for the operator to register. */
async function adminsCheck(config: Config): Promise<CheckResult> {
  if (config.admins.length === 0) return result('admins', 'ok', 'HUB_ADMINS is empty: no admins');
  const reserved = (nicks: string[]) =>
    result(
      'admins',
      'warn',
      `HUB_ADMINS lists ${nicks.join(', ')}, not registered yet: reserved, only the operator registers them (POST /auth/accounts with HTTP Basic saadmin)`,
    );
  if (config.profile === 'embedded' && !existsSync(resolve(config.dataDir, 'events.sqlite')))
    return reserved(config.admins);
  const store = await openEventStore(config);
  try {
    const missing: string[] = [];
    for (const nick of config.admins)
      if (!(await nameOwner(store, 'nick', nick.toLowerCase()))) missing.push(nick);
    if (missing.length > 0) return reserved(missing);
    return result('admins', 'ok', `every nick HUB_ADMINS lists is registered (${config.admins.join(', ')})`);
  } finally {
    await store.close();
  }
}

function captchaCheck(config: Config): CheckResult {
  if (!config.captchaVerifyUrl)
    return result('captcha', 'ok', 'off (HUB_CAPTCHA_VERIFY_URL is not set): registration asks no captcha');
  if (!config.captchaSecret)
    return result(
      'captcha',
      'warn',
      `HUB_CAPTCHA_VERIFY_URL is set but HUB_CAPTCHA_SECRET is not: the provider will refuse every check`,
    );
  return result('captcha', 'ok', `registration answers are checked at ${redactUrl(config.captchaVerifyUrl)}`);
}

/** A check that does not finish within the bound fails, naming it. */
async function withTimeout(
  name: string,
  check: () => Promise<CheckResult | CheckResult[]>,
  ms: number,
): Promise<CheckResult | CheckResult[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<CheckResult>((ok) => {
    timer = setTimeout(() => ok(result(name, 'fail', `no answer within ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([check().catch((err: unknown) => result(name, 'fail', reason(err))), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** An error's message, or its causes' when it has none (AggregateError of several addresses). */
function reason(err: unknown): string {
  const e = err as Error & { errors?: unknown[]; cause?: unknown; code?: string };
  if (e?.message) return e.message.trim().replace(/\.$/, '');
  if (Array.isArray(e?.errors) && e.errors.length > 0) return reason(e.errors[0]);
  if (e?.cause) return reason(e.cause);
  if (e?.code) return e.code;
  return String(err);
}

/** Every secret the environment holds: secret knobs, and the passwords of URL knobs. */
function secretsOf(env: Record<string, string | undefined>): string[] {
  const secrets: string[] = [];
  for (const name of [
    'HUB_JWT_PRIVATE_KEY',
    'HUB_SA_ADMIN_SECRET',
    'HUB_METRICS_TOKEN',
    'HUB_CAPTCHA_SECRET',
    'HUB_DEVICE_CA_KEY',
  ]) {
    if (env[name]) secrets.push(env[name]);
  }
  for (const name of [
    'HUB_POSTGRES_URL',
    'HUB_ESDB_URL',
    'HUB_REDIS_URL',
    'HUB_MAIL_TRANSPORT',
    'HUB_CAPTCHA_VERIFY_URL',
  ]) {
    const raw = env[name];
    if (!raw) continue;
    try {
      const { password } = new URL(raw);
      if (password) secrets.push(password, decodeURIComponent(password));
    } catch {
      const m = /\/\/[^:/@]*:([^@/]*)@/.exec(raw);
      if (m?.[1]) secrets.push(m[1]);
    }
  }
  // Very short ones would blank out ordinary words; the URLs are redacted where shown anyway.
  return [...new Set(secrets)].filter((s) => s.length >= 4).sort((a, b) => b.length - a.length);
}

function scrub(results: CheckResult[], secrets: string[]): CheckResult[] {
  return results.map((r) => ({
    ...r,
    detail: secrets.reduce((detail, secret) => detail.split(secret).join('***'), r.detail),
  }));
}
