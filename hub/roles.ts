// One start function per role. Each starts its part on the stores the process opened, adds the
// readiness checks it answers for, and registers how it stops; startNode (node.ts) runs the ones a
// process was asked for, and the embedded hub all of them.
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import {
  type AppDeps,
  closeServer,
  createApp,
  type ReadinessCheck,
  StillBuilding,
  VERSION,
} from '../api/app.ts';
import { captchaCheck } from '../api/auth/captcha.ts';
import type { Keys } from '../api/auth/keys.ts';
import type { Consistency, WaitForPosition } from '../api/consistency.ts';
import type { HubContext } from '../api/context.ts';
import { deviceCaPems, loadDeviceCa } from '../api/devices/ca.ts';
import { apiServer } from '../api/http.ts';
import { serviceRoutes, startApiThreads } from '../api/threads.ts';
import { type Bus, TOPICS } from '../infra/bus/port.ts';
import { MemoryCheckpoints } from '../infra/checkpoints.ts';
import type { Config } from '../infra/config.ts';
import { createMailer } from '../infra/mail.ts';
import { MemoryRateSlots, RedisRateSlots } from '../infra/rate-limits.ts';
import { newOwnerId } from '../infra/readstore/redis.ts';
import type { Logger, Metrics } from '../infra/telemetry.ts';
import { encodeJob } from '../processors/delivery/codec.ts';
import { Dispatcher } from '../processors/delivery/dispatcher.ts';
import { Egress } from '../processors/delivery/egress.ts';
import { recoveryProcessor } from '../processors/delivery/recovery.ts';
import { mailProcessor } from '../processors/followers/mailer.ts';
import { publicityProcessor } from '../processors/followers/publicity.ts';
import { relay } from '../processors/followers/relay.ts';
import { ProcessorMetrics, projectedSubscriptions, StreamProcessor } from '../processors/stream/processor.ts';
import { projections } from '../projections/index.ts';
import { ProjectionReplays } from '../projections/replay.ts';
import { ProjectionMetrics, ProjectionRunner } from '../projections/runner.ts';
import type { Stores } from './stores.ts';

/** What the roles of one process share. */
export interface Assembly {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  stores: Stores;
  /** The checks /readyz runs; each role adds its own. */
  readiness: Record<string, ReadinessCheck>;
  /** Registers a closer: the process runs them last to first at its stop, or when its start fails. */
  onStop(close: () => Promise<void>): void;
  /** The API's base URL as links in emails give it, once known. */
  publicUrl(): string;
}

/**
 * The projector: the read models' runners, and the side-effect followers of the event store, the
 * mailer (the store is its outbox) and the publicity carrier.
 */
export function startProjector(hub: Assembly, keys: Keys): ProjectionRunner[] {
  const { config, logger, metrics, stores, readiness } = hub;
  const { store, readStore } = stores;
  // How the projector's followers (the read models' runners, the publicity carrier; the mailer its
  // linger only) follow the store: one batch size, so that those at one checkpoint share a read.
  const follow = { batchSize: config.projectionBatch, lingerMs: config.projectorLingerMs };
  const runners: ProjectionRunner[] = [];
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
  hub.onStop(async () => {
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

  const mail = createMailer(config.mailTransport, config.mailFrom, join(config.dataDir, 'mail'), logger);
  const mailer = mailProcessor({
    store,
    checkpoints: stores.checkpoints,
    mailer: mail,
    hmacKey: keys.hmacKey,
    publicUrl: hub.publicUrl,
    logger,
    // Its own batch size: a batch whose sending fails is sent again from its start.
    follow: { lingerMs: follow.lingerMs },
  });
  // Carries devices' public and garbage flags to their steps (the pipeline half of the callback).
  const publicity = publicityProcessor({ store, checkpoints: stores.checkpoints, logger, follow });
  // Queues the deliveries of each bulk recovery asked for (POST /webhooks/{id}/recover).
  const recovery = recoveryProcessor({
    store,
    checkpoints: stores.checkpoints,
    deliveries: stores.deliveries,
    eventLog: stores.eventLog,
    logger,
    metrics: metrics.registry,
    follow,
  });
  mailer.start();
  publicity.start();
  recovery.start();
  hub.onStop(async () => {
    await Promise.all([mailer.stop(), publicity.stop(), recovery.stop()]);
    mail.close();
  });
  return runners;
}

/**
 * The processor: the relay puts the store's events on the changes topic (distributed: or hands them
 * to the processor here while it holds every partition, HUB_RELAY_HANDOFF), the stream processor
 * derives webhook events, logs them and hands off delivery jobs. The embedded profile runs it on
 * the in-process bus and hands its jobs straight to this process's dispatcher once that runs; the
 * distributed one too while that is the only dispatcher (HUB_PROCESSOR_HANDOFF), the deliveries
 * topic otherwise.
 */
export async function startProcessor(
  hub: Assembly,
  bus: Bus,
  dispatcher: () => Dispatcher | undefined,
): Promise<void> {
  const { config, logger, metrics, stores } = hub;
  const { store, readStore, registry } = stores;
  const embedded = config.profile === 'embedded';
  // Distributed: the relay hands its changes to the processor here while that is the only one.
  const relayHandOff = !embedded && config.relayHandOff === 'auto';
  const processor = new StreamProcessor({
    bus,
    registry,
    states: stores.actorStates,
    log: stores.eventLog,
    // Distributed: an owner's subscriptions are read from Redis at most once a second, so a
    // change takes effect within a second of being projected; embedded: at once (read again
    // once the projector here writes the model).
    subscriptions: projectedSubscriptions(
      readStore,
      embedded ? 'until-written' : 1000,
      config.stateCacheEntries,
    ),
    logger,
    metrics: new ProcessorMetrics(metrics.registry),
    concurrency: config.processorConcurrency,
    maxActors: config.stateCacheEntries,
    partitionsConcurrently: embedded ? 1 : config.kafkaPartitions,
    handOff: embedded
      ? async (jobs) => {
          // Straight to this process's dispatcher once it runs: it delivers what it has room for
          // before storing it.
          const running = dispatcher();
          if (running) return running.handOff(jobs);
          await stores.deliveries.enqueue(jobs);
        }
      : async (jobs) => {
          // The only dispatcher, running here: each job would come to it through the topic, so it
          // takes them as the embedded one does (delivered first, stored only if it must).
          const here = config.processorHandOff === 'auto' ? dispatcher() : undefined;
          if (here?.takesEveryJob) return here.handOff(jobs);
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
    handOffCheckpoint: embedded ? { checkpoints: stores.checkpoints, name: 'processor-handoff' } : undefined,
    resume: embedded && config.embeddedState === 'sqlite' ? { name: 'changes' } : undefined,
    takesChanges: relayHandOff,
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
    handOff: relayHandOff ? processor : undefined,
  });
  await processor.start();
  changeRelay.start();
  hub.onStop(async () => {
    await changeRelay.stop();
    await processor.stop();
  });
}

/** The dispatcher: delivery jobs into the durable schedule, and the schedule run. */
export async function startDispatcher(hub: Assembly, bus: Bus, keys: Keys): Promise<Dispatcher> {
  const { config, logger, metrics, stores } = hub;
  const running = new Dispatcher({
    bus,
    registry: stores.registry,
    deliveries: stores.deliveries,
    store: stores.store,
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
    // Distributed: one budget per subscription, shared by every dispatcher.
    rateSlots: stores.redis ? new RedisRateSlots(stores.redis) : new MemoryRateSlots(),
    disableAfterMs: config.webhookDisableAfterS * 1000,
  });
  await running.start();
  // The schedule answers a read: a file that cannot be read (corrupt, gone) left deliveries
  // stuck while the process said ready.
  hub.readiness.schedule = async () => {
    await stores.deliveries.nextDue();
  };
  hub.onStop(() => running.stop());
  return running;
}

/**
 * HTTP on HUB_PORT, which every role serves: the api role its routes (`routes`), every role the
 * operations endpoints (/metrics, /healthz, /readyz), so each process is scraped and probed alike.
 * Answers the base URL it listens on.
 */
export async function startApi(
  hub: Assembly,
  options: { routes: boolean; keys: Keys; reads: Consistency; waitFor: WaitForPosition },
): Promise<string> {
  const { config, logger, metrics, stores, readiness } = hub;
  // Replays asked for through the API run here, in the background, whatever the profile: the
  // read store's replay lease fences a second one in any process (docs/projections.md).
  const replays = new ProjectionReplays({
    store: stores.store,
    readStore: stores.readStore,
    logger,
    projections,
    owner: newOwnerId,
    dropGraceMs: config.replayDropGraceMs,
  });
  hub.onStop(() => replays.stop()); // before the stores close: an interrupted replay resumes later
  // The device CA as this profile keeps it (made at the first start), for this thread or the API's.
  const deviceCa = options.routes
    ? await deviceCaPems({
        certPem: config.deviceCaCert,
        keyPem: config.deviceCaKey,
        dataDir: config.profile === 'embedded' ? config.dataDir : undefined,
        redis: stores.redis,
      })
    : undefined;
  if (config.apiThreads > 0 && deviceCa) {
    // The API threads serve all of it, the main thread keeping what they share (api/threads.ts).
    const threads = await startApiThreads({
      config,
      logger,
      metrics,
      owned: { ...stores, waitFor: options.waitFor, projections: replays },
      readiness,
      // The keys as this process resolved them (a file, Redis or the configuration): a thread reads none.
      secrets: {
        jwtPrivateKey: options.keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
        deviceCaCert: deviceCa.cert,
        deviceCaKey: deviceCa.key,
      },
    });
    hub.onStop(() => threads.stop());
    return threads.url;
  }
  let services: Pick<AppDeps, 'mount' | 'authenticate'> = {};
  if (options.routes) {
    const context: HubContext = {
      config,
      logger,
      store: stores.store,
      readStore: stores.readStore,
      consistency: options.reads,
      keys: options.keys,
      fixedWindows: stores.fixedWindows,
      eventLog: stores.eventLog,
      deliveries: stores.deliveries,
      projections: replays,
      captcha: captchaCheck(config.captchaVerifyUrl, config.captchaSecret),
      deviceCa: await loadDeviceCa({ certPem: deviceCa!.cert, keyPem: deviceCa!.key }),
      publicUrl: hub.publicUrl,
    };
    services = serviceRoutes(context);
  }
  const { app } = createApp({ config, logger, metrics, readiness, ...services });
  const server: Server = apiServer(app);
  server.listen(config.port, config.host);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  hub.onStop(() => closeServer(server, config.shutdownTimeoutMs / 2));
  return `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
}
