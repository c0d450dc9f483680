// The Koa application: middleware in order, system endpoints, then every service's routes.
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import Koa, { type Context, type Middleware } from 'koa';
import type { Config } from '../infra/config.ts';
import { withTimeout } from '../infra/deadline.ts';
import { MemoryTokenBuckets, type TokenBuckets } from '../infra/rate-limits.ts';
import { sameSecret } from '../infra/secrets.ts';
import type { Logger, Metrics } from '../infra/telemetry.ts';
import { HttpError } from './errors.ts';
import { requestContext, tokenBucketLimit } from './http.ts';
import { Routes } from './routes.ts';

export const VERSION: string = JSON.parse(
  readFileSync(new URL('../package.json', import.meta.url), 'utf8'),
).version;

/** A dependency /readyz asks; it throws (or rejects) when the dependency does not answer. */
export type ReadinessCheck = () => Promise<void>;

/** What a readiness check throws while the process is still building what it serves: its message
 * (how far the build is, no address or secret) is shown to the caller, not only logged. */
export class StillBuilding extends Error {
  override name = 'StillBuilding';
}

export interface AppDeps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  readiness?: Record<string, ReadinessCheck>;
  /** Each service adds its routes here. */
  mount?: Array<(routes: Routes) => void>;
  /** The bearer token check (`authenticate` of api/auth/middleware.ts) the routes declaring
   * `security: 'bearer'` get from the registry; needed when `mount` adds any. */
  authenticate?: Middleware;
  /** The per-caller rate limit (default: this thread's own buckets). */
  tokenBuckets?: TokenBuckets;
  /** What /metrics answers, when not this thread's registry alone (API threads: the process's). */
  scrape?: () => Promise<string>;
}

export function createApp(deps: AppDeps): { app: Koa; routes: Routes } {
  const { config, logger, metrics } = deps;
  const app = new Koa({ proxy: false });
  app.silent = true; // errors are rendered and logged by requestContext…
  app.on('error', (err) => logger.error({ err }, 'response failed')); // …except those Koa meets while responding
  const routes = new Routes(config.bodyLimitBytes, deps.authenticate);

  routes.add({
    method: 'get',
    path: '/healthz',
    tag: 'system',
    summary: 'Liveness: the process answers.',
    security: 'none',
    responses: { 200: { description: 'Alive.', schema: { type: 'object' } } },
    handler: (ctx) => {
      ctx.body = { status: 'ok' };
    },
  });
  routes.add({
    method: 'get',
    path: '/readyz',
    tag: 'system',
    summary: 'Readiness: every dependency answers (503 otherwise, naming the ones that do not).',
    security: 'none',
    responses: { 200: { description: 'Ready.', schema: { type: 'object' } } },
    handler: async (ctx) => {
      const checks = Object.entries(deps.readiness ?? {});
      const results = await Promise.all(
        checks.map(async ([name, check]) => {
          try {
            await withTimeout(check(), 2000);
            return { name, problem: '' };
          } catch (err) {
            // The detail (addresses, ports) goes to the log, not to an unauthenticated caller.
            logger.warn({ dependency: name, err: (err as Error).message }, 'readiness check failed');
            return { name, problem: err instanceof StillBuilding ? err.message : 'does not answer' };
          }
        }),
      );
      const failing = results.filter((r) => r.problem);
      if (failing.length > 0) {
        throw new HttpError(503, 'not_ready', `Not ready: ${failing.map((f) => f.name).join(', ')}.`, {
          details: failing.map((f) => ({ field: f.name, problem: f.problem })),
        });
      }
      ctx.body = { status: 'ready', checks: Object.fromEntries(results.map((r) => [r.name, 'ok'])) };
    },
  });
  const scrape = deps.scrape ?? (() => metrics.registry.metrics());
  const scraper = metricsScraper(config.metricsToken);
  routes.add({
    method: 'get',
    path: '/metrics',
    tag: 'system',
    summary: 'Prometheus metrics of this process: for the scraper only.',
    description:
      'With HUB_METRICS_TOKEN set, only `Authorization: Bearer <HUB_METRICS_TOKEN>`; without it, only a direct connection from a loopback address (no Forwarded or X-Forwarded-For header). Anyone else: 401.',
    security: 'none',
    responses: {
      200: { description: 'Prometheus text exposition.' },
      401: { description: 'Not the scraper.', schema: { $ref: '#/components/schemas/Error' } },
    },
    handler: async (ctx) => {
      scraper(ctx);
      ctx.type = metrics.registry.contentType;
      ctx.body = await scrape();
    },
  });
  routes.add({
    method: 'get',
    path: '/openapi.json',
    tag: 'system',
    summary: 'This OpenAPI 3.1 document.',
    security: 'none',
    responses: { 200: { description: 'The document.', schema: { type: 'object' } } },
    handler: (ctx) => {
      ctx.body = routes.openapi(VERSION);
    },
  });
  for (const mount of deps.mount ?? []) mount(routes);

  app.use(requestContext(logger, metrics));
  app.use(
    tokenBucketLimit(
      deps.tokenBuckets ??
        new MemoryTokenBuckets(config.rateLimitPerSecond, config.rateLimitBurst, config.callerCacheEntries),
    ),
  );
  app.use(routes.middleware());
  return { app, routes };
}

/** Stops accepting, lets in-flight requests finish within the bound, then cuts what is left.
 * Responses that would never finish (event streams) end at `closing` (apiServer passes it on to
 * the app). */
export async function closeServer(server: Server, timeoutMs: number): Promise<void> {
  server.emit('closing');
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  // Keep-alive connections busy now become idle when their request ends: close them as they do.
  const idle = setInterval(() => server.closeIdleConnections(), 50);
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), timeoutMs);
  await closed;
  clearInterval(idle);
  clearTimeout(timer);
}

/**
 * Who may read /metrics (Node's version, memory, per-route counts: operations data, not the
 * public's): the bearer of `token` when one is set, else a caller on this machine talking to the
 * hub directly. The socket's address is asked, not ctx.ip, and a forwarded request is refused: a
 * reverse proxy on this machine connects from loopback for everyone behind it.
 */
function metricsScraper(token: string): (ctx: Context) => void {
  return (ctx) => {
    const allowed = token
      ? sameSecret(ctx.get('Authorization'), `Bearer ${token}`)
      : isLoopback(ctx.req.socket.remoteAddress ?? '') &&
        !ctx.get('Forwarded') &&
        !ctx.get('X-Forwarded-For');
    if (!allowed)
      throw new HttpError(
        401,
        'unauthorized',
        token
          ? 'Metrics need the scraper’s bearer token (HUB_METRICS_TOKEN).'
          : 'Metrics are served to this machine only; set HUB_METRICS_TOKEN to scrape from elsewhere.',
        token ? { headers: { 'WWW-Authenticate': 'Bearer realm="metrics"' } } : {},
      );
  };
}

const isLoopback = (address: string) =>
  address === '::1' || address.startsWith('127.') || address.startsWith('::ffff:127.');
