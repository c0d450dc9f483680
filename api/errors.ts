// The one error shape of the API: { error, message, code, request_id, details? }.
// Handlers throw HttpError, decisions DomainError (mapped below); the error middleware renders it.
import { DomainError, type Refusal } from '../domain/errors.ts';
import { DuplicateEventIdError, WrongExpectedRevisionError } from '../infra/eventstore/port.ts';
import { ProjectionLagError } from '../projections/consistency.ts';
import { SchemaError } from '../schemas/registry.ts';

export interface ErrorDetail {
  field: string;
  problem: string;
}

export class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details: ErrorDetail[] | undefined;
  readonly headers: Record<string, string> | undefined;
  constructor(
    status: number,
    code: string,
    message: string,
    extra: { details?: ErrorDetail[]; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.code = code;
    this.details = extra.details;
    this.headers = extra.headers;
  }
}

export const badRequest = (message: string, details?: ErrorDetail[]) =>
  new HttpError(400, 'bad_request', message, { details });
export const unauthorized = (message = 'Authentication required.') =>
  new HttpError(401, 'unauthorized', message, { headers: { 'WWW-Authenticate': 'Bearer' } });
/** Credentials sent in a body (login, the current password) that do not hold: a 401 like any, so
 * with WWW-Authenticate too. */
export const invalidCredentials = (message: string) =>
  new HttpError(401, 'invalid_credentials', message, { headers: { 'WWW-Authenticate': 'Bearer' } });
export const forbidden = (message: string) => new HttpError(403, 'forbidden', message);
export const notFound = (message = 'Not found.') => new HttpError(404, 'not_found', message);
export const conflict = (message: string) => new HttpError(409, 'conflict', message);
export const unprocessable = (message: string, details?: ErrorDetail[]) =>
  new HttpError(422, 'validation_failed', message, { details });
export const tooManyRequests = (retryAfterSeconds: number) =>
  new HttpError(429, 'rate_limited', `Too many requests; retry after ${retryAfterSeconds} s.`, {
    headers: { 'Retry-After': String(retryAfterSeconds) },
  });
export const unavailable = (message: string, retryAfterSeconds = 1) =>
  new HttpError(503, 'unavailable', message, { headers: { 'Retry-After': String(retryAfterSeconds) } });

/** The HTTP answer of each refusal of a decision (domain/errors.ts). */
const REFUSALS: Record<Refusal, [number, string]> = {
  not_found: [404, 'not_found'],
  forbidden: [403, 'forbidden'],
  unauthorized: [401, 'unauthorized'],
  conflict: [409, 'conflict'],
  invalid: [422, 'validation_failed'],
  too_large: [413, 'payload_too_large'],
};

/** Codes for statuses produced outside our handlers (router, body reader, http-errors). */
const CODE_BY_STATUS: Record<number, string> = {
  400: 'bad_request',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not_found',
  405: 'method_not_allowed',
  409: 'conflict',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  422: 'validation_failed',
  429: 'rate_limited',
  501: 'not_implemented',
  503: 'unavailable',
};

const SAFE_HEADERS = new Set(['allow', 'retry-after', 'www-authenticate']);

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** SQLite's primary result codes of storage that cannot serve: READONLY, IOERR, FULL, CANTOPEN. */
const SQLITE_STORAGE = new Set([8, 10, 13, 14]);

/**
 * Whether an error says a dependency (Redis, PostgreSQL, the broker) could not be reached, rather
 * than that something is wrong with the request or with us: answered 503 and logged as a warning.
 */
export function dependencyDown(err: unknown): boolean {
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | undefined;
  if (!e || typeof e !== 'object') return false;
  if (e.name === 'MaxRetriesPerRequestError') return true; // ioredis, the connection lost
  // SQLite (embedded): the file cannot be written (read-only, I/O error, disk full, cannot open).
  if (
    typeof (e as { errcode?: unknown }).errcode === 'number' &&
    SQLITE_STORAGE.has((e as { errcode: number }).errcode & 0xff)
  )
    return true;
  // PostgreSQL: connection failures (class 08 but a protocol violation, which is a bug), the
  // server shutting down or idle-closing the session, too many connections.
  if (
    typeof e.code === 'string' &&
    (NETWORK_CODES.has(e.code) || /^(0800[0-6]|57P0[1-35]|53300)$/.test(e.code))
  )
    return true;
  return (
    typeof e.message === 'string' &&
    /^(Connection terminated|Client has encountered a connection error)/.test(e.message) // pg
  );
}

export interface ErrorBody {
  error: string;
  message: string;
  code: number;
  request_id: string;
  details?: ErrorDetail[];
}

/**
 * Turns anything thrown into a status, headers and the one body shape. Errors that are not ours
 * and not marked `expose` by http-errors become a 500 whose message reveals nothing internal.
 */
export function renderError(
  err: unknown,
  requestId: string,
  /** The request's method: a write cut off by an outage may have been stored. */
  method = 'GET',
): { status: number; body: ErrorBody; headers: Record<string, string> } {
  if (err instanceof WrongExpectedRevisionError || err instanceof DuplicateEventIdError) {
    return renderError(
      conflict('The resource was changed by another request; read it again and retry.'),
      requestId,
    );
  }
  if (err instanceof ProjectionLagError) {
    return renderError(
      new HttpError(503, 'stale_read', err.message, { headers: { 'Retry-After': '1' } }),
      requestId,
    );
  }
  if (dependencyDown(err)) {
    // A read is safe to retry. A write may have been stored before the connection went (not every
    // command is safe to repeat: a device created twice, a refresh token presented twice): no
    // Retry-After, and the message says to look before trying again.
    return renderError(
      method === 'GET' || method === 'HEAD'
        ? unavailable('A service the hub depends on does not answer; retry shortly.')
        : new HttpError(
            503,
            'unavailable',
            'A service the hub depends on does not answer; the change may or may not have been made: read it before trying again.',
          ),
      requestId,
    );
  }
  if (err instanceof DomainError) {
    const [status, code] = REFUSALS[err.refusal];
    return renderError(
      new HttpError(status, err.code ?? code, err.message, {
        details: err.details,
        headers: status === 401 ? { 'WWW-Authenticate': 'Bearer' } : undefined,
      }),
      requestId,
    );
  }
  if (err instanceof SchemaError) {
    return renderError(unprocessable(err.message, [{ field: err.field, problem: err.message }]), requestId);
  }
  if (err instanceof HttpError) {
    const body: ErrorBody = {
      error: err.code,
      message: err.message,
      code: err.status,
      request_id: requestId,
    };
    if (err.details) body.details = err.details;
    return { status: err.status, body, headers: err.headers ?? {} };
  }
  const e = err as {
    status?: unknown;
    statusCode?: unknown;
    expose?: unknown;
    message?: unknown;
    headers?: unknown;
  };
  const status =
    typeof e?.status === 'number' ? e.status : typeof e?.statusCode === 'number' ? e.statusCode : 500;
  // Other libraries' errors (http-errors) show their message only when marked safe to expose,
  // and pass on only the headers that belong to the status.
  if (status >= 400 && status < 500 && e?.expose === true) {
    const given = e.headers && typeof e.headers === 'object' ? (e.headers as Record<string, string>) : {};
    const headers = Object.fromEntries(
      Object.entries(given).filter(([k]) => SAFE_HEADERS.has(k.toLowerCase())),
    );
    return {
      status,
      body: {
        error: CODE_BY_STATUS[status] ?? 'error',
        message: typeof e.message === 'string' && e.message ? e.message : 'Request failed.',
        code: status,
        request_id: requestId,
      },
      headers,
    };
  }
  return {
    status: 500,
    body: {
      error: 'internal',
      message: `Internal error; quote request id ${requestId} when reporting it.`,
      code: 500,
      request_id: requestId,
    },
    headers: {},
  };
}
