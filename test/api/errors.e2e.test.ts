// The one error shape, over real HTTP, for every status the API uses.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { PassThrough } from 'node:stream';
import { createApp } from '../../api/app.ts';
import { conflict, forbidden, unauthorized } from '../../api/errors.ts';
import { NOT_PROTO } from '../../api/routes.ts';
import { s } from '../../api/schema.ts';
import { createMetrics } from '../../infra/telemetry.ts';
import { listen, memoryLogger, request, testConfig } from '../harness.ts';

describe('error model (e2e)', () => {
  let url = '';
  let close: () => Promise<void>;
  const logs = memoryLogger('info');
  const writes: unknown[] = [];

  before(async () => {
    const config = testConfig({
      HUB_BODY_LIMIT_BYTES: '2048',
      HUB_RATE_LIMIT_PER_SECOND: '1',
      HUB_RATE_LIMIT_BURST: '1',
    });
    const { app } = createApp({
      config: { ...config, rateLimitPerSecond: 0 },
      logger: logs.logger,
      metrics: createMetrics(),
      readiness: {
        store: async () => {},
        broker: async () => Promise.reject(new Error('connection refused')),
      },
      mount: [
        (routes) => {
          routes.add({
            method: 'post',
            path: '/probe/items',
            tag: 'probe',
            summary: 'A route with a body schema.',
            body: s.object({
              required: ['name'],
              additionalProperties: false,
              properties: { name: s.string({ minLength: 1 }), size: s.integer({ minimum: 0 }) },
            }),
            responses: { 200: { description: 'ok' } },
            handler: (ctx, { body }) => {
              writes.push(body);
              ctx.body = { ok: true };
            },
          });
          routes.add({
            method: 'get',
            path: '/probe/private',
            tag: 'probe',
            summary: 'Needs a token.',
            responses: { 200: { description: 'ok' } },
            handler: (ctx) => {
              if (!ctx.get('authorization')) throw unauthorized();
              throw forbidden('The token lacks the scope webhooks.write.');
            },
          });
          routes.add({
            method: 'post',
            path: '/probe/conflict',
            tag: 'probe',
            summary: 'Always conflicts.',
            responses: { 200: { description: 'ok' } },
            handler: () => {
              throw conflict('The stream moved on.');
            },
          });
          routes.add({
            method: 'delete',
            path: '/probe/{id}',
            tag: 'probe',
            summary: 'A route with a parameter where another route has a path of its own.',
            responses: { 204: { description: 'deleted' } },
            handler: (ctx) => {
              ctx.status = 204;
            },
          });
          routes.add({
            method: 'put',
            path: '/probe/maps',
            tag: 'probe',
            summary: 'A map of strings whose values may be null.',
            body: s.object({
              properties: {
                meta: s.map({
                  propertyNames: { ...NOT_PROTO, maxLength: 10 },
                  additionalProperties: s.anyOf(s.string(), s.null()),
                }),
                policy: s.nullable(s.map()),
              },
            }),
            responses: { 200: { description: 'ok' } },
            handler: (ctx) => {
              ctx.body = { ok: true };
            },
          });
          routes.add({
            method: 'get',
            path: '/probe/stream',
            tag: 'probe',
            summary: 'An answer that streams for a while.',
            responses: { 200: { description: 'text' } },
            handler: (ctx) => {
              const body = new PassThrough();
              ctx.type = 'text/plain';
              ctx.body = body;
              body.write('part1-');
              setTimeout(() => body.end('part2'), 300);
            },
          });
          routes.add({
            method: 'post',
            path: '/probe/options',
            tag: 'probe',
            summary: 'A POST whose body has no required field.',
            body: s.object({ additionalProperties: false, properties: { a: s.string() } }),
            responses: { 200: { description: 'ok' } },
            handler: (ctx, { body }) => {
              ctx.body = body;
            },
          });
          routes.add({
            method: 'post',
            path: '/probe/action',
            tag: 'probe',
            summary: 'An action that declares no body and no query.',
            responses: { 200: { description: 'ok' } },
            handler: (ctx) => {
              writes.push('action');
              ctx.body = { ok: true };
            },
          });
          routes.add({
            method: 'get',
            path: '/probe/page',
            tag: 'probe',
            summary: 'A query with an integer.',
            query: s.object({ properties: { limit: s.integer({ minimum: 1, default: 5 }) } }),
            responses: { 200: { description: 'ok' } },
            handler: (ctx, { query }) => {
              ctx.body = { limit: query.limit };
            },
          });
          routes.add({
            method: 'get',
            path: '/probe/crash',
            tag: 'probe',
            summary: 'Throws an internal error.',
            responses: { 200: { description: 'ok' } },
            handler: () => {
              throw new Error('secret database detail at /srv/db.sqlite');
            },
          });
          routes.add({
            method: 'get',
            path: '/probe/challenge/{challenge}',
            tag: 'probe',
            summary: 'A path that carries a secret, and fails.',
            responses: { 200: { description: 'ok' } },
            handler: () => {
              throw new Error('failed on the way');
            },
          });
        },
      ],
    });
    ({ url, close } = await listen(app));
  });
  after(() => close());

  function assertShape(
    res: { status: number; body: Record<string, unknown>; headers: Headers },
    status: number,
    error: string,
  ) {
    assert.equal(res.status, status);
    assert.equal(res.body.code, status);
    assert.equal(res.body.error, error);
    assert.equal(typeof res.body.message, 'string');
    assert.ok((res.body.message as string).length > 0);
    assert.match(String(res.body.request_id), /^req_/);
    assert.equal(res.body.request_id, res.headers.get('x-request-id'));
    assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  }

  it('400 for malformed JSON, and nothing is written', async () => {
    const res = await request(`${url}/probe/items`, {
      method: 'POST',
      raw: '{"name": ',
      headers: { 'content-type': 'application/json' },
    });
    assertShape(res, 400, 'invalid_json');
    assert.deepEqual(writes, []);
  });

  it('401 without credentials, with WWW-Authenticate', async () => {
    const res = await request(`${url}/probe/private`);
    assertShape(res, 401, 'unauthorized');
    assert.equal(res.headers.get('www-authenticate'), 'Bearer');
  });

  it('403 naming what is missing', async () => {
    const res = await request(`${url}/probe/private`, { headers: { authorization: 'Bearer x' } });
    assertShape(res, 403, 'forbidden');
    assert.match(res.body.message, /webhooks\.write/);
  });

  it('404 for an unknown route, also under a known first segment', async () => {
    assertShape(await request(`${url}/no/such/route`), 404, 'not_found');
    assertShape(await request(`${url}/probe/no/such/route`), 404, 'not_found');
  });

  it('routes by path without regard to case (each first segment has its own router)', async () => {
    const res = await request(`${url}/PROBE/items`, { method: 'DELETE' });
    assertShape(res, 405, 'method_not_allowed');
  });

  it('405 for a known route with another method, with Allow', async () => {
    const res = await request(`${url}/probe/items`, { method: 'DELETE' });
    assertShape(res, 405, 'method_not_allowed');
    assert.match(res.headers.get('allow') ?? '', /POST/);
  });

  it("a path that is a route of its own is not taken by a parameter's route: 405 with its own Allow", async () => {
    for (const path of ['/probe/items', '/probe/items/', '/PROBE/Items']) {
      const res = await request(`${url}${path}`, { method: 'DELETE' });
      assertShape(res, 405, 'method_not_allowed');
      assert.equal(res.headers.get('allow'), 'POST', path);
    }
    assert.equal((await request(`${url}/probe/other`, { method: 'DELETE' })).status, 204);
  });

  it("422 details name a map's key, and a value that fits none of an anyOf once", async () => {
    const put = (raw: string) =>
      request(`${url}/probe/maps`, { method: 'PUT', raw, headers: { 'content-type': 'application/json' } });
    const typed = await put('{"meta":{"a":7}}');
    assertShape(typed, 422, 'validation_failed');
    assert.deepEqual(typed.body.details, [{ field: 'meta.a', problem: 'must be string or must be null' }]);
    const long = await put('{"meta":{"muchtoolongkey":"v"}}');
    assert.deepEqual(long.body.details, [
      { field: 'meta.muchtoolongkey', problem: 'key must NOT have more than 10 characters' },
    ]);
    const proto = await put('{"meta":{"__proto__":"v"}}');
    assert.deepEqual(proto.body.details, [{ field: 'meta.__proto__', problem: 'is not allowed as a key' }]);
  });

  it('409 for a conflict', async () => {
    assertShape(await request(`${url}/probe/conflict`, { method: 'POST' }), 409, 'conflict');
  });

  it('413 for a body over the limit, and nothing is written', async () => {
    const res = await request(`${url}/probe/items`, { method: 'POST', body: { name: 'x'.repeat(4096) } });
    assertShape(res, 413, 'payload_too_large');
    assert.deepEqual(writes, []);
  });

  it('413 also for a chunked body over the limit', async () => {
    const big = 'x'.repeat(8192);
    const stream = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(`{"name":"${big}"}`));
        c.close();
      },
    });
    const res = await fetch(`${url}/probe/items`, {
      method: 'POST',
      body: stream,
      headers: { 'content-type': 'application/json' },
      duplex: 'half',
    } as RequestInit);
    assert.equal(res.status, 413);
    assert.equal(((await res.json()) as { error: string }).error, 'payload_too_large');
  });

  it('415 for a wrong content type', async () => {
    const res = await request(`${url}/probe/items`, {
      method: 'POST',
      raw: 'name=x',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    assertShape(res, 415, 'unsupported_media_type');
    const near = await request(`${url}/probe/items`, {
      method: 'POST',
      raw: '{"name":"x"}',
      headers: { 'content-type': 'application/jsonx' },
    });
    assertShape(near, 415, 'unsupported_media_type');
  });

  it('takes JSON under any JSON media type: parameters, any case, +json', async () => {
    for (const type of ['Application/JSON; charset=utf-8', 'application/json', 'application/vnd.hub+json']) {
      const res = await request(`${url}/probe/items`, {
        method: 'POST',
        raw: '{"name":"x"}',
        headers: { 'content-type': type },
      });
      assert.equal(res.status, 200, type);
    }
    assert.deepEqual(writes.splice(0), [{ name: 'x' }, { name: 'x' }, { name: 'x' }]);
  });

  it('422 naming the field, for wrong types, unknown fields and missing fields', async () => {
    const wrongType = await request(`${url}/probe/items`, {
      method: 'POST',
      body: { name: 'a', size: 'big' },
    });
    assertShape(wrongType, 422, 'validation_failed');
    assert.deepEqual(wrongType.body.details, [{ field: 'size', problem: 'must be integer' }]);
    const unknown = await request(`${url}/probe/items`, {
      method: 'POST',
      body: { name: 'a', colour: 'red' },
    });
    assert.deepEqual(unknown.body.details, [{ field: 'colour', problem: 'is not a known field' }]);
    const missing = await request(`${url}/probe/items`, { method: 'POST', body: {} });
    assert.deepEqual(missing.body.details, [{ field: 'name', problem: 'is required' }]);
    const none = await request(`${url}/probe/items`, { method: 'POST' });
    assertShape(none, 422, 'validation_failed');
    assert.deepEqual(writes, []);
  });

  it('no body is {} on a POST whose schema requires no field; a 422 where it requires one, and on PUT', async () => {
    const options = await request(`${url}/probe/options`, { method: 'POST' });
    assert.equal(options.status, 200);
    assert.deepEqual(options.body, {});
    const replace = await request(`${url}/probe/maps`, { method: 'PUT' });
    assertShape(replace, 422, 'validation_failed'); // a bodiless replace would wipe what it replaces
    const none = await request(`${url}/probe/items`, { method: 'POST' });
    assertShape(none, 422, 'validation_failed');
    assert.equal(none.body.message, 'A JSON body is required.');
    const doc = (await request(`${url}/openapi.json`)).body;
    assert.equal(doc.paths['/probe/options'].post.requestBody.required, false, 'published as optional');
    assert.equal(doc.paths['/probe/maps'].put.requestBody.required, true);
    assert.equal(doc.paths['/probe/items'].post.requestBody.required, true);
  });

  it('a route that declares no body takes none: {} or nothing, else 422 (400, 415) and nothing done', async () => {
    assert.equal((await request(`${url}/probe/action`, { method: 'POST' })).status, 200);
    assert.equal((await request(`${url}/probe/action`, { method: 'POST', body: {} })).status, 200);
    const extra = await request(`${url}/probe/action`, { method: 'POST', body: { subscriptions: ['x'] } });
    assertShape(extra, 422, 'validation_failed');
    assert.deepEqual(extra.body.details, [{ field: 'subscriptions', problem: 'is not a known field' }]);
    const notJson = await request(`${url}/probe/action`, {
      method: 'POST',
      raw: 'not json',
      headers: { 'content-type': 'application/json' },
    });
    assertShape(notJson, 400, 'invalid_json');
    const text = await request(`${url}/probe/action`, {
      method: 'POST',
      raw: 'hello',
      headers: { 'content-type': 'text/plain' },
    });
    assertShape(text, 415, 'unsupported_media_type');
    assert.deepEqual(writes.splice(0), ['action', 'action']);
  });

  it('a query parameter no route declares is 422, and integers are written in decimal', async () => {
    const unknown = await request(`${url}/probe/page?limit=2&staus=failed`);
    assertShape(unknown, 422, 'validation_failed');
    assert.deepEqual(unknown.body.details, [{ field: 'staus', problem: 'is not a known field' }]);
    assertShape(await request(`${url}/probe/action?dry=1`, { method: 'POST' }), 422, 'validation_failed');
    for (const limit of ['0x10', '1e2', '%201', '1.0', '', 'ten']) {
      const r = await request(`${url}/probe/page?limit=${limit}`);
      assertShape(r, 422, 'validation_failed');
      assert.deepEqual(r.body.details, [{ field: 'limit', problem: 'must be a decimal integer' }], limit);
    }
    assert.deepEqual((await request(`${url}/probe/page?limit=16`)).body, { limit: 16 });
    assert.deepEqual((await request(`${url}/probe/page`)).body, { limit: 5 });
    assert.deepEqual(writes, []);
  });

  it('a JSON null is not an absent body, and a type of several names them all', async () => {
    const nul = await request(`${url}/probe/maps`, {
      method: 'PUT',
      raw: 'null',
      headers: { 'content-type': 'application/json' },
    });
    assertShape(nul, 422, 'validation_failed');
    assert.deepEqual(nul.body.details, [{ field: '', problem: 'must be object' }]);
    const several = await request(`${url}/probe/maps`, { method: 'PUT', body: { policy: [] } });
    assert.deepEqual(several.body.details, [{ field: 'policy', problem: 'must be object or null' }]);
  });

  it("a request Node's parser refuses is answered in the error shape too (400, 431), and closed", async () => {
    const raw = async (text: string) => {
      const socket = connect(Number(new URL(url).port), '127.0.0.1');
      socket.end(text);
      const chunks: Buffer[] = [];
      for await (const c of socket) chunks.push(c as Buffer);
      const answer = Buffer.concat(chunks).toString();
      const [head, body] = answer.split('\r\n\r\n') as [string, string];
      return { status: Number(head.split(' ')[1]), head, body: JSON.parse(body) };
    };
    const malformed = await raw('GET /probe/page HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n');
    assert.equal(malformed.status, 400);
    assert.match(malformed.head, /content-type: application\/json/i);
    assert.equal(malformed.body.error, 'bad_request');
    assert.equal(malformed.body.code, 400);
    assert.match(malformed.body.request_id, /^req_/);
    assert.match(malformed.head, new RegExp(`X-Request-Id: ${malformed.body.request_id}`));
    // On a keep-alive connection whose answer is still streaming, nothing is written into it.
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    let streamed = '';
    socket.on('data', (d) => {
      streamed += d;
    });
    socket.on('error', () => {});
    socket.write('GET /probe/stream HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((r) => setTimeout(r, 100));
    socket.write('GET /probe/page HTTP/1.1\r\nBad Header\r\n\r\n');
    await new Promise((r) => setTimeout(r, 500));
    socket.destroy();
    assert.match(streamed, /part1-/);
    assert.doesNotMatch(streamed, /HTTP\/1\.1 400/, 'an error answer was written into a streaming body');
    const huge = await raw(`GET /probe/page HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    assert.equal(huge.status, 431);
    assert.equal(huge.body.error, 'headers_too_large');
  });

  it('400 for a string that is not well-formed Unicode (a lone surrogate escape), key or value; a pair is fine', async () => {
    for (const body of [{ name: 'a\ud800b' }, { name: 'ok', 'k\udc00': 'v' }, { name: ['\udbff'] }]) {
      const res = await request(`${url}/probe/items`, { method: 'POST', body });
      assertShape(res, 400, 'invalid_json');
      assert.match(res.body.message, /well-formed Unicode/);
    }
    assert.deepEqual(writes, [], 'nothing written');
    const paired = await request(`${url}/probe/items`, {
      method: 'POST',
      body: { name: 'smile \ud83d\ude00' },
    });
    assert.equal(paired.status, 200);
    assert.deepEqual(writes, [{ name: 'smile 😀' }]);
    writes.length = 0;
  });

  it('accepts a valid body', async () => {
    const res = await request(`${url}/probe/items`, { method: 'POST', body: { name: 'ok', size: 3 } });
    assert.equal(res.status, 200);
    assert.deepEqual(writes, [{ name: 'ok', size: 3 }]);
    writes.length = 0;
  });

  it('500 reveals nothing internal, and the log has the detail', async () => {
    const res = await request(`${url}/probe/crash`);
    assertShape(res, 500, 'internal');
    assert.doesNotMatch(JSON.stringify(res.body), /secret|sqlite|srv/);
    assert.ok(
      logs.lines().some((l) => l.includes('secret database detail') && l.includes(res.body.request_id)),
    );
  });

  it("the log names a failed request's route, not its path, which may carry a secret", async () => {
    const res = await request(`${url}/probe/challenge/a1b2c3.SeCrEtVaLuE`);
    assertShape(res, 500, 'internal');
    const line = logs.lines().find((l) => l.includes(res.body.request_id) && l.includes('failed on the way'));
    assert.ok(line, 'logged');
    assert.equal(JSON.parse(line).route, '/probe/challenge/:challenge');
    assert.ok(!logs.lines().some((l) => l.includes('SeCrEtVaLuE')), 'the secret is in no log line');
  });

  it('503 from /readyz names the dependency that does not answer', async () => {
    const res = await request(`${url}/readyz`);
    assertShape(res, 503, 'not_ready');
    assert.deepEqual(res.body.details, [{ field: 'broker', problem: 'does not answer' }]);
    // The detail is for operators: in the log, not in the unauthenticated answer.
    assert.ok(logs.lines().some((l) => l.includes('connection refused') && l.includes('broker')));
  });

  it('echoes a sane incoming X-Request-Id and replaces an unsafe one', async () => {
    const mine = await request(`${url}/nope`, { headers: { 'x-request-id': 'abc-123' } });
    assert.equal(mine.body.request_id, 'abc-123');
    const unsafe = await request(`${url}/nope`, { headers: { 'x-request-id': 'a b<script>' } });
    assert.match(unsafe.body.request_id, /^req_/);
  });
});

describe('rate limit (e2e)', () => {
  it('answers 429 with Retry-After once the burst is spent, in the error shape', async () => {
    const config = testConfig({ HUB_RATE_LIMIT_PER_SECOND: '1', HUB_RATE_LIMIT_BURST: '3' });
    const { app } = createApp({ config, logger: memoryLogger().logger, metrics: createMetrics() });
    const { url, close } = await listen(app);
    try {
      const statuses: number[] = [];
      let last: Awaited<ReturnType<typeof request>> | undefined;
      for (let i = 0; i < 5; i++) {
        last = await request(`${url}/healthz`);
        statuses.push(last.status);
      }
      assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      assert.equal(last!.body.error, 'rate_limited');
      assert.equal(last!.body.code, 429);
      assert.ok(Number(last!.headers.get('retry-after')) >= 1);
    } finally {
      await close();
    }
  });
});

describe('store errors in the error shape (e2e)', () => {
  it('a concurrency conflict of the event store is a 409, a schema error a 422 naming the field', async () => {
    const { WrongExpectedRevisionError } = await import('../../infra/eventstore/port.ts');
    const { SchemaError } = await import('../../schemas/registry.ts');
    const { app } = createApp({
      config: testConfig(),
      logger: memoryLogger().logger,
      metrics: createMetrics(),
      mount: [
        (routes) => {
          routes.add({
            method: 'post',
            path: '/probe/stale',
            tag: 'probe',
            summary: 'Appends at a stale revision.',
            responses: { 200: { description: 'ok' } },
            handler: () => {
              throw new WrongExpectedRevisionError('device-1', 3, 5);
            },
          });
          routes.add({
            method: 'post',
            path: '/probe/schema',
            tag: 'probe',
            summary: 'Appends an invalid event.',
            responses: { 200: { description: 'ok' } },
            handler: () => {
              throw new SchemaError('DeviceCreated', 'nick', 'must be of type string');
            },
          });
        },
      ],
    });
    const { url, close } = await listen(app);
    try {
      const stale = await request(`${url}/probe/stale`, { method: 'POST' });
      assert.equal(stale.status, 409);
      assert.equal(stale.body.error, 'conflict');
      const invalid = await request(`${url}/probe/schema`, { method: 'POST' });
      assert.equal(invalid.status, 422);
      assert.equal(invalid.body.details[0].field, 'nick');
    } finally {
      await close();
    }
  });
});
