// Which adapters each profile uses: the stores every role of a process shares, and the bus of the
// change pipeline. The embedded profile keeps them in this process and its data dir; the distributed
// one in PostgreSQL or EventStoreDB, Redis and Kafka.
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import type { Registry as PromRegistry } from 'prom-client';
import { type LastWrites, MemoryLastWrites, RedisLastWrites } from '../api/consistency.ts';
import { KafkaBus } from '../infra/bus/kafka.ts';
import { MemoryBus } from '../infra/bus/memory.ts';
import { type Bus, TOPICS } from '../infra/bus/port.ts';
import { type CheckpointStore, FileCheckpoints, RedisCheckpoints } from '../infra/checkpoints.ts';
import type { Config } from '../infra/config.ts';
import { boundStateCaches } from '../infra/eventstore/aggregate.ts';
import { openEventStore } from '../infra/eventstore/open.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import { SchemaCheckedStore } from '../infra/eventstore/schema-checked.ts';
import { type FixedWindows, MemoryFixedWindows, RedisFixedWindows } from '../infra/rate-limits.ts';
import { MemoryReadStore } from '../infra/readstore/memory.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import { RedisReadStore } from '../infra/readstore/redis.ts';
import { SqliteReadStore } from '../infra/readstore/sqlite.ts';
import { commandConnection, databaseProblem } from '../infra/redis.ts';
import { type DerivedDatabase, openDerivedDatabase } from '../infra/sqlite.ts';
import type { Logger } from '../infra/telemetry.ts';
import type { DeliveryStore } from '../processors/delivery/port.ts';
import { PostgresAttemptLog } from '../processors/delivery/postgres.ts';
import { RedisDeliveryStore } from '../processors/delivery/redis.ts';
import { ThreadedDeliveryStore } from '../processors/delivery/threaded.ts';
import {
  type ActorStates,
  MemoryActorStates,
  RedisActorStates,
  SqliteActorStates,
} from '../processors/stream/actors.ts';
import type { DeviceActor } from '../processors/stream/derive.ts';
import { type EventLog, MemoryEventLog } from '../processors/stream/eventlog.ts';
import { PostgresEventLog } from '../processors/stream/eventlog-postgres.ts';
import { SqliteEventLog } from '../processors/stream/eventlog-sqlite.ts';
import { PostgresLogs } from '../processors/stream/postgres-logs.ts';
import { moveLogsFromRedis } from '../processors/stream/postgres-logs-move.ts';
import { SchemaRegistry } from '../schemas/registry.ts';

export interface Stores {
  store: EventStore;
  readStore: ReadStore;
  lastWrites: LastWrites;
  fixedWindows: FixedWindows;
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
          ? openDerivedDatabase(join(config.dataDir, 'derived.sqlite'), (m) => logger?.info(m))
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
      fixedWindows: new MemoryFixedWindows(config.callerCacheEntries),
      checkpoints,
      eventLog: derived
        ? new SqliteEventLog(derived, { retentionMs, cachedNames: config.stateCacheEntries })
        : new MemoryEventLog({ retentionMs }),
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
  const redis = commandConnection(config.redisUrl);
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
    lingerMs: config.postgresLogLingerMs,
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
    fixedWindows: new RedisFixedWindows(redis),
    checkpoints: new RedisCheckpoints(redis),
    eventLog,
    actorStates: new RedisActorStates<DeviceActor>(redis, 'device'),
    deliveries,
    redis,
    registry,
    close,
  };
}

/** The bus of the profile, with the pipeline's topics. */
export async function openBus(config: Config, logger: Logger): Promise<Bus> {
  const embedded = config.profile === 'embedded';
  const bus: Bus = embedded
    ? new MemoryBus({ logger })
    : new KafkaBus({
        brokers: config.kafkaBrokers,
        clientId: `hub-${process.pid}`,
        logger,
        prefix: config.kafkaPrefix,
        fetchWaitMs: config.kafkaFetchWaitMs,
        fetchMinBytes: config.kafkaFetchMinBytes,
        sessionTimeoutMs: config.kafkaSessionTimeoutMs,
      });
  await bus.ensureTopics([
    // One partition in memory: the processor's hand-off checkpoint is then one position.
    { topic: TOPICS.changes, partitions: embedded ? 1 : config.kafkaPartitions },
    { topic: TOPICS.deliveries, partitions: config.kafkaPartitions },
  ]);
  return bus;
}
