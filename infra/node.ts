// Assembles one process of Device Hub from the configuration: the dependencies of the
// profile, then the roles asked for. `hub start` asks for all of them, `hub api` for one.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from '../api/app.ts';
import { SchemaRegistry } from '../schemas/registry.ts';
import type { Config } from './config.ts';
import { openEventStore } from './eventstore/open.ts';
import type { EventStore } from './eventstore/port.ts';
import { SchemaCheckedStore } from './eventstore/schema-checked.ts';
import { createLogger, createMetrics, type Logger, type Metrics } from './telemetry.ts';

export type Role = 'api' | 'all';

export interface HubNode {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  store: EventStore;
  /** Base URL of the API when the api role runs. */
  url: string;
  stop(): Promise<void>;
}

export async function startNode(
  config: Config,
  roles: Role[],
  options: { logger?: Logger } = {},
): Promise<HubNode> {
  const logger = options.logger ?? createLogger(config.logLevel);
  const metrics = createMetrics();
  const closers: Array<() => Promise<void>> = [];
  const store = new SchemaCheckedStore(await openEventStore(config), SchemaRegistry.load());
  closers.push(() => store.close());
  const readiness = {
    eventstore: async () => {
      await store.head();
    },
  };

  let url = '';
  if (roles.includes('api') || roles.includes('all')) {
    const { app } = createApp({ config, logger, metrics, readiness });
    const server: Server = createServer(app.callback());
    server.keepAliveTimeout = 65_000;
    server.listen(config.port, config.host);
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    url = `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${port}`;
    logger.info({ url, profile: config.profile }, `Device Hub (${config.profile}) listening on ${url}`);
    closers.push(() => closeServer(server, config.shutdownTimeoutMs));
  }

  return {
    config,
    logger,
    metrics,
    store,
    url,
    async stop() {
      for (const close of closers.reverse()) await close();
    },
  };
}

/** Stops accepting, lets in-flight requests finish within the bound, then cuts what is left. */
async function closeServer(server: Server, timeoutMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), timeoutMs);
  await closed;
  clearTimeout(timer);
}
