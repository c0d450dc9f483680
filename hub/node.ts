// Assembles one process of Device Hub from the configuration: the adapters of the profile
// (stores.ts), then the roles asked for (roles.ts). `hub start` runs every role, the embedded hub;
// `hub api`, `hub projector`, `hub processor` and `hub dispatcher` one each.
import { once } from 'node:events';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import type { ReadinessCheck } from '../api/app.ts';
import { loadKeys } from '../api/auth/keys.ts';
import { type Consistency, consistency, type WaitForPosition, warnUnremembered } from '../api/consistency.ts';
import type { Bus } from '../infra/bus/port.ts';
import { autoApiThreads, type Config, ConfigError } from '../infra/config.ts';
import type { EventStore } from '../infra/eventstore/port.ts';
import type { ReadStore } from '../infra/readstore/port.ts';
import { RedisReadStore } from '../infra/readstore/redis.ts';
import { createLogger, createMetrics, type Logger, type Metrics } from '../infra/telemetry.ts';
import type { Dispatcher } from '../processors/delivery/dispatcher.ts';
import type { DeliveryStore } from '../processors/delivery/port.ts';
import type { EventLog } from '../processors/stream/eventlog.ts';
import { waitForPosition } from '../projections/consistency.ts';
import type { ProjectionRunner } from '../projections/runner.ts';
import { type Assembly, startApi, startDispatcher, startProcessor, startProjector } from './roles.ts';
import { openBus, openStores } from './stores.ts';

export type Role = 'api' | 'projector' | 'processor' | 'dispatcher';
export const ROLES: Role[] = ['api', 'projector', 'processor', 'dispatcher'];

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

/**
 * The configuration as a process with these roles uses it: API threads only where it serves the
 * API. Elsewhere (other roles, CLI commands) the event store stays the thread's alone, its
 * aggregate caches authoritative where the profile allows it (embedded).
 */
export function forRoles(config: Config, roles: Role[]): Config {
  return {
    ...config,
    apiThreads: !roles.includes('api')
      ? 0
      : config.apiThreadsAuto
        ? autoApiThreads(config.profile, roles)
        : config.apiThreads,
  };
}

/**
 * Starts one process: its data dir taken (embedded), the stores of its profile opened, then each
 * role asked for (roles.ts). The embedded profile runs the projector, the processor and the
 * dispatcher whatever the roles: its read models and queues live in the process.
 */
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
    let url = '';
    const hub: Assembly = {
      config,
      logger,
      metrics,
      stores,
      readiness,
      onStop: (close) => closers.push(close),
      publicUrl: () => config.publicUrl || url || `http://${config.host}:${config.port}`,
    };

    const waitFor: WaitForPosition = (names, position) => {
      // The store may hold the news of the API threads' commits for a batch (HUB_DERIVE_LINGER_MS).
      store.hasten?.(position);
      return waitForPosition(readStore, names, position, config.readWaitMs);
    };
    const reads = consistency(stores.lastWrites, waitFor, warnUnremembered(logger));
    const keys = await loadKeys(
      {
        configured: config.jwtPrivateKey,
        dataDir: config.profile === 'embedded' ? config.dataDir : undefined,
        redis: stores.redis,
        holdsData: (await store.head()) > 0,
      },
      logger,
    );

    // The embedded read store lives in this process, so its projector must run here too; so do
    // the change pipeline and the dispatcher, on the in-process bus.
    const embedded = config.profile === 'embedded';
    const runners = roles.includes('projector') || embedded ? startProjector(hub, keys) : [];

    // The bus is opened once per process, and closed after everything that uses it has stopped
    // (closers run in reverse order).
    let pipelineBus: Bus | undefined;
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
    if (roles.includes('processor') || embedded)
      await startProcessor(hub, await busOfProcess(), () => dispatcher);
    if (roles.includes('dispatcher') || embedded)
      dispatcher = await startDispatcher(hub, await busOfProcess(), keys);

    url = await startApi(hub, { routes: roles.includes('api'), keys, reads, waitFor });
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
