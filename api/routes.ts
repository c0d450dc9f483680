// One declaration per endpoint feeds both the router and /openapi.json, and the request is
// validated against exactly the schemas the document publishes.
import Router, { type RouterMiddleware } from '@koa/router';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { Context, Middleware } from 'koa';
import { type ErrorDetail, unprocessable } from './errors.ts';
import { readJsonBody } from './http.ts';

/** A JSON Schema whose instances are T (the type rides along for handlers). */
export type Schema<T> = Record<string, unknown> & { readonly __type?: T };
export const schema = <T>(json: Record<string, unknown>): Schema<T> => json as Schema<T>;

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export interface Input<B, Q> {
  body: B;
  query: Q;
  params: Record<string, string>;
}

export interface RouteSpec<B = undefined, Q = Record<string, string>> {
  method: Method;
  /** OpenAPI form: /devices/{id} */
  path: string;
  summary: string;
  tag: string;
  description?: string;
  security?: 'bearer' | 'basic' | 'none';
  /** Scopes of which the bearer token needs one (documented; enforced by the route's own middleware). */
  scopes?: string[];
  body?: Schema<B>;
  query?: Schema<Q>;
  responses: Record<number, { description: string; schema?: Record<string, unknown> }>;
  middleware?: RouterMiddleware[];
  handler: (ctx: Context, input: Input<B, Q>) => Promise<void> | void;
}

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

export class Routes {
  /**
   * One router per first path segment (`devices`, `auth`, …), as a middleware with its 405 and 501
   * answers: a router matches a request against each of its routes in turn, and the service's own
   * dozen are cheaper to try than every route.
   */
  private readonly routers = new Map<string, { router: Router; dispatch: Middleware }>();
  private readonly paths: Record<string, Record<string, unknown>> = {};
  private readonly ajv = new Ajv2020({ allErrors: true, strict: false });
  private readonly queryAjv = new Ajv2020({
    allErrors: true,
    strict: false,
    coerceTypes: true,
    useDefaults: true,
  });
  private readonly bodyLimit: number;

  constructor(bodyLimitBytes: number) {
    this.bodyLimit = bodyLimitBytes;
    // `format` keywords (uri, email, date-time) are checked, not just documented.
    for (const ajv of [this.ajv, this.queryAjv]) (addFormats as unknown as (a: Ajv2020) => void)(ajv);
  }

  add<B = undefined, Q = Record<string, string>>(spec: RouteSpec<B, Q>): void {
    const validateBody = spec.body ? this.ajv.compile(spec.body) : undefined;
    const validateQuery = spec.query ? this.queryAjv.compile(spec.query) : undefined;
    const bodyLimit = this.bodyLimit;
    const koaPath = spec.path.replace(/\{(\w+)\}/g, ':$1');
    const handle: RouterMiddleware = async (ctx: Context) => {
      let body: unknown;
      if (validateBody) {
        body = await readJsonBody(ctx, bodyLimit);
        if (body === undefined)
          throw unprocessable('A JSON body is required.', [{ field: '', problem: 'missing' }]);
        check(validateBody, body, 'body');
      }
      const query = { ...ctx.query } as Record<string, unknown>;
      if (validateQuery) check(validateQuery, query, 'query');
      await spec.handler(ctx, { body: body as B, query: query as Q, params: ctx.params });
    };
    this.routerOf(firstSegment(spec.path))[spec.method](koaPath, ...(spec.middleware ?? []), handle);
    this.document(spec);
  }

  /** The routes as one middleware: the router of the request's first segment. */
  middleware(): Middleware {
    return (ctx, next) => {
      const segment = this.routers.get(firstSegment(ctx.path));
      return segment ? segment.dispatch(ctx, next) : next();
    };
  }

  private routerOf(segment: string): Router {
    let entry = this.routers.get(segment);
    if (!entry) {
      const router = new Router();
      // Both read the router's routes when a request comes: routes added later take part.
      const [routes, allowed] = [router.routes(), router.allowedMethods()] as unknown as Middleware[];
      entry = { router, dispatch: (ctx, next) => routes!(ctx, () => allowed!(ctx, next)) };
      this.routers.set(segment, entry);
    }
    return entry.router;
  }

  private document<B, Q>(spec: RouteSpec<B, Q>): void {
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
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(spec.responses)) {
      responses[status] = r.schema
        ? { description: r.description, content: { 'application/json': { schema: r.schema } } }
        : { description: r.description };
    }
    responses.default = {
      description: 'Error (4xx, 5xx), always of this shape.',
      content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
    };
    const security =
      spec.security === 'bearer'
        ? [{ bearer: spec.scopes ?? [] }]
        : spec.security === 'basic'
          ? [{ basic: [] }]
          : undefined;
    const op: Record<string, unknown> = {
      summary: spec.summary,
      tags: [spec.tag],
      operationId: `${spec.method}${spec.path.replace(/[{}]/g, '').replace(/[/_.-](\w)/g, (_, c: string) => c.toUpperCase())}`,
      parameters: [...params, ...queryParams],
      responses,
    };
    if (spec.description) op.description = spec.description;
    if (security) op.security = security;
    if (spec.body)
      op.requestBody = { required: true, content: { 'application/json': { schema: spec.body } } };
    this.paths[spec.path] ??= {};
    this.paths[spec.path]![spec.method] = op;
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
      components: {
        schemas: { Error: ERROR_SCHEMA },
        securitySchemes: {
          bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
          basic: { type: 'http', scheme: 'basic' },
        },
      },
    };
  }
}

function check(validate: ValidateFunction, value: unknown, where: 'body' | 'query'): void {
  if (validate(value)) return;
  const details = (validate.errors ?? []).map(describe);
  const first = details[0];
  const message = first
    ? `Invalid ${where}: ${first.field ? `${first.field} ` : ''}${first.problem}.`
    : `Invalid ${where}.`;
  throw unprocessable(message, details);
}

function describe(e: ErrorObject): ErrorDetail {
  const base = e.instancePath.replace(/^\//, '').replace(/\//g, '.');
  if (e.keyword === 'additionalProperties') {
    const extra = String((e.params as { additionalProperty: string }).additionalProperty);
    return { field: base ? `${base}.${extra}` : extra, problem: 'is not a known field' };
  }
  if (e.keyword === 'required') {
    const missing = String((e.params as { missingProperty: string }).missingProperty);
    return { field: base ? `${base}.${missing}` : missing, problem: 'is required' };
  }
  return { field: base, problem: e.message ?? 'is invalid' };
}
