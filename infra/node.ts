// Assembles one process of Device Hub from the configuration: the adapters of the profile,
// then the roles asked for. `hub start` runs every role; `hub api` and `hub projector` one each.
import { once } from 'node:events';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Redis } from 'ioredis';
import type { Registry as PromRegistry } from 'prom-client';
import { closeServer, createApp, type ReadinessCheck, StillBuilding } from '../api/app.ts';
import { captchaCheck } from '../api/auth/captcha.ts';
import { loadKeys } from '../api/auth/keys.ts';
import {
  type Consistency,
  consistency,
  type LastWrites,
  MemoryLastWrites,
  RedisLastWrites,
  type WaitForPosition,
} from '../api/consistency.ts';
import type { HubContext } from '../api/context.ts';
import { loadDeviceCa } from '../api/devices/ca.ts';
import { apiServer } from '../api/http.ts';
import type { Routes } from '../api/routes.ts';
import { serviceRoutes, startApiThreads } from '../api/threads.ts';
import {
  type ActorStates,
  MemoryActorStates,
  RedisActorStates,
  SqliteActorStates,
} from '../processors/actors.ts';
import { encodeJob } from '../processors/delivery/codec.ts';
import { Dispatcher } from '../processors/delivery/dispatcher.ts';
import { Egress } from '../processors/delivery/egress.ts';
import type { DeliveryStore } from '../processors/delivery/port.ts';
import { PostgresAttemptLog } from '../processors/delivery/postgres.ts';
import { RedisDeliveryStore } from '../processors/delivery/redis.ts';
import { ThreadedDeliveryStore } from '../processors/delivery/threaded.ts';
import type { DeviceActor } from '../processors/derive.ts';
import { type EventLog, MemoryEventLog } from '../processors/eventlog.ts';
import { PostgresEventLog } from '../processors/eventlog-postgres.ts';
import { SqliteEventLog } from '../processors/eventlog-sqlite.ts';
import { mailProcessor } from '../processors/mailer.ts';
import { PostgresLogs } from '../processors/postgres-logs.ts';
import { moveLogsFromRedis } from '../processors/postgres-logs-move.ts';
import { ProcessorMetrics, projectedSubscriptions, StreamProcessor } from '../processors/processor.ts';
import { publicityProcessor } from '../processors/publicity.ts';
import { relay } from '../processors/relay.ts';
import { waitForPosition } from '../projections/consistency.ts';
import { projections } from '../projections/index.ts';
import { ProjectionMetrics, ProjectionRunner } from '../projections/runner.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import { KafkaBus } from './bus/kafka.ts';
import { MemoryBus } from './bus/memory.ts';
import { type Bus, TOPICS } from './bus/port.ts';
import { type CheckpointStore, FileCheckpoints, MemoryCheckpoints, RedisCheckpoints } from './checkpoints.ts';
import { type Config, ConfigError } from './config.ts';
import { boundStateCaches } from './eventstore/aggregate.ts';
import { openEventStore } from './eventstore/open.ts';
import type { EventStore } from './eventstore/port.ts';
import { SchemaCheckedStore } from './eventstore/schema-checked.ts';
import { type Limiter, MemoryLimiter, RedisLimiter } from './limits.ts';
import { createMailer } from './mail.ts';
import { MemoryReadStore } from './readstore/memory.ts';
import type { ReadStore } from './readstore/port.ts';
import { databaseProblem, RedisReadStore } from './readstore/redis.ts';
import { SqliteReadStore } from './readstore/sqlite.ts';
import { type DerivedDatabase, openDerivedDatabase } from './sqlite.ts';
import { createLogger, createMetrics, type Logger, type Metrics } from './telemetry.ts';

export type Role = 'api' | 'projector' | 'processor' | 'dispatcher';
export const ROLES: Role[] = ['api', 'projector', 'processor', 'dispatcher'];

/** The version in User-Agent and /openapi.json. */
export const VERSION: string = JSON.parse(
  readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
).version;

export interface HubNode {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  store: EventStore;
  readStore: ReadStore;
  eventLog: EventLog;
  deliveries: DeliveryStore;
  /** The bus of the change pipeline, when this process runs it. */
  bus: Bus | undefined;
  consistency: Consistency;
  runners: ProjectionRunner[];
  /** Base URL of the API when the api role runs. */
  url: string;
  stop(): Promise<void>;
}

export interface Stores {
  store: EventStore;
  readStore: ReadStore;
  lastWrites: LastWrites;
  limiter: Limiter;
  checkpoints: CheckpointStore;
  /** The account-wide log of derived webhook events. */
  eventLog: EventLog;
  /** The device actors' states (the stream processor's). */
  actorStates: ActorStates<DeviceActor>;
  /** Pending delivery jobs and the record of attempts. */
  deliveries: DeliveryStore;
  /** The event log's and the attempt records' PostgreSQL (distributed profile). */
  logs?: PostgresLogs;
  /** Shared Redis connection (distributed profile). */
  redis: Redis | undefined;
  /** The Avro schemas, loaded once per process. */
  registry: SchemaRegistry;
  close(): Promise<void>;
}

/**
 * Takes the embedded profile's data dir for this process: its SQLite files are one process's,
 * whose caches assume they are the only writer (two hubs on one dir acknowledged writes that failed
 * and read each other's as stale). The lock is SQLite's exclusive lock on `hub.lock`, held by one
 * connection until it closes: the system drops it with the process (a kill -9, a crash), whatever
 * pid comes next, and a second connection is refused in this process as in any other.
 * `hub.pid` says who holds it, for people. Answers the release.
 */
export function lockDataDir(dir: string): () => Promise<void> {
  mkdirSync(dir, { recursive: true });
  const lock = new DatabaseSync(join(dir, 'hub.lock'));
  try {
    lock.exec('PRAGMA busy_timeout = 0; PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; COMMIT');
  } catch (err) {
    lock.close();
    if (((err as { errcode?: number }).errcode ?? 0) % 256 !== 5) throw err; // SQLITE_BUSY: held
    let holder = '';
    try {
      holder = readFileSync(join(dir, 'hub.pid'), 'utf8').trim();
    } catch {}
    throw new ConfigError(
      'HUB_DATA_DIR',
      `${dir} is in use by another hub${holder ? ` (process ${holder}${holder === String(process.pid) ? ', this one' : ''})` : ''}: one hub per data dir (stop it, or give this one a dir of its own).`,
    );
  }
  writeFileSync(join(dir, 'hub.pid'), `${process.pid}\n`);
  return async () => lock.close();
}

/**
 * Refuses a port another process serves, before anything starts: API threads listen with
 * reusePort, with which a second hub on the port started and the kernel shared the connections
 * out between the two. Also names a host this machine does not have.
 */
async function assertPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  try {
    probe.listen({ host, port, exclusive: true });
    await once(probe, 'listening');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      throw new ConfigError('HUB_PORT', `${port} is in use on ${host} (another hub?).`);
    if (code === 'ENOTFOUND' || code === 'EADDRNOTAVAIL')
      throw new ConfigError('HUB_HOST', `${host} is not an address of this machine.`);
    throw err;
  } finally {
    probe.close();
  }
}

/** The adapters of the profile, shared by every role of the process. With a logger (a role's
 * process, not a one-off command), the distributed stores check PostgreSQL's logs at once and move
 * what an earlier version kept of them in Redis. */
export async function openStores(config: Config, metrics?: PromRegistry, logger?: Logger): Promise<Stores> {
  const registry = SchemaRegistry.load();
  const store = new SchemaCheckedStore(await openEventStore(config), registry, metrics);
  boundStateCaches(store, config.stateCacheEntries);
  const retentionMs = config.eventLogRetentionDays * 86_400_000;
  if (config.profile === 'embedded') {
    // Derived state on disk (HUB_EMBEDDED_STATE=sqlite): a start resumes from its checkpoints.
    let derived: DerivedDatabase | undefined;
    try {
      derived =
        config.embeddedState === 'sqlite'
          ? openDerivedDatabase(join(config.dataDir, 'derived.sqlite'))
          : undefined;
    } catch (err) {
      await store.close();
      throw err;
    }
    const readStore = derived ? new SqliteReadStore(derived) : new MemoryReadStore();
    const checkpoints = new FileCheckpoints(join(config.dataDir, 'checkpoints'));
    const deliveries = new ThreadedDeliveryStore(join(config.dataDir, 'deliveries.sqlite'), { retentionMs });
    return {
      store,
      readStore,
      lastWrites: new MemoryLastWrites(config.callerCacheEntries),
      limiter: new MemoryLimiter(config.callerCacheEntries),
      checkpoints,
      eventLog: derived ? new SqliteEventLog(derived, { retentionMs }) : new MemoryEventLog({ retentionMs }),
      actorStates: derived
        ? new SqliteActorStates<DeviceActor>(derived, 'device')
        : new MemoryActorStates<DeviceActor>(),
      deliveries,
      redis: undefined,
      registry,
      close: async () => {
        await deliveries.close();
        await readStore.close();
        await derived?.close();
        await store.close();
        checkpoints.close();
      },
    };
  }
  const readStore = new RedisReadStore(config.redisUrl);
  // Commands issued in one turn of the event loop go out in one write: the processor's partitions
  // and the dispatcher's attempts issue many at once, and a write to a socket cost more than the
  // command (at 1,000 changes/s, the dispatcher's writes to Redis were a sixth of its CPU).
  const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 3, enableAutoPipelining: true });
  redis.on('error', () => {});
  const unusable = await databaseProblem(redis);
  if (unusable) {
    // Refused: what was opened is closed (ioredis would keep reconnecting, and the process alive).
    redis.disconnect();
    await readStore.close();
    await store.close();
    throw new Error(`Redis at HUB_REDIS_URL: ${unusable}`);
  }
  // The event log and the attempt records grow with traffic × retention: in PostgreSQL, whatever
  // the event store (docs/webhooks.md); Redis keeps the delivery schedule.
  const logs = new PostgresLogs({
    url: config.postgresUrl,
    retentionMs,
    connections: config.postgresLogConnections,
    logger,
  });
  const eventLog = new PostgresEventLog(logs);
  const records = new PostgresAttemptLog(logs);
  const deliveries = new RedisDeliveryStore(redis, {
    retentionMs,
    records,
    doneJobsMs: config.doneJobsKeptS * 1000,
  });
  const moving = new AbortController();
  let moved: Promise<void> | undefined;
  const close = async () => {
    moving.abort();
    await moved;
    await deliveries.close();
    await logs.close();
    redis.disconnect();
    await readStore.close();
    await store.close();
  };
  if (logger) {
    try {
      await logs.ready();
    } catch (err) {
      await close();
      throw new Error(
        `PostgreSQL at HUB_POSTGRES_URL (the event log and the delivery records): ${(err as Error).message}`,
      );
    }
    // Ends once the logs are moved (or were already), or at the close.
    moved = moveLogsFromRedis({ redis, events: eventLog, attempts: records, logger, signal: moving.signal });
  }
  return {
    store,
    readStore,
    logs,
    lastWrites: new RedisLastWrites(redis),
    limiter: new RedisLimiter(redis),
    checkpoints: new RedisCheckpoints(redis),
    eventLog,
    actorStates: new RedisActorStates<DeviceActor>(redis, 'device'),
    deliveries,
    redis,
    registry,
    close,
  };
}

/**
 * The configuration as a process with these roles uses it: API threads only where it serves the
 * API in the embedded profile. Elsewhere (other roles, CLI commands) the event store stays the
 * thread's alone, its aggregate caches authoritative.
 */
export function forRoles(config: Config, roles: Role[]): Config {
  return {
    ...config,
    apiThreads: roles.includes('api') && config.profile === 'embedded' ? config.apiThreads : 0,
  };
}

export async function startNode(
  configured: Config,
  roles: Role[],
  options: { logger?: Logger } = {},
): Promise<HubNode> {
  const config = forRoles(configured, roles);
  const logger = options.logger ?? createLogger(config.logLevel);
  const metrics = createMetrics();
  // Run last to first, at a stop or when the start fails part way: the data dir is given back
  // once its stores are closed.
  const closers: Array<() => Promise<void>> = [];
  if (config.profile === 'embedded') closers.push(lockDataDir(config.dataDir));
  let stopped: Promise<void> | undefined;
  try {
    await assertPortFree(config.host, config.port);
    const stores = await openStores(config, metrics.registry, logger);
    closers.push(() => stores.close());
    const { store, readStore } = stores;
    const readiness: Record<string, ReadinessCheck> = {
      eventstore: async () => {
        await store.head();
      },
    };
    if (readStore instanceof RedisReadStore) readiness.readstore = () => readStore.ping();
    const { logs } = stores;
    if (logs) readiness.logs = () => logs.ping();

    // The embedded read store lives in this process, so its projector must run here too.
    const runProjector = roles.includes('projector') || config.profile === 'embedded';
    // How the projector's followers (the read models' runners, the publicity carrier; the mailer its
    // linger only) follow the store: one batch size, so that those at one checkpoint share a read.
    const follow = { batchSize: config.projectionBatch, lingerMs: config.projectorLingerMs };
    const runners: ProjectionRunner[] = [];
    if (runProjector) {
      const projectionMetrics = new ProjectionMetrics(metrics.registry);
      for (const projection of projections) {
        const runner = new ProjectionRunner({
          store,
          readStore,
          projection,
          logger,
          metrics: projectionMetrics,
          ...follow,
        });
        runner.start();
        runners.push(runner);
      }
      closers.push(async () => {
        await Promise.all(runners.map((r) => r.stop()));
      });
      readiness.projections = async () => {
        const behind = runners.filter((r) => !r.hasCaughtUp);
        if (behind.length > 0)
          throw new StillBuilding(
            `catching up: ${behind
              .map((r) => {
                const { checkpoint, head } = r.status();
                return `${r.name} at ${checkpoint} of ${head}`;
              })
              .join(', ')}`,
          );
      };
    }

    const waitFor: WaitForPosition = (names, position) =>
      waitForPosition(readStore, names, position, config.readWaitMs);
    let warned = 0; // once per 10 s: at ingestion rates an outage would be a line per write
    const reads = consistency(stores.lastWrites, waitFor, (err) => {
      if (Date.now() - warned < 10_000) return;
      warned = Date.now();
      logger.warn({ error: (err as Error).message }, 'writes are not remembered for read-your-writes');
    });
    const keys = await loadKeys(
      {
        configured: config.jwtPrivateKey,
        dataDir: config.profile === 'embedded' ? config.dataDir : undefined,
        redis: stores.redis,
        holdsData: (await store.head()) > 0,
      },
      logger,
    );
    let url = '';
    const publicUrl = () => config.publicUrl || url || `http://${config.host}:${config.port}`;

    if (runProjector) {
      // Side-effect followers of the event store run wherever the projector runs: the mailer (the
      // store is its outbox) and the publicity carrier.
      const mail = createMailer(config.mailTransport, config.mailFrom, join(config.dataDir, 'mail'), logger);
      const mailer = mailProcessor({
        store,
        checkpoints: stores.checkpoints,
        mailer: mail,
        hmacKey: keys.hmacKey,
        publicUrl,
        logger,
        // Its own batch size: a batch whose sending fails is sent again from its start.
        follow: { lingerMs: follow.lingerMs },
      });
      // Carries devices' public and garbage flags to their steps (the pipeline half of the callback).
      const publicity = publicityProcessor({ store, checkpoints: stores.checkpoints, logger, follow });
      mailer.start();
      publicity.start();
      closers.push(async () => {
        await Promise.all([mailer.stop(), publicity.stop()]);
        mail.close();
      });
    }

    // The change pipeline: the relay puts the store's events on the changes topic, the stream
    // processor derives webhook events, logs them and hands off delivery jobs. The embedded
    // profile runs it in this process on the in-process bus, its state rebuilt at each start.
    let pipelineBus: Bus | undefined;
    // Opened once per process, and closed after everything that uses it has stopped (closers run
    // in reverse order).
    const busOfProcess = async (): Promise<Bus> => {
      if (!pipelineBus) {
        const bus = await openBus(config, logger);
        closers.push(() => bus.close());
        pipelineBus = bus;
        // The in-process bus answers while the process does: only Kafka is worth asking.
        if (bus.kind === 'kafka') readiness.kafka = () => bus.ping();
      }
      return pipelineBus;
    };
    let dispatcher: Dispatcher | undefined;
    if (roles.includes('processor') || config.profile === 'embedded') {
      const embedded = config.profile === 'embedded';
      const bus = await busOfProcess();
      const { registry } = stores;
      const processor = new StreamProcessor({
        bus,
        registry,
        states: stores.actorStates,
        log: stores.eventLog,
        // Distributed: an owner's subscriptions are read from Redis at most once a second, so a
        // change takes effect within a second of being projected (embedded: at once).
        subscriptions: projectedSubscriptions(readStore, embedded ? 0 : 1000, config.stateCacheEntries),
        logger,
        metrics: new ProcessorMetrics(metrics.registry),
        concurrency: config.processorConcurrency,
        maxActors: config.stateCacheEntries,
        partitionsConcurrently: embedded ? 1 : config.kafkaPartitions,
        handOff: embedded
          ? async (jobs) => {
              // Straight to this process's dispatcher (below) once it runs: it delivers what it has
              // room for before storing it.
              if (dispatcher) return dispatcher.handOff(jobs);
              await stores.deliveries.enqueue(jobs);
            }
          : async (jobs) => {
              // Deliveries promise no order: the producer may keep several requests in flight.
              await bus.send(
                TOPICS.deliveries,
                jobs.map((j) => encodeJob(registry, j)),
                { ordered: false },
              );
            },
        // Embedded: the in-process bus holds nothing across a restart. Jobs at or below the hand-off
        // checkpoint went out before; with the derived state on disk, the change stream resumes
        // where the actors' states were saved, else it is derived again from the store's start.
        handOffCheckpoint: embedded
          ? { checkpoints: stores.checkpoints, name: 'processor-handoff' }
          : undefined,
        resume: embedded && config.embeddedState === 'sqlite' ? { name: 'changes' } : undefined,
      });
      // The embedded relay starts where the processor resumes (its bus is in memory).
      const relayFrom = new MemoryCheckpoints();
      const relayName = `relay${config.kafkaPrefix ? `:${config.kafkaPrefix}` : ''}`;
      if (embedded) await relayFrom.set(relayName, await processor.resumePosition());
      const changeRelay = relay({
        store,
        bus,
        registry,
        checkpoints: embedded ? relayFrom : stores.checkpoints,
        logger,
        metrics: metrics.registry,
        lease: embedded ? undefined : readStore,
        name: relayName,
      });
      await processor.start();
      changeRelay.start();
      closers.push(async () => {
        await changeRelay.stop();
        await processor.stop();
      });
    }

    // The dispatcher: delivery jobs into the durable schedule, and the schedule run.
    if (roles.includes('dispatcher') || config.profile === 'embedded') {
      const bus = await busOfProcess();
      const running = new Dispatcher({
        bus,
        registry: stores.registry,
        deliveries: stores.deliveries,
        store,
        sealKey: keys.sealKey,
        egress: new Egress({
          allowHttp: config.webhookAllowHttp,
          allowNetworks: config.webhookAllowNetworks,
        }),
        logger,
        metrics: metrics.registry,
        version: VERSION,
        timeoutMs: config.webhookTimeoutMs,
        maxInFlight: config.dispatcherMaxInFlight,
        maxInFlightPerSubscription: config.webhookMaxInFlight,
        cacheEntries: config.stateCacheEntries,
        rotationWindowMs: config.webhookRotationWindowS * 1000,
        httpThreads: config.dispatcherHttpThreads,
      });
      await running.start();
      dispatcher = running;
      // The schedule answers a read: a file that cannot be read (corrupt, gone) left deliveries
      // stuck while the process said ready.
      readiness.schedule = async () => {
        await stores.deliveries.nextDue();
      };
      closers.push(() => running.stop());
    }

    // Every role serves HTTP on HUB_PORT: the API role its routes, every role the operations
    // endpoints (/metrics, /healthz, /readyz), so each process is scraped and probed alike.
    if (config.apiThreads > 0) {
      // The API threads serve all of it, the main thread keeping what they share (api/threads.ts).
      const threads = await startApiThreads({
        config,
        logger,
        metrics,
        owned: { ...stores, waitFor },
        readiness,
      });
      closers.push(() => threads.stop());
      url = threads.url;
    } else {
      let mount: Array<(routes: Routes) => void> = [];
      if (roles.includes('api')) {
        const hub: HubContext = {
          config,
          logger,
          store,
          readStore,
          consistency: reads,
          keys,
          limiter: stores.limiter,
          eventLog: stores.eventLog,
          deliveries: stores.deliveries,
          captcha: captchaCheck(config.captchaVerifyUrl, config.captchaSecret),
          deviceCa: await loadDeviceCa({
            certPem: config.deviceCaCert,
            keyPem: config.deviceCaKey,
            dataDir: config.profile === 'embedded' ? config.dataDir : undefined,
            redis: stores.redis,
          }),
          publicUrl,
        };
        mount = serviceRoutes(hub);
      }
      const { app } = createApp({ config, logger, metrics, readiness, mount });
      const server: Server = apiServer(app);
      server.listen(config.port, config.host);
      await once(server, 'listening');
      const { port } = server.address() as AddressInfo;
      url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
      closers.push(() => closeServer(server, config.shutdownTimeoutMs / 2));
    }
    logger.info(
      { url, profile: config.profile, roles },
      `Device Hub (${config.profile}) running ${roles.join(', ')}, listening on ${url}`,
    );

    return {
      config,
      logger,
      metrics,
      store,
      readStore,
      eventLog: stores.eventLog,
      deliveries: stores.deliveries,
      bus: pipelineBus,
      consistency: reads,
      runners,
      url,
      // Once: a second stop (a test's cleanup after its own restart failed) finds it done.
      stop() {
        // Every closer runs, whichever fails; the failures are thrown together at the end.
        stopped ??= (async () => {
          const failures: unknown[] = [];
          for (const close of closers.reverse()) await close().catch((err: unknown) => failures.push(err));
          if (failures.length > 0) throw new AggregateError(failures, 'the node did not stop cleanly');
        })();
        return stopped;
      },
    };
  } catch (err) {
    // A start that fails part way gives back what it took (the data dir, stores, threads, bus).
    for (const close of closers.reverse()) await close().catch(() => {});
    throw err;
  }
}

/** The bus of the profile, with the pipeline's topics. */
async function openBus(config: Config, logger: Logger): Promise<Bus> {
  const embedded = config.profile === 'embedded';
  const bus: Bus = embedded
    ? new MemoryBus({ logger })
    : new KafkaBus({
        brokers: config.kafkaBrokers,
        clientId: `hub-${process.pid}`,
        logger,
        prefix: config.kafkaPrefix,
        fetchWaitMs: config.kafkaFetchWaitMs,
      });
  await bus.ensureTopics([
    // One partition in memory: the processor's hand-off checkpoint is then one position.
    { topic: TOPICS.changes, partitions: embedded ? 1 : config.kafkaPartitions },
    { topic: TOPICS.deliveries, partitions: config.kafkaPartitions },
  ]);
  return bus;
}
