// The HTTP API on worker threads (HUB_API_THREADS > 0, a process with the api role). Every thread
// serves every route on the same port (the kernel spreads connections among them: SO_REUSEPORT),
// while the main thread keeps the stores: embedded, what must be one (the event store's writer
// and its authoritative revisions, the read models, the event log and the delivery store);
// distributed, the process's connections to PostgreSQL, Redis and Kafka. A thread reaches them
// through a ThreadChannel, as an API process of the distributed profile reaches Redis and
// PostgreSQL: the same routes and aggregate code, with the store "not written by this thread
// alone" (each append checks the stream's revision, see infra/eventstore/aggregate.ts). The keys
// are the ones the main thread resolved (a file, Redis or the configuration). Embedded, a thread's
// appends skip the main thread: they go straight to the event store's writer thread (its port from
// connectAppender), so an answer waits for none of the main thread's derived work. Embedded,
// read-your-writes needs no record of each write: a read waits for the store's head
// (StoreHeadLastWrites); distributed, each write is recorded in Redis, where every API process
// reads it, on the thread's own connection (through the main thread, the record had been a second
// round trip between the threads after the append's).
//
// Why: HTTP parsing, Koa, tokens, bodies and answers are most of a request's CPU; on one thread
// they bound the hub to one core. This file is both sides: the main thread's (startApiThreads)
// and the thread's body (at the bottom), as the SQLite writer is.
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, Registry } from 'prom-client';
import type { Config } from '../infra/config.ts';
import { appendedElsewhere, boundStateCaches } from '../infra/eventstore/aggregate.ts';
import {
  type AppendResult,
  DuplicateEventIdError,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type RecordedEvent,
  SharedHeads,
  type Snapshot,
  serialise,
  type WriterLink,
  WrongExpectedRevisionError,
} from '../infra/eventstore/port.ts';
import { APPEND_DURATION, SchemaCheck } from '../infra/eventstore/schema-checked.ts';
import { type FixedWindows, MemoryTokenBuckets } from '../infra/rate-limits.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import { commandConnection } from '../infra/redis.ts';
import { createLogger, createMetrics, type Logger, type Metrics } from '../infra/telemetry.ts';
import { errorsCrossThreads, ThreadAppends, ThreadChannel } from '../infra/threads.ts';
import type { DeliveryStore } from '../processors/delivery/port.ts';
import type { EventLog } from '../processors/stream/eventlog.ts';
import { ProjectionLagError } from '../projections/consistency.ts';
import { type ProjectionOperations, ReplayRunningError } from '../projections/replay.ts';
import { SchemaError, SchemaRegistry } from '../schemas/registry.ts';
import { adminRoutes } from './admin/routes.ts';
import { type AppDeps, closeServer, createApp, type ReadinessCheck, StillBuilding } from './app.ts';
import { appRoutes } from './apps/routes.ts';
import { captchaCheck } from './auth/captcha.ts';
import { fromPem } from './auth/keys.ts';
import { authenticate } from './auth/middleware.ts';
import { authRoutes } from './auth/routes.ts';
import { callbackRoutes } from './callbacks/routes.ts';
import {
  consistency,
  RedisLastWrites,
  StoreHeadLastWrites,
  type WaitForPosition,
  warnUnremembered,
} from './consistency.ts';
import { consoleRoutes } from './console.ts';
import type { HubContext } from './context.ts';
import { loadDeviceCa } from './devices/ca.ts';
import { deviceRoutes } from './devices/routes.ts';
import { trailRoutes } from './devices/trails.ts';
import { HttpError } from './errors.ts';
import { apiServer } from './http.ts';
import { profileRoutes } from './profiles/routes.ts';
import { webhookRoutes } from './webhooks/routes.ts';
import { StreamSlots } from './webhooks/stream.ts';

/** Every service's routes, and the bearer token check the registry gives those that declare it:
 * the API role, on the main thread or on an API thread. */
export function serviceRoutes(hub: HubContext): Required<Pick<AppDeps, 'mount' | 'authenticate'>> {
  return {
    mount: [
      authRoutes(hub),
      appRoutes(hub),
      profileRoutes(hub),
      deviceRoutes(hub),
      trailRoutes(hub),
      callbackRoutes(hub),
      webhookRoutes(hub),
      adminRoutes(hub),
      consoleRoutes(),
    ],
    authenticate: authenticate(hub.keys, hub.store, hub.config.callerCacheEntries),
  };
}

// The errors the routes tell apart (api/errors.ts, the aggregate's retry) arrive as themselves.
errorsCrossThreads(
  WrongExpectedRevisionError,
  DuplicateEventIdError,
  ProjectionLagError,
  SchemaError,
  HttpError,
  ReplayRunningError, // 409 from /admin/projections/{name}/replay
  StillBuilding, // /readyz on a thread shows how far the main thread's build is
);

// What an API thread may call on the main thread: the methods the routes use, no more.
const SERVED = {
  store: ['append', 'readStream', 'readAll', 'head', 'readSnapshot', 'saveSnapshot'],
  readStore: ['activeGeneration', 'checkpoint', 'get', 'range', 'count'],
  reads: ['waitFor'],
  fixedWindows: ['hit', 'spent', 'mark', 'marked'],
  eventLog: ['list', 'get', 'head', 'tail'],
  deliveries: ['enqueue', 'attempts', 'attempt', 'attemptsOfEvent', 'health'],
  projections: ['list', 'one', 'replay'],
} as const;

/** What the main thread owns and the API threads use. */
export interface Owned {
  store: EventStore;
  readStore: ReadStore;
  waitFor: WaitForPosition;
  fixedWindows: FixedWindows;
  eventLog: EventLog;
  deliveries: DeliveryStore;
  projections: ProjectionOperations;
}

interface ThreadData {
  config: Config;
  /** The keys as the main thread resolved them (PEM), apart from the configuration the routes get. */
  secrets: Pick<Config, 'jwtPrivateKey' | 'deviceCaCert' | 'deviceCaKey'>;
  level: string;
  port: number;
  readiness: string[];
  storeKind: string;
  snapshotEvery: number;
}

export interface ApiThreads {
  url: string;
  stop(): Promise<void>;
}

/**
 * Starts `config.apiThreads` API threads, one after the other (the first one picks the port when
 * HUB_PORT is 0; the others follow it), each given the keys the main thread resolved.
 * The main thread's own metrics are then served by the threads, the HTTP histogram summed over them.
 */
export async function startApiThreads(o: {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  owned: Owned;
  readiness: Record<string, ReadinessCheck>;
  secrets: Pick<Config, 'jwtPrivateKey' | 'deviceCaCert' | 'deviceCaKey'>;
}): Promise<ApiThreads> {
  const { config, logger, metrics, owned } = o;
  // Every thread's requests are counted by that thread; scrape() sums them. So are the appends a
  // thread sends straight to the event store's writer: the main thread's own are summed with theirs.
  metrics.registry.removeSingleMetric('hub_http_request_duration_seconds');
  const summed = new Registry();
  const appendDuration = metrics.registry.getSingleMetric(APPEND_DURATION);
  if (appendDuration) {
    metrics.registry.removeSingleMetric(APPEND_DURATION);
    summed.registerMetric(appendDuration);
  }
  const destination = (logger as unknown as Record<symbol, { write(line: string): void }>)[
    pino.symbols.streamSym
  ]!;
  const threads: Array<{ worker: Worker; channel: ThreadChannel }> = [];
  const scrape = async (): Promise<string> => {
    const parts = (await Promise.all([
      summed.getMetricsAsJSON(),
      ...threads.map((t) => t.channel.call('metrics', 'json', [])),
    ])) as MetricObjectWithValues<MetricValue<string>>[][];
    return Registry.merge([metrics.registry, AggregatorRegistry.aggregate(parts)]).metrics();
  };
  const stop = async () => {
    // Each thread stops taking requests and finishes those in flight, while the main thread still
    // answers their calls; then it ends.
    await Promise.all(
      threads.map(async ({ worker, channel }) => {
        await channel.call('thread', 'stop', [config.shutdownTimeoutMs / 2]).catch(() => {});
        await worker.terminate();
      }),
    );
  };
  const appends = new ThreadAppends();
  // A thread's appends run in their stream's turn and are told to the other threads.
  const storeOf = (self: ThreadChannel) => ({
    append: (stream: string, events: NewEvent[], expected?: ExpectedRevision) =>
      appends.append(self, stream, events, () => owned.store.append(stream, events, expected)),
    readStream: owned.store.readStream.bind(owned.store),
    readAll: owned.store.readAll.bind(owned.store),
    head: owned.store.head.bind(owned.store),
    readSnapshot: async (stream: string, kind: string) => owned.store.readSnapshot?.(stream, kind),
    saveSnapshot: async (stream: string, snapshot: Snapshot) => owned.store.saveSnapshot?.(stream, snapshot),
  });
  // One budget per caller for the whole process, whichever thread its connections reach.
  const tokenBuckets = new MemoryTokenBuckets(
    config.rateLimitPerSecond,
    config.rateLimitBurst,
    config.callerCacheEntries,
  );
  // One count of open event streams per account for the process, too.
  const streamSlots = new StreamSlots();
  let port = config.port;
  try {
    for (let i = 0; i < config.apiThreads; i++) {
      const data: ThreadData = {
        config,
        secrets: o.secrets,
        level: logger.level,
        port,
        readiness: Object.keys(o.readiness),
        storeKind: owned.store.kind,
        snapshotEvery: owned.store.snapshotEvery ?? 0,
      };
      // Embedded, the thread appends straight to the event store's writer thread.
      const writerLink = owned.store.connectAppender?.();
      const worker = new Worker(new URL(import.meta.url), {
        workerData: { apiThread: data, writerLink },
        transferList: writerLink ? [writerLink.port] : [],
      });
      const channel = new ThreadChannel(worker);
      threads.push({ worker, channel });
      appends.join(channel);
      const listening = Promise.withResolvers<number>();
      worker.once('error', listening.reject);
      worker.once('exit', (code) => {
        const gone = new Error(`API thread ${i + 1} exited (${code})`);
        channel.close(gone);
        appends.leave(channel);
        listening.reject(gone);
      });
      const served: Record<keyof typeof SERVED, object> = {
        ...owned,
        store: storeOf(channel),
        reads: { waitFor: owned.waitFor },
      };
      for (const [name, methods] of Object.entries(SERVED)) {
        channel.serve(name, served[name as keyof typeof SERVED], methods);
      }
      channel.serve('tokenBuckets', tokenBuckets, ['take']);
      channel.serve('streamSlots', streamSlots, ['take', 'give']);
      channel.serve(
        'node',
        {
          ready: (check: string) => o.readiness[check]?.(),
          scrape,
          log: (line: string) => destination.write(line),
          listening: (at: number) => listening.resolve(at),
        },
        ['ready', 'scrape', 'log', 'listening'],
      );
      port = await listening.promise;
    }
  } catch (err) {
    await stop();
    throw err;
  }
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  return { url: `http://${host}:${port}`, stop };
}

/**
 * The thread's event store: reads through the main thread, appends straight to the embedded
 * store's writer thread when given a link to it (the answer then waits for no turn of the main
 * thread), checked here as the main thread checks its own (SchemaCheck). The heads the writer
 * shares answer without a message what the thread asks most: the store's head (read-your-writes)
 * and whether a stream has anything past the revision it holds (the check of a decision that
 * changes nothing). Should the writer thread end, its port closes: the appends waiting on it fail
 * (whether they committed is unknown, as on the main thread), and later ones go through the main
 * thread, which starts a writer again.
 */
function appendingDirectly(
  viaMain: EventStore,
  link: WriterLink | undefined,
  registry: Registry,
  serve: (writer: ThreadChannel) => void,
): EventStore {
  if (!link) return viaMain;
  const check = new SchemaCheck(SchemaRegistry.load(), registry);
  const heads = new SharedHeads(link.heads);
  let writer: ThreadChannel | undefined = new ThreadChannel(link.port);
  serve(writer);
  link.port.on('close', () => {
    writer?.close(new Error("the event store's writer thread ended"));
    writer = undefined;
  });
  return {
    ...viaMain,
    readStream(stream, fromRevision = 0, max) {
      const last = writer && heads.revision(stream);
      if (last !== undefined && fromRevision > last) return Promise.resolve([]);
      return viaMain.readStream(stream, fromRevision, max);
    },
    head: () => (writer ? Promise.resolve(heads.head()) : viaMain.head()),
    append(stream, events, expected = 'any') {
      const to = writer;
      if (!to) return viaMain.append(stream, events, expected);
      let stamped: NewEvent[];
      try {
        stamped = serialise(check.stamp(events));
      } catch (err) {
        return Promise.reject(err);
      }
      return check.timed(
        () => to.call('writer', 'append', [stream, stamped, expected]) as Promise<AppendResult>,
      );
    },
  };
}

async function runApiThread(data: ThreadData, writerLink: WriterLink | undefined): Promise<void> {
  const { config } = data;
  const channel = new ThreadChannel(parentPort!);
  const logger = createLogger(data.level, { write: (line: string) => channel.send('node', 'log', [line]) });
  const metrics = createMetrics({ processMetrics: false });
  channel.serve('metrics', { json: () => metrics.registry.getMetricsAsJSON() }, ['json']);
  const remote = <T>(name: keyof typeof SERVED, fixed: Partial<T> = {}) =>
    channel.remote<T>(name, SERVED[name], fixed);
  const viaMain = remote<EventStore>('store', {
    kind: data.storeKind,
    exclusiveWriter: false,
    snapshotEvery: data.snapshotEvery,
    subscribe: () => {
      throw new Error('subscriptions run on the main thread');
    },
    close: async () => {},
  });
  // The other threads' appends, told by whichever thread runs them (the main thread, or the
  // event store's writer thread, whose news carry the events as stored: their data serialised).
  const parsed = (e: RecordedEvent) => (typeof e.data === 'string' ? { ...e, data: JSON.parse(e.data) } : e);
  const appended = {
    apply: (stream: string, events: RecordedEvent[]) => appendedElsewhere(store, stream, events.map(parsed)),
  };
  channel.serve('appended', appended, ['apply']);
  const store = appendingDirectly(viaMain, writerLink, metrics.registry, (writer) =>
    writer.serve('appended', appended, ['apply']),
  );
  boundStateCaches(store, config.stateCacheEntries);
  const readStore = remote<ReadStore>('readStore', { kind: 'main thread' });
  const { waitFor } = remote<{ waitFor: WaitForPosition }>('reads');
  // While Redis is away a record fails within its bound (answered anyway, with the consistency's
  // warning) and a read's look-up of the caller's last write fails the read, as on the main thread.
  const lastWritesRedis = config.profile === 'embedded' ? undefined : commandConnection(config.redisUrl);
  let url = '';
  const hub: HubContext = {
    config,
    logger,
    store,
    readStore,
    // Embedded, the store's head stands for each caller's last write (StoreHeadLastWrites); the
    // distributed profile's are shared with the other API processes, so they are kept in Redis.
    consistency: consistency(
      lastWritesRedis ? new RedisLastWrites(lastWritesRedis) : new StoreHeadLastWrites(store),
      waitFor,
      warnUnremembered(logger),
    ),
    keys: await fromPem(data.secrets.jwtPrivateKey),
    fixedWindows: remote<FixedWindows>('fixedWindows'),
    eventLog: remote<EventLog>('eventLog'),
    deliveries: remote<DeliveryStore>('deliveries'),
    projections: remote<ProjectionOperations>('projections'),
    streamSlots: {
      take: (owner: string, max: number) =>
        channel.call('streamSlots', 'take', [owner, max]) as Promise<number>,
      give: (owner: string) => channel.call('streamSlots', 'give', [owner]) as Promise<void>,
    },
    captcha: captchaCheck(config.captchaVerifyUrl, config.captchaSecret),
    deviceCa: await loadDeviceCa({ certPem: data.secrets.deviceCaCert, keyPem: data.secrets.deviceCaKey }),
    publicUrl: () => config.publicUrl || url,
  };
  const readiness = Object.fromEntries(
    data.readiness.map((name) => [name, () => channel.call('node', 'ready', [name]) as Promise<void>]),
  );
  const { app } = createApp({
    config,
    logger,
    metrics,
    readiness,
    ...serviceRoutes(hub),
    // Off (0) costs no call; on, each charge asks the main thread's buckets.
    tokenBuckets:
      config.rateLimitPerSecond > 0
        ? { take: (key: string) => channel.call('tokenBuckets', 'take', [key]) as Promise<number> }
        : undefined,
    scrape: () => channel.call('node', 'scrape', []) as Promise<string>,
  });
  const server: Server = apiServer(app);
  server.listen({ port: data.port, host: config.host, reusePort: true });
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
  const stop = async (ms: number) => {
    await closeServer(server, ms);
    // The answers are sent, each having waited for its record (or its bound); a request still
    // running past the drain's limit fails its record at once and answers anyway. A QUIT would wait
    // for a Redis that is down.
    lastWritesRedis?.disconnect();
  };
  channel.serve('thread', { stop }, ['stop']);
  await channel.call('node', 'listening', [port]);
}

if (!isMainThread && workerData?.apiThread) {
  runApiThread(workerData.apiThread as ThreadData, workerData.writerLink as WriterLink | undefined).catch(
    (err: unknown) => {
      // The main thread sees the thread end ('exit'); the reason goes to stderr.
      console.error(err);
      process.exit(1);
    },
  );
}
