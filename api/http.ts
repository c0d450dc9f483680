// The API's HTTP edge: the server (with its answer to requests Node's parser refuses), the small
// Koa middleware every route passes through, outermost first (request id + error rendering +
// access log + duration metric, then the rate limit by token buckets), the charge of a fixed
// window, and the reading of what a request brings: its JSON body, and the RFC 3339 timestamps of
// queries.

import { isUtf8 } from 'node:buffer';
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server, STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type Koa from 'koa';
import type { Context, Middleware, Next } from 'koa';
import getRawBody from 'raw-body';
import type { FixedWindows, TokenBuckets } from '../infra/rate-limits.ts';
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
const newRequestId = () => `${ID_PREFIX}${(++requestCount).toString(36)}`;

/** The HTTP server of the API (the main thread's or an API thread's). A request Node's parser
 * refuses (a malformed header line, headers over the limit) never reaches Koa: it is answered
 * here, in the one error shape too, and the connection closed. */
export function apiServer(app: Koa): Server {
  const server = createServer(app.callback());
  server.keepAliveTimeout = 65_000;
  // closeServer's signal to the routes whose responses last (api/webhooks/stream.ts).
  server.once('closing', () => app.emit('closing'));
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    // A response already under way on this connection (keep-alive) must not get our bytes in it.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    const failure =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? new HttpError(431, 'headers_too_large', 'The request headers are too large.')
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? new HttpError(408, 'request_timeout', 'The request did not arrive in time.')
          : badRequest('The request is not valid HTTP.');
    const requestId = newRequestId();
    const { status, body } = renderError(failure, requestId);
    const json = JSON.stringify(body);
    socket.end(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
        `Content-Length: ${Buffer.byteLength(json)}\r\nX-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${json}`,
    );
  });
  return server;
}

/** Request id, error rendering, one access-log line and the duration histogram. */
export function requestContext(logger: Logger, metrics: Metrics): Middleware {
  return async (ctx: Context, next: Next) => {
    const started = process.hrtime.bigint();
    const incoming = ctx.get('X-Request-Id');
    const requestId = REQUEST_ID.test(incoming) ? incoming : newRequestId();
    ctx.state.requestId = requestId;
    ctx.set('X-Request-Id', requestId);
    try {
      await next();
      // The router answers unknown routes and methods with a bare status (and an Allow header).
      if (ctx.body === undefined && ctx.status === 404) {
        throw new HttpError(404, 'not_found', `No route for ${ctx.method} ${ctx.path}.`);
      }
      // The router says 501 for a method it knows no route of (TRACE, PROPFIND, QUERY…): on a path
      // it has routes for, that is as much "not allowed here" as DELETE on a read-only path; on
      // any other path there is simply no such route.
      if (ctx.body === undefined && (ctx.status === 405 || ctx.status === 501)) {
        const allow = ctx.response.get('Allow');
        if (!allow) throw new HttpError(404, 'not_found', `No route for ${ctx.method} ${ctx.path}.`);
        throw new HttpError(
          405,
          'method_not_allowed',
          `${ctx.method} is not allowed here; allowed: ${allow}.`,
          {
            headers: { Allow: allow },
          },
        );
      }
    } catch (err) {
      const { status, body, headers } = renderError(err, requestId, ctx.method);
      // The route's template, not the path: some paths carry a secret (/auth/challenge/{challenge}).
      const route = (ctx as Context & { _matchedRoute?: string })._matchedRoute ?? 'unmatched';
      // A fault of ours (500) is logged with its stack; an unavailable dependency or a read that
      // could not catch up (503) is expected in operation, and any client can cause the latter.
      if (status === 503)
        logger.warn(
          {
            request_id: requestId,
            method: ctx.method,
            route,
            error: (err as Error).message,
            code: (err as { code?: unknown }).code,
          },
          'request answered 503',
        );
      else if (status >= 500 && status !== 501)
        logger.error({ err, request_id: requestId, method: ctx.method, route }, 'request failed');
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
    /** The process's token buckets, for the middleware that learns who the caller is. */
    tokenBuckets?: TokenBuckets;
  }
}

/** Charges `key` a token of its bucket (429 with Retry-After when the bucket is empty). */
export async function chargeTokenBucket(ctx: Context, key: string): Promise<void> {
  const buckets = ctx.state.tokenBuckets;
  if (!buckets) return;
  const wait = await buckets.take(key);
  if (wait > 0) throw tooManyRequests(wait);
}

/**
 * Per-caller rate limit by token buckets. A request with a bearer token is charged to its account
 * once the token is verified (see authenticate), so that devices behind one address do not share a
 * budget and a forged token cannot spend another account's; a request without one, or whose token
 * fails, is charged to its client address (so is one with other credentials, such as Basic).
 */
export function tokenBucketLimit(buckets: TokenBuckets): Middleware {
  return async (ctx, next) => {
    ctx.state.tokenBuckets = buckets;
    // Basic (the operator callbacks) and anything else but a bearer token: the address pays.
    if (!/^Bearer\s/i.test(ctx.get('Authorization'))) await chargeTokenBucket(ctx, `address:${ctx.ip}`);
    return next();
  };
}

/** Counts a hit in `key`'s one-minute fixed window (429 with Retry-After past `perMinute`). */
export async function fixedWindowLimit(windows: FixedWindows, key: string, perMinute: number): Promise<void> {
  const wait = await windows.hit(key, perMinute, 60_000);
  if (wait > 0) throw tooManyRequests(wait);
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
  let bytes: Buffer;
  try {
    bytes = await getRawBody(ctx.req, { limit: limitBytes, length });
  } catch (err) {
    const e = err as { type?: string };
    if (e.type === 'entity.too.large') {
      throw new HttpError(413, 'payload_too_large', `The body is larger than ${limitBytes} bytes.`);
    }
    throw badRequest('The body could not be read.');
  }
  // JSON is UTF-8 (RFC 8259): bytes that are not would be read as U+FFFD and stored as such.
  if (!isUtf8(bytes))
    throw new HttpError(400, 'invalid_json', 'The body is not valid JSON: it is not well-formed UTF-8.');
  const raw = bytes.toString('utf8');
  let body: unknown;
  try {
    body = JSON.parse(raw);
  } catch (err) {
    throw new HttpError(400, 'invalid_json', `The body is not valid JSON: ${(err as Error).message}`);
  }
  // A \uD800-\uDFFF escape may stand alone: JSON.parse keeps such a string, which UTF-8 (the
  // stores, the events) cannot hold; it would be stored as U+FFFD, not as answered. Only bodies
  // with such an escape are walked.
  if (SURROGATE_ESCAPE.test(raw) && !wellFormed(body))
    throw new HttpError(
      400,
      'invalid_json',
      'The body holds a string that is not well-formed Unicode: a \\uD800-\\uDFFF escape without its pair.',
    );
  return body;
}

const SURROGATE_ESCAPE = /\\u[dD][89a-fA-F]/;

/** Whether every string of a parsed JSON value, keys included, is well-formed Unicode. */
function wellFormed(value: unknown): boolean {
  if (typeof value === 'string') return value.isWellFormed();
  if (Array.isArray(value)) return value.every(wellFormed);
  if (value !== null && typeof value === 'object')
    return Object.entries(value).every(([k, v]) => k.isWellFormed() && wellFormed(v));
  return true;
}

const RFC3339 =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(?:Z|([+-])(\d{2}):(\d{2}))$/i;
const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
const daysIn = (year: number, month: number) =>
  month === 2 && year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : DAYS[month - 1]!;

/**
 * An RFC 3339 timestamp of a query (callbacks' `timemodified`, the event log's `since`), with up
 * to nanoseconds, as nanoseconds since the epoch; a space stands for an unencoded
 * `+`. A date or time that does not exist (February 31st, 24:00) is refused, not rolled over into
 * the next day; a leap second (:60) reads as the last instant of its minute's 59th second.
 */
export function parseRfc3339(raw: string): bigint | undefined {
  const m = RFC3339.exec(raw.replace(' ', '+'));
  if (!m) return undefined;
  const [year, month, day, hour, minute, second, , , offsetHours, offsetMinutes] = m
    .slice(1)
    .map((v) => Number(v ?? 0)) as number[];
  if (month! < 1 || month! > 12 || day! < 1 || day! > daysIn(year!, month!)) return undefined;
  if (hour! > 23 || minute! > 59 || second! > 60 || offsetHours! > 23 || offsetMinutes! > 59)
    return undefined;
  const at = new Date(Date.UTC(2000, month! - 1, day!, hour!, minute!, Math.min(second!, 59)));
  at.setUTCFullYear(year!); // Date.UTC reads years below 100 as 19xx
  const offsetMs = (m[8] === '-' ? -1 : 1) * (offsetHours! * 60 + offsetMinutes!) * 60_000;
  const nanos = second === 60 ? 999_999_999n : BigInt((m[7] ?? '').padEnd(9, '0'));
  return BigInt(at.getTime() - offsetMs) * 1_000_000n + nanos;
}

/**
 * Answers an HTML page whose one script is `script`: a Content-Security-Policy that lets that
 * script alone run (by its hash) and the page talk to this origin only, never framed, never
 * sniffed, and no Referer (the reset page's address carries its token).
 */
export function sendPage(ctx: Context, html: string, script: string): void {
  ctx.type = 'html';
  ctx.set(pageHeaders(`'${scriptHash(script)}'`));
  ctx.body = `${html}\n<script>${script}</script>`;
}

/** The headers of every HTML page the hub serves (sendPage's, the console's): scripts from
 * `scriptSrc` alone, styles from `styleSrc` alone (none by default), requests to this origin only,
 * never framed, never sniffed, no Referer. */
export function pageHeaders(scriptSrc: string, styleSrc?: string): Record<string, string> {
  const style = styleSrc ? `; style-src ${styleSrc}` : '';
  return {
    'Content-Security-Policy': `default-src 'none'; script-src ${scriptSrc}${style}; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'`,
    'X-Content-Type-Options': 'nosniff',
    'X-Frame-Options': 'DENY',
    'Referrer-Policy': 'no-referrer',
  };
}

const scriptHashes = new Map<string, string>();
/** `sha256-<base64>` of an inline script, as a Content-Security-Policy names it. */
export function scriptHash(script: string): string {
  let hash = scriptHashes.get(script);
  if (!hash) {
    hash = `sha256-${createHash('sha256').update(script).digest('base64')}`;
    scriptHashes.set(script, hash);
  }
  return hash;
}
