// Small Koa middleware that every route passes through, outermost first:
// request id + error rendering + access log + duration metric, then the rate limit.
import { randomBytes } from 'node:crypto';
import type { Context, Middleware, Next } from 'koa';
import getRawBody from 'raw-body';
import type { Logger, Metrics } from '../infra/telemetry.ts';
import { badRequest, HttpError, renderError, tooManyRequests } from './errors.ts';

declare module 'koa' {
  interface DefaultState {
    requestId: string;
    /** Who is calling, for rate limits and logs: an account PRN once authenticated. */
    caller?: string;
  }
}

const REQUEST_ID = /^[\w.:-]{1,128}$/;
/** Request ids: a random prefix per process and a counter, unique without entropy per request. */
const ID_PREFIX = `req_${randomBytes(6).toString('base64url')}`;
let requestCount = 0;

/** Request id, error rendering, one access-log line and the duration histogram. */
export function requestContext(logger: Logger, metrics: Metrics): Middleware {
  return async (ctx: Context, next: Next) => {
    const started = process.hrtime.bigint();
    const incoming = ctx.get('X-Request-Id');
    const requestId = REQUEST_ID.test(incoming) ? incoming : `${ID_PREFIX}${(++requestCount).toString(36)}`;
    ctx.state.requestId = requestId;
    ctx.set('X-Request-Id', requestId);
    try {
      await next();
      // The router answers unknown routes and methods with a bare status (and an Allow header).
      if (ctx.body === undefined && ctx.status === 404) {
        throw new HttpError(404, 'not_found', `No route for ${ctx.method} ${ctx.path}.`);
      }
      if (ctx.body === undefined && (ctx.status === 405 || ctx.status === 501)) {
        const allow = ctx.response.get('Allow');
        throw new HttpError(
          ctx.status,
          ctx.status === 405 ? 'method_not_allowed' : 'not_implemented',
          `${ctx.method} is not allowed here${allow ? `; allowed: ${allow}` : ''}.`,
        );
      }
    } catch (err) {
      const { status, body, headers } = renderError(err, requestId);
      if (status >= 500)
        logger.error({ err, request_id: requestId, method: ctx.method, path: ctx.path }, 'request failed');
      ctx.status = status;
      ctx.set(headers);
      ctx.body = body;
    } finally {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = (ctx as Context & { _matchedRoute?: string })._matchedRoute ?? 'unmatched';
      metrics.httpDuration.observe(
        { method: ctx.method, route: String(route), status: String(ctx.status) },
        seconds,
      );
      if (logger.isLevelEnabled('info')) {
        logger.info(
          {
            request_id: requestId,
            method: ctx.method,
            route,
            status: ctx.status,
            ms: Math.round(seconds * 1e4) / 10,
          },
          'request',
        );
      }
    }
  };
}

declare module 'koa' {
  interface DefaultState {
    /** The process's rate limiter, for the middleware that learns who the caller is. */
    rateLimiter?: RateLimit;
  }
}

/** Takes a token of a caller's budget: 0 when allowed, else the seconds until one is back. */
export interface RateLimit {
  take(key: string): number | Promise<number>;
}

/** Token buckets per caller key, capped in number (the oldest bucket goes first). In-process: each
 * API process limits on its own, which bounds the whole by processes × rate (an embedded hub's API
 * threads share their process's, on the main thread). */
export class RateLimiter implements RateLimit {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly perSecond: number;
  private readonly burst: number;
  private readonly maxCallers: number;
  constructor(perSecond: number, burst: number, maxCallers = 100_000) {
    this.perSecond = perSecond;
    this.burst = burst;
    this.maxCallers = maxCallers;
  }

  /** Takes a token: 0 when allowed, else the seconds until one is back. */
  take(key: string): number {
    if (this.perSecond <= 0) return 0;
    const now = performance.now();
    let bucket = this.buckets.get(key);
    if (!bucket) {
      if (this.buckets.size >= this.maxCallers)
        this.buckets.delete(this.buckets.keys().next().value as string);
      bucket = { tokens: this.burst, at: now };
      this.buckets.set(key, bucket);
    }
    bucket.tokens = Math.min(this.burst, bucket.tokens + ((now - bucket.at) / 1000) * this.perSecond);
    bucket.at = now;
    if (bucket.tokens < 1) return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perSecond));
    bucket.tokens -= 1;
    return 0;
  }
}

/** Charges `key` (429 with Retry-After when its bucket is empty). */
export async function chargeRateLimit(ctx: Context, key: string): Promise<void> {
  const limiter = ctx.state.rateLimiter;
  if (!limiter) return;
  const wait = await limiter.take(key);
  if (wait > 0) throw tooManyRequests(wait);
}

/**
 * Per-caller rate limit. A request with a bearer token is charged to its account once the token is
 * verified (see authenticate), so that devices behind one address do not share a budget and a
 * forged token cannot spend another account's; a request without one, or whose token fails, is
 * charged to its client address (so is one with other credentials, such as Basic).
 */
export function rateLimit(limiter: RateLimit): Middleware {
  return async (ctx, next) => {
    ctx.state.rateLimiter = limiter;
    // Basic (the operator callbacks) and anything else but a bearer token: the address pays.
    if (!/^Bearer\s/i.test(ctx.get('Authorization'))) await chargeRateLimit(ctx, `address:${ctx.ip}`);
    return next();
  };
}

const JSON_TYPE = /^application\/json[ \t]*(?:;|$)/i; // type-is trims spaces and tabs alone

/** Reads a JSON body: 415 for another content type, 413 above the limit, 400 when it does not parse. */
export async function readJsonBody(ctx: Context, limitBytes: number): Promise<unknown> {
  const length = ctx.request.length;
  const chunked = ctx.get('Transfer-Encoding') !== '';
  if (!length && !chunked) return undefined;
  // The usual type tested first: type-is parses the header for every call (1.5 % of an API thread
  // under the ingestion load); it still decides the rest (`+json` types).
  if (!JSON_TYPE.test(ctx.get('Content-Type')) && !ctx.is('application/json', '+json')) {
    throw new HttpError(415, 'unsupported_media_type', 'Send the body as application/json.');
  }
  let raw: string;
  try {
    raw = await getRawBody(ctx.req, { limit: limitBytes, length, encoding: 'utf8' });
  } catch (err) {
    const e = err as { type?: string };
    if (e.type === 'entity.too.large') {
      throw new HttpError(413, 'payload_too_large', `The body is larger than ${limitBytes} bytes.`);
    }
    throw badRequest('The body could not be read.');
  }
  try {
    return JSON.parse(raw);
  } catch (err) {
    throw new HttpError(400, 'invalid_json', `The body is not valid JSON: ${(err as Error).message}`);
  }
}
