// One declaration per endpoint feeds both the router and /openapi.json, and the request is
// validated against exactly the schemas the document publishes.
import Router, { type RouterMiddleware } from '@koa/router';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Context, Middleware } from 'koa';
import { minPosition } from './consistency.ts';
import { type ErrorDetail, unprocessable } from './errors.ts';
import { readJsonBody } from './http.ts';
import type { ObjectSchema, Schema } from './schema.ts';

/** For the propertyNames of a map the caller names the keys of: `__proto__` is refused. JSON.parse
 * makes it an own key, but most of JavaScript (an assignment, a decoder) sets the prototype with it
 * instead, so such a key was answered, then lost from the stored map. */
export const NOT_PROTO = { not: { const: '__proto__' } };

/** The scopes of which a bearer token needs one (published as the operation's alternatives), with
 * the check that refuses a token holding none of them (403 naming them). */
export interface ScopeRequirement {
  granting: string[];
  check: Middleware;
}

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export interface Input<B, Q, R = undefined> {
  body: B;
  query: Q;
  params: Record<string, string>;
  /** What `authorize` found: the resource the caller may act on. */
  allowed: R;
}

export interface RouteSpec<B = undefined, Q = Record<string, string>, R = undefined> {
  method: Method;
  /** OpenAPI form: /devices/{id} */
  path: string;
  summary: string;
  tag: string;
  description?: string;
  /** `optional-bearer`: anonymous, or with a bearer token that changes what it does (POST
   * /devices without one registers an unowned device; with one, the caller's): the registry checks
   * a token that is sent as it does for `bearer`. `bearer-if-body-needs`: published as
   * `optional-bearer`, but the body says whether a token is needed (a SERVICE account's
   * registration, a password change without the emailed token), so the handler checks it then, and
   * a header no token is needed for is not read (the operator's Basic credentials). */
  security?: 'bearer' | 'optional-bearer' | 'bearer-if-body-needs' | 'basic' | 'none';
  /** What the bearer token must grant (`requireScope(service, mode)`): its scopes are published as
   * alternatives, and the registry checks them once the token is verified. */
  scopes?: ScopeRequirement;
  /** A read served from read models: it waits for the caller's writes and for X-Hub-Min-Position
   * (its handler asks `consistency.readable`), which /openapi.json then publishes for it. */
  waitsForWrites?: boolean;
  /** Built with `s` (./schema.ts): the handler's `body` and `query` are of the types they carry. */
  body?: Schema<B>;
  query?: ObjectSchema<unknown, Q>;
  /** `mediaType`: what a success is sent as, when not JSON (an event stream: text/event-stream). */
  responses: Record<number, { description: string; schema?: Record<string, unknown>; mediaType?: string }>;
  /** Checks of the route's own, run after the registry's authentication and scope check (a kind of
   * token: `requireFirstParty`, `requireAccountType`). */
  middleware?: RouterMiddleware[];
  /** The caller's rights on the resource the path names, asked before the body is read: a caller
   * who may not act is told so (403, 404) whatever it sent, and learns nothing from a 422. */
  authorize?: (ctx: Context) => Promise<R>;
  handler: (ctx: Context, input: Input<B, Q, R>) => Promise<void> | void;
}

/** Headers every operation takes (components.parameters of /openapi.json). */
const PARAMETERS = {
  RequestId: {
    name: 'X-Request-Id',
    in: 'header',
    required: false,
    description:
      'Your id for the request, echoed in the answer and in the logs (1-128 letters, digits and `_.:-`; another is made when absent or not of this form).',
    schema: { type: 'string', maxLength: 128 },
  },
  MinPosition: {
    name: 'X-Hub-Min-Position',
    in: 'header',
    required: false,
    description:
      'A position a command answered (X-Hub-Position): this read, served from read models, waits until they have applied it (503 stale_read past HUB_READ_WAIT_MS). A decimal integer (400 otherwise). Reads not listing it come from the event store: never stale.',
    schema: { type: 'string', pattern: '^[0-9]{1,15}$' },
  },
};

const HEADERS = {
  RequestId: { description: 'The request id (yours, or one made for it).', schema: { type: 'string' } },
  Position: {
    description:
      "The event store's position of the command's last event: send it as X-Hub-Min-Position to read your write anywhere. Absent when the command changed nothing.",
    schema: { type: 'string' },
  },
  RetryAfter: { description: 'Seconds to wait before trying again.', schema: { type: 'string' } },
  WwwAuthenticate: { description: 'Bearer.', schema: { type: 'string' } },
};
const READ_HEADERS = { 'X-Request-Id': { $ref: '#/components/headers/RequestId' } };
const WWW_AUTHENTICATE = { 'WWW-Authenticate': { $ref: '#/components/headers/WwwAuthenticate' } };
const RETRY_AFTER = { 'Retry-After': { $ref: '#/components/headers/RetryAfter' } };
const WRITE_HEADERS = { ...READ_HEADERS, 'X-Hub-Position': { $ref: '#/components/headers/Position' } };

const errorResponse = (description: string, headers?: Record<string, unknown>) => ({
  description,
  headers: { ...READ_HEADERS, ...headers },
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
});
/** The errors of /openapi.json's operations, each listed where the operation can answer it. */
const ERROR_RESPONSES = {
  BadRequest: errorResponse(
    '`invalid_json`: the body is not JSON (or holds a string that is not well-formed Unicode); `bad_request`: a request or header that cannot be read.',
  ),
  Unauthorized: errorResponse('No token, or one that does not hold.', WWW_AUTHENTICATE),
  Forbidden: errorResponse('The token lacks a scope (named), or is of a kind that may not do this.'),
  NotFound: errorResponse('No such resource, or not one of yours.'),
  PayloadTooLarge: errorResponse(
    'The body is over HUB_BODY_LIMIT_BYTES, or a metadata map over HUB_META_MAX_KEYS keys.',
  ),
  UnsupportedMediaType: errorResponse('Send the body as application/json.'),
  Unprocessable: errorResponse('A field or query parameter is invalid: `details` names each.'),
  TooManyRequests: errorResponse('Over the rate limit (per account, or per address).', RETRY_AFTER),
  Unavailable: errorResponse(
    '`unavailable`: a dependency does not answer (a read gets Retry-After; a write does not, as it may have been stored: read before trying again); `stale_read`: the read models did not catch up in time.',
    RETRY_AFTER,
  ),
};

/** The body and query of a route that declares none: no fields. */
const NO_FIELDS = { type: 'object', additionalProperties: false, properties: {} };

const ERROR_SCHEMA = {
  type: 'object',
  required: ['error', 'message', 'code', 'request_id'],
  properties: {
    error: { type: 'string', description: 'Machine-readable code, e.g. validation_failed.' },
    message: { type: 'string', description: 'Human-readable explanation.' },
    code: { type: 'integer', description: 'The HTTP status again.' },
    request_id: { type: 'string', description: 'Also in the X-Request-Id header.' },
    details: {
      type: 'array',
      items: {
        type: 'object',
        required: ['field', 'problem'],
        properties: { field: { type: 'string' }, problem: { type: 'string' } },
      },
    },
  },
};

/** `devices` of /devices/{id}/device-meta, in lower case (the routers match paths so). */
function firstSegment(path: string): string {
  const end = path.indexOf('/', 1);
  return path.slice(1, end < 0 ? undefined : end).toLowerCase();
}

/** A path as the router compares it: without case, and with or without its final slash. */
const pathKey = (path: string) => path.toLowerCase().replace(/\/$/, '');

/** A router as a middleware with its 405 and 501 answers. */
interface Routed {
  router: Router;
  dispatch: Middleware;
}

function routed(): Routed {
  const router = new Router();
  // Both read the router's routes when a request comes: routes added later take part.
  const [routes, allowed] = [router.routes(), router.allowedMethods()] as unknown as Middleware[];
  return { router, dispatch: (ctx, next) => routes!(ctx, () => allowed!(ctx, next)) };
}

/** The routes under one first path segment: those without parameters, by path, apart. */
interface Segment {
  literals: Set<string>;
  literal: Routed;
  param: Routed;
}

export class Routes {
  /**
   * One router per first path segment (`devices`, `auth`, …), as a middleware with its 405 and 501
   * answers: a router matches a request against each of its routes in turn, and the service's own
   * dozen are cheaper to try than every route.
   */
  private readonly routers = new Map<string, Segment>();
  private readonly paths: Record<string, Record<string, unknown>> = {};
  /** Named schemas the document's operations and webhooks refer to (`#/components/schemas/…`). */
  private readonly schemas: Record<string, unknown> = { Error: ERROR_SCHEMA };
  /** The requests the hub sends rather than answers (OpenAPI 3.1 `webhooks`), by name. */
  private readonly webhooks: Record<string, unknown> = {};
  private readonly ajv = new Ajv2020({ allErrors: true, strict: false });
  private readonly queryAjv = new Ajv2020({
    allErrors: true,
    strict: false,
    coerceTypes: true,
    useDefaults: true,
  });
  private readonly bodyLimit: number;
  private readonly authenticate: Middleware | undefined;

  /** `authenticate` verifies a bearer token (401 with WWW-Authenticate when it does not hold): the
   * check of every route that declares `security: 'bearer'`, made by the caller, which has the keys. */
  constructor(bodyLimitBytes: number, authenticate?: Middleware) {
    this.bodyLimit = bodyLimitBytes;
    this.authenticate = authenticate;
    // `format` keywords (uri, email, date-time) are checked, not just documented.
    for (const ajv of [this.ajv, this.queryAjv]) (addFormats as unknown as (a: Ajv2020) => void)(ajv);
  }

  add<B = undefined, Q = Record<string, string>, R = undefined>(spec: RouteSpec<B, Q, R>): void {
    // A route that declares no body takes none (an empty object at most), and a query parameter
    // no route declares is refused: a typo (`?staus=failed`) must not silently do nothing.
    const validateBody = this.ajv.compile(spec.body ?? NO_FIELDS);
    const validateQuery = this.queryAjv.compile({
      additionalProperties: false,
      ...(spec.query ?? NO_FIELDS),
    });
    // A field the answer has and the request may not set (a Device's `public`, `prn`) is named so.
    const answered = new Set(Object.keys((spec.responses[200]?.schema?.properties ?? {}) as object));
    const integerParams = Object.entries((spec.query?.properties ?? {}) as Record<string, { type?: unknown }>)
      .filter(([, s]) => s.type === 'integer')
      .map(([name]) => name);
    const bodyLimit = this.bodyLimit;
    // No body reads as {} on an operation that takes none, or a POST whose schema requires nothing
    // (POST /devices). Never on PUT or PATCH: a bodiless replace would wipe what it replaces.
    const bodyOptional =
      !spec.body ||
      (spec.method === 'post' &&
        spec.body.type === 'object' &&
        !(spec.body.required as string[] | undefined)?.length &&
        !spec.body.minProperties);
    // Registered without its final slash, which the router then takes either way (/profiles/ of
    // the spec, and /profiles), as it does for every other path.
    const koaPath = spec.path.replace(/\{(\w+)\}/g, ':$1').replace(/(.)\/$/, '$1');
    const handle: RouterMiddleware = async (ctx: Context) => {
      const allowed = (spec.authorize ? await spec.authorize(ctx) : undefined) as R;
      if (spec.waitsForWrites) minPosition(ctx);
      let body = await readJsonBody(ctx, bodyLimit);
      if (body === undefined && !bodyOptional)
        throw unprocessable('A JSON body is required.', [{ field: '', problem: 'missing' }]);
      if (body === undefined) body = {}; // a JSON null stays null, refused as not an object
      check(validateBody, body, 'body', answered);
      const query = { ...ctx.query } as Record<string, unknown>;
      // Integers are written in decimal: ajv would coerce `0x10` and `1e2` as JavaScript does.
      for (const name of integerParams) {
        const raw = query[name];
        if (raw !== undefined && !(typeof raw === 'string' && /^-?\d{1,15}$/.test(raw)))
          throw unprocessable(`Invalid query: ${name} must be a decimal integer.`, [
            { field: name, problem: 'must be a decimal integer' },
          ]);
      }
      check(validateQuery, query, 'query');
      await spec.handler(ctx, { body: body as B, query: query as Q, params: ctx.params, allowed });
    };
    const segment = this.segmentOf(firstSegment(spec.path));
    const literal = !spec.path.includes('{');
    if (literal) segment.literals.add(pathKey(spec.path));
    (literal ? segment.literal : segment.param).router[spec.method](
      koaPath,
      ...this.security(spec),
      ...(spec.middleware ?? []),
      handle,
    );
    this.document(spec, !bodyOptional);
  }

  /** The checks a route's declared `security` and `scopes` make, before its own middleware: the
   * token (401), then its scopes (403). `optional-bearer` checks a token when one is sent. */
  private security<B, Q, R>(spec: RouteSpec<B, Q, R>): RouterMiddleware[] {
    const bearer = spec.security === 'bearer' || spec.security === 'optional-bearer';
    if (!bearer) return [];
    const authenticate = this.authenticate;
    if (!authenticate)
      throw new Error(`${spec.path} takes a bearer token: make the routes with authenticate.`);
    const scopes = spec.scopes;
    if (spec.security === 'bearer')
      return (scopes ? [authenticate, scopes.check] : [authenticate]) as RouterMiddleware[];
    // Without a token the route serves the anonymous caller; with one, the token must hold.
    const verified: Middleware = scopes
      ? (ctx, next) => authenticate(ctx, () => scopes.check(ctx, next))
      : authenticate;
    return [((ctx, next) => (ctx.get('Authorization') ? verified(ctx, next) : next())) as RouterMiddleware];
  }

  /** The routes as one middleware: the router of the request's first segment. A path that is
   * a route of its own (/webhooks/events) is answered by its routes alone, with their 405 and
   * Allow: else a route with a parameter there (/webhooks/{id}) took it, and DELETE
   * /webhooks/events was "no such subscription". */
  middleware(): Middleware {
    return (ctx, next) => {
      const segment = this.routers.get(firstSegment(ctx.path));
      if (!segment) return next();
      return (segment.literals.has(pathKey(ctx.path)) ? segment.literal : segment.param).dispatch(ctx, next);
    };
  }

  private segmentOf(name: string): Segment {
    let segment = this.routers.get(name);
    if (!segment) {
      segment = { literals: new Set(), literal: routed(), param: routed() };
      this.routers.set(name, segment);
    }
    return segment;
  }

  private document<B, Q, R>(spec: RouteSpec<B, Q, R>, bodyRequired: boolean): void {
    const params = [...spec.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
      name: m[1],
      in: 'path',
      required: true,
      schema: { type: 'string' },
    }));
    const queryProps = (spec.query?.properties ?? {}) as Record<string, Record<string, unknown>>;
    const queryRequired = (spec.query?.required ?? []) as string[];
    const queryParams = Object.entries(queryProps).map(([name, s]) => ({
      name,
      in: 'query',
      required: queryRequired.includes(name),
      schema: s,
      ...(typeof s.description === 'string' ? { description: s.description } : {}),
    }));
    const mutation = spec.method !== 'get';
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(spec.responses)) {
      const success = Number(status) < 300;
      // An error a route names (its own 401, 409…) is of the one error shape too.
      responses[status] = success
        ? {
            description: r.description,
            headers: mutation ? WRITE_HEADERS : READ_HEADERS,
            ...(r.schema ? { content: { [r.mediaType ?? 'application/json']: { schema: r.schema } } } : {}),
          }
        : errorResponse(r.description, status === '401' ? WWW_AUTHENTICATE : {});
    }
    // The errors this operation can answer, from what it takes (each of the one error shape).
    const optional = spec.security === 'optional-bearer' || spec.security === 'bearer-if-body-needs';
    const bearer = spec.security === 'bearer' || optional;
    const errors: [number, string, boolean][] = [
      [400, 'BadRequest', true],
      [401, 'Unauthorized', bearer || spec.security === 'basic'],
      [403, 'Forbidden', bearer],
      [404, 'NotFound', spec.path.includes('{')],
      [413, 'PayloadTooLarge', Boolean(spec.body)],
      [415, 'UnsupportedMediaType', Boolean(spec.body)],
      [422, 'Unprocessable', Boolean(spec.body || spec.query)],
      [429, 'TooManyRequests', true],
      [503, 'Unavailable', true],
    ];
    for (const [status, name, applies] of errors)
      if (applies && !responses[status]) responses[status] = { $ref: `#/components/responses/${name}` };
    responses.default = {
      description: 'Any other error (4xx, 5xx), always of this shape.',
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
    const alternatives = spec.scopes?.granting.length
      ? spec.scopes.granting.map((scope) => ({ bearer: [scope] })) // any one of them will do
      : [{ bearer: [] }];
    const security =
      spec.security === 'bearer'
        ? alternatives
        : optional
          ? [{}, ...alternatives] // {}: without a token too
          : spec.security === 'basic'
            ? [{ basic: [] }]
            : undefined;
    const words = spec.path
      .replace(/[{}]/g, '')
      .split(/[^A-Za-z0-9]+/)
      .filter(Boolean);
    const op: Record<string, unknown> = {
      summary: spec.summary,
      tags: [spec.tag],
      operationId: spec.method + words.map((w) => w[0]!.toUpperCase() + w.slice(1)).join(''),
      parameters: [
        ...params,
        ...queryParams,
        { $ref: '#/components/parameters/RequestId' },
        ...(spec.waitsForWrites ? [{ $ref: '#/components/parameters/MinPosition' }] : []),
      ],
      responses,
    };
    if (spec.description) op.description = spec.description;
    if (security) op.security = security;
    if (spec.body)
      op.requestBody = { required: bodyRequired, content: { 'application/json': { schema: spec.body } } };
    this.paths[spec.path] ??= {};
    this.paths[spec.path]![spec.method] = op;
  }

  /** Publishes a named schema (`#/components/schemas/<name>`). */
  schema(name: string, schema: Record<string, unknown>): void {
    if (name in this.schemas) throw new Error(`the schema ${name} is published twice`);
    this.schemas[name] = schema;
  }

  /** Publishes a request the hub sends (a webhook delivery) as an OpenAPI 3.1 webhook. */
  webhook(name: string, pathItem: Record<string, unknown>): void {
    if (name in this.webhooks) throw new Error(`the webhook ${name} is published twice`);
    this.webhooks[name] = pathItem;
  }

  openapi(version: string): Record<string, unknown> {
    return {
      openapi: '3.1.0',
      info: {
        title: 'Device Hub',
        version,
        description:
          'Identity, devices, metadata and signed webhooks for fleets of connected devices. Decisions where the interface specification is silent are described in docs/api.md.',
      },
      paths: this.paths,
      webhooks: this.webhooks,
      components: {
        schemas: this.schemas,
        parameters: PARAMETERS,
        headers: HEADERS,
        responses: ERROR_RESPONSES,
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          basic: { type: 'http', scheme: 'basic' },
        },
      },
    };
  }
}

function check(
  validate: ValidateFunction,
  value: unknown,
  where: 'body' | 'query',
  answered = new Set<string>(),
): void {
  if (validate(value)) return;
  const details = describe(validate.errors ?? [], answered);
  const first = details[0];
  const message = first
    ? `Invalid ${where}: ${first.field ? `${first.field} ` : ''}${first.problem}.`
    : `Invalid ${where}.`;
  throw unprocessable(message, details);
}

/** One detail per problem, each naming its field: a map's key by the key, and a value that matches
 * none of an anyOf's branches once, with what each branch wanted (ajv reports the branches, then
 * the anyOf, and a key's own error, then "property name must be valid"). */
function describe(errors: ErrorObject[], answered: Set<string>): ErrorDetail[] {
  const branches = new Map<string, string[]>(); // an anyOf's schema path → its branches' problems
  for (const e of errors) if (e.keyword === 'anyOf') branches.set(`${e.schemaPath}/`, []);
  const details: ErrorDetail[] = [];
  for (const e of errors) {
    if (e.keyword === 'propertyNames') continue;
    const anyOf = [...branches.keys()].find((p) => e.schemaPath.startsWith(p));
    if (anyOf) {
      branches.get(anyOf)!.push(e.message ?? 'is invalid');
      continue;
    }
    const base = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
    const at = (name: string) => (base ? `${base}.${name}` : name);
    if (e.keyword === 'anyOf')
      details.push({ field: base, problem: branches.get(`${e.schemaPath}/`)!.join(' or ') });
    else if (e.keyword === 'additionalProperties') {
      const extra = String((e.params as { additionalProperty: string }).additionalProperty);
      details.push({
        field: at(extra),
        problem:
          !base && answered.has(extra) ? 'is set by the hub, not by a request' : 'is not a known field',
      });
    } else if (e.keyword === 'required') {
      const missing = String((e.params as { missingProperty: string }).missingProperty);
      details.push({ field: at(missing), problem: 'is required' });
    } else if (e.propertyName !== undefined)
      details.push({
        field: at(e.propertyName),
        problem: e.keyword === 'not' ? 'is not allowed as a key' : `key ${e.message ?? 'is invalid'}`,
      });
    else if (e.keyword === 'type')
      details.push({
        field: base,
        problem: `must be ${[(e.params as { type: string | string[] }).type].flat().join(' or ')}`,
      });
    else details.push({ field: base, problem: e.message ?? 'is invalid' });
  }
  return details;
}
