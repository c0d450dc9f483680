// /healthz, /readyz, /metrics and /openapi.json over real HTTP.
import assert from 'node:assert/strict';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { createApp } from '../../api/app.ts';
import { createMetrics } from '../../infra/telemetry.ts';
import { listen, memoryLogger, request, testConfig } from '../harness.ts';

describe('system endpoints (e2e)', () => {
  let url = '';
  let close: () => Promise<void>;
  before(async () => {
    const { app } = createApp({
      config: testConfig(),
      logger: memoryLogger().logger,
      metrics: createMetrics(),
      readiness: { store: async () => {} },
    });
    ({ url, close } = await listen(app));
  });
  after(() => close());

  it('GET /healthz answers 200', async () => {
    const res = await request(`${url}/healthz`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { status: 'ok' });
  });

  it('GET /readyz answers 200 when every dependency answers', async () => {
    const res = await request(`${url}/readyz`);
    assert.equal(res.status, 200);
    assert.deepEqual(res.body, { status: 'ready', checks: { store: 'ok' } });
  });

  it('GET /metrics has default metrics and the request histogram by route template and status', async () => {
    await request(`${url}/healthz`);
    await request(`${url}/missing`);
    const res = await request(`${url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /text\/plain/);
    assert.match(res.body, /hub_process_resident_memory_bytes \d+/);
    assert.match(
      res.body,
      /hub_http_request_duration_seconds_count\{method="GET",route="\/healthz",status="200"\} [1-9]/,
    );
    assert.match(
      res.body,
      /hub_http_request_duration_seconds_count\{method="GET",route="unmatched",status="404"\} [1-9]/,
    );
  });

  it('GET /openapi.json is an OpenAPI 3.1 document whose schemas compile', async () => {
    const res = await request(`${url}/openapi.json`);
    assert.equal(res.status, 200);
    assert.equal(res.body.openapi, '3.1.0');
    for (const path of ['/healthz', '/readyz', '/metrics', '/openapi.json'])
      assert.ok(res.body.paths[path]?.get, path);
    const ajv = new Ajv2020({ strict: false });
    ajv.compile(res.body.components.schemas.Error);
    for (const ops of Object.values(res.body.paths) as Record<string, { responses: object }>[]) {
      for (const op of Object.values(ops)) assert.ok(op.responses);
    }
  });
});
