// `hub doctor`'s checks of the services the hub depends on under its configuration: the port it
// listens on, the embedded data dir and SQLite file; PostgreSQL, EventStoreDB, Redis and Kafka in
// the distributed profile; the mail transport. Each only reads, with a short timeout; the results
// never hold a secret (doctor.ts scrubs them, and URLs are shown redacted).
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import kafkajs, { type Admin, Kafka, logLevel } from 'kafkajs';
import nodemailer from 'nodemailer';
import pg from 'pg';
import { TOPICS } from '../infra/bus/port.ts';
import type { Config } from '../infra/config.ts';
import { databaseProblem } from '../infra/redis.ts';

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

export const result = (name: string, level: Level, detail: string): CheckResult => ({
  name,
  level,
  ok: level !== 'fail',
  detail,
});

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

/** An error's message, or its causes' when it has none (AggregateError of several addresses). */
export function reason(err: unknown): string {
  const e = err as Error & { errors?: unknown[]; cause?: unknown; code?: string };
  if (e?.message) return e.message.trim().replace(/\.$/, '');
  if (Array.isArray(e?.errors) && e.errors.length > 0) return reason(e.errors[0]);
  if (e?.cause) return reason(e.cause);
  if (e?.code) return e.code;
  return String(err);
}

/** Can this process serve HTTP on HUB_HOST:HUB_PORT? */
export async function listenCheck(config: Config): Promise<CheckResult> {
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

export function dataDirCheck(config: Config): CheckResult {
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

/** The embedded event store's head position, 0 when there is none (or it does not read). */
export function storedHead(config: Config): number {
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

/** Opens the embedded event store and reads its head; a missing file is made at the first start.
 * Opened read-write as the hub opens it (a file the hub cannot write fails here too), but only read. */
export function sqliteCheck(config: Config): CheckResult {
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

export async function postgresCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
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

export async function esdbCheck(config: Config): Promise<CheckResult> {
  const shown = redactUrl(config.esdbUrl);
  const { EsdbEventStore } = await import('../infra/eventstore/esdb.ts');
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

export async function redisCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
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

/** The cluster (kafka), whether the hub's topics exist yet (topics: missing is a warning), and
 * whether the broker takes the consumers' session (kafka-group: outside its bounds, the
 * processor and dispatcher fail to start). */
export async function kafkaChecks(config: Config, timeoutMs: number): Promise<CheckResult[]> {
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
    results.push(await sessionCheck(admin, String(cluster.brokers[0]?.nodeId), config.kafkaSessionTimeoutMs));
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

/** HUB_KAFKA_SESSION_TIMEOUT_MS against the broker's group.min/max.session.timeout.ms. */
async function sessionCheck(admin: Admin, broker: string, sessionMs: number): Promise<CheckResult> {
  // From the package's object: Node's loader does not find this one among kafkajs's named exports.
  const { ConfigResourceTypes } = kafkajs;
  const names = ['group.min.session.timeout.ms', 'group.max.session.timeout.ms'];
  try {
    const { resources } = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.BROKER, name: broker, configNames: names }],
    });
    const value = (name: string) =>
      Number(resources[0]?.configEntries.find((e) => e.configName === name)?.configValue);
    const [min, max] = names.map(value) as [number, number];
    if (!Number.isFinite(min) || !Number.isFinite(max))
      throw new Error(`broker ${broker} did not tell ${names.join(' and ')}`);
    const bounds = `the broker's ${min.toLocaleString('en')}-${max.toLocaleString('en')} ms (${names.join(', ')})`;
    return sessionMs >= min && sessionMs <= max
      ? result(
          'kafka-group',
          'ok',
          `consumer session ${sessionMs.toLocaleString('en')} ms (HUB_KAFKA_SESSION_TIMEOUT_MS), within ${bounds}`,
        )
      : result(
          'kafka-group',
          'fail',
          `HUB_KAFKA_SESSION_TIMEOUT_MS=${sessionMs} is outside ${bounds}: the processor and dispatcher would fail to join their groups`,
        );
  } catch (err) {
    return result(
      'kafka-group',
      'warn',
      `the broker's session bounds could not be read (${reason(err)}): HUB_KAFKA_SESSION_TIMEOUT_MS=${sessionMs} not checked`,
    );
  }
}

export async function mailCheck(config: Config, timeoutMs: number): Promise<CheckResult> {
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
