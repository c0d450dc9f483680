// What tests share: configuration for the local infrastructure (infra/local.sh), an app on an
// ephemeral port, and a JSON fetch helper. No mocks: every test talks to the real thing.
import { once } from 'node:events';
import { mkdtempSync } from 'node:fs';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Kafka, logLevel } from 'kafkajs';
import type Koa from 'koa';
import pg from 'pg';
import { apiServer } from '../api/http.ts';
import { type Config, loadConfig } from '../infra/config.ts';
import { createLogger, type Logger } from '../infra/telemetry.ts';

/** Configuration for tests: defaults (which point at infra/local.sh) plus overrides. */
export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    HUB_PORT: '0',
    HUB_LOG_LEVEL: 'silent',
    HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-test-')),
    // The suite's hubs serve HTTP on their main thread; `npm run test:threads` runs the e2e tests
    // again on two API threads (the default on a multi-core machine is a thread per core), their
    // dispatchers' HTTP on the dispatching thread (the default: a thread of its own).
    HUB_API_THREADS: '0',
    ...pick(
      process.env,
      /^HUB_(POSTGRES_URL|REDIS_URL|KAFKA_BROKERS|ESDB_URL|API_THREADS|DISPATCHER_HTTP_THREADS)$/,
    ),
    ...env,
  });
}

function pick(env: NodeJS.ProcessEnv, re: RegExp): Record<string, string> {
  return Object.fromEntries(Object.entries(env).filter(([k, v]) => re.test(k) && v !== undefined)) as Record<
    string,
    string
  >;
}

/** The PostgreSQL URL with the store's tables in `schema` (a test's own, dropped by dropSchema). */
export const inSchema = (postgresUrl: string, schema: string): string =>
  `${postgresUrl}${postgresUrl.includes('?') ? '&' : '?'}schema=${schema}`;

/** The Redis URL of database `db` (a test file's own: each file uses one no other file does). */
export const redisDb = (redisUrl: string, db: number): string => `${redisUrl.replace(/\/\d*$/, '')}/${db}`;

/** Drops a PostgreSQL schema a test made for its event store (a connection of its own: the store
 * may be closed). */
export async function dropSchema(postgresUrl: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: postgresUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** Deletes the Kafka topics a test or a bench made under its own `prefix` (HUB_KAFKA_PREFIX: a
 * name and a random id or a time, `name-id-`, `bench_time-`). Left, they piled up run after run on
 * a developer's broker (573 topics, about 5,000 partitions; 3,483 partitions and 4 GB before the
 * benches gave theirs back). Its clients must be gone first: the broker creates a topic again for a
 * client that asks for it. Cleanup only: a failure is printed and does not fail the test or hide
 * what did (a broker that is down is often why a test failed). */
export async function deleteTopics(brokers: string[], prefix: string): Promise<void> {
  if (!/^[a-z]+[-_][0-9a-z]{6,}-$/.test(prefix)) throw new Error(`not a test's own prefix: "${prefix}"`);
  const admin = new Kafka({
    clientId: 'hub-test-cleanup',
    brokers,
    logLevel: logLevel.NOTHING,
    retry: { retries: 1 },
  }).admin();
  try {
    await admin.connect();
    const topics = (await admin.listTopics()).filter((t) => t.startsWith(prefix));
    if (topics.length > 0) await admin.deleteTopics({ topics });
  } catch (err) {
    process.stderr.write(`topics ${prefix}* not deleted: ${(err as Error).message}\n`);
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

/** A logger whose lines are kept in memory, so tests can read what was logged. */
export function memoryLogger(level = 'info'): { logger: Logger; lines: () => string[] } {
  const chunks: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger(level, sink), lines: () => chunks.join('').split('\n').filter(Boolean) };
}

export async function listen(app: Koa): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = apiServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface JsonResponse {
  status: number;
  headers: Headers;
  // biome-ignore lint/suspicious/noExplicitAny: tests read arbitrary JSON
  body: any;
}

export async function request(
  url: string,
  init: { method?: string; body?: unknown; raw?: string | Buffer; headers?: Record<string, string> } = {},
): Promise<JsonResponse> {
  const headers: Record<string, string> = { ...init.headers };
  let body: string | Buffer | undefined;
  if (init.raw !== undefined) body = init.raw;
  else if (init.body !== undefined) {
    body = JSON.stringify(init.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(url, { method: init.method ?? 'GET', headers, body });
  const text = await res.text();
  let parsed: unknown = text;
  if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
  return { status: res.status, headers: res.headers, body: parsed };
}
