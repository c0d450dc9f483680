// The catalogue of event types end to end on the embedded profile: GET /webhooks/event-types and
// /openapi.json publish the catalogue's schemas and examples, and every event the hub derives
// from real API calls (all nine types, a claimed device, metadata keys removed) is of its type's
// schema.
import assert from 'node:assert/strict';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { WEBHOOK_EVENTS } from '../../schemas/webhook-events.ts';
import { signup, startHub, type TestHub, type User } from '../hub.ts';
import { dataValidators, everyEventType, logOf, schemaFailures } from '../processors/scenario.ts';

describe('webhook event types with schemas (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  let alice: User;

  before(async () => {
    hub = await startHub({ HUB_EMBEDDED_STATE: 'memory' });
    alice = await signup(hub, 'alice');
  });
  after(async () => {
    await hub?.stop();
  });

  it("answers each type's description, the JSON Schema of its data and an example, as /openapi.json publishes them", async () => {
    const r = await hub.call('GET', '/webhooks/event-types', { token: alice.token });
    assert.equal(r.status, 200);
    const items: { type: string; schema: object; example: object }[] = r.body.items;
    assert.deepEqual(
      items,
      Object.entries(WEBHOOK_EVENTS).map(([type, e]) => ({
        type,
        description: e.description,
        schema: e.schema,
        example: e.example,
      })),
    );
    const doc = (await hub.call('GET', '/openapi.json')).body;
    // The answer is of the schema the document publishes for it, no field more.
    const answer = doc.paths['/webhooks/event-types'].get.responses['200'].content['application/json'].schema;
    const ajv = new Ajv2020({ strict: false });
    assert.ok(ajv.validate(answer, r.body), ajv.errorsText());
    assert.deepEqual(Object.keys(answer.properties.items.items.properties), [
      'type',
      'description',
      'schema',
      'example',
    ]);
    assert.deepEqual(Object.keys(doc.webhooks), Object.keys(WEBHOOK_EVENTS));
    for (const { type, schema, example } of items) {
      const body = doc.webhooks[type].post.requestBody.content['application/json'];
      const ref = body.schema.properties.data.$ref as string;
      assert.deepEqual(doc.components.schemas[ref.replace('#/components/schemas/', '')], schema, type);
      assert.deepEqual(body.example.data, example, type);
      assert.equal(body.example.type, type);
      // The whole delivery published, its $ref resolved in the document: the example is of it.
      const payload = { ...body.schema, components: doc.components };
      assert.ok(ajv.validate(payload, body.example), `${type}: ${ajv.errorsText()}`);
      assert.equal(ajv.validate(payload, { ...body.example, data: { ...example, extra: 1 } }), false, type);
    }
  });

  it("every derived event is of its type's schema: all nine types, a claimed device, metadata removed", async () => {
    const { device, expected } = await everyEventType(hub, alice);
    const events = await logOf(hub, alice, device.prn, expected.length);
    assert.deepEqual(
      events.map((e) => e.type),
      expected,
    );
    // A device that registered itself, claimed: device.created of the claim; then user metadata
    // set and a key of it removed, and a step that fails.
    const ok = async (method: string, path: string, body: unknown, token: string | null = alice.token) => {
      const res = await hub.call(method, path, { token: token ?? undefined, body });
      assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body;
    };
    const self = await ok('POST', '/devices', { nick: 'bootstrapped', 'device-meta': { fw: '2.0' } }, null);
    await ok('POST', `/devices/${self.id}/claim`, { challenge: self.challenge });
    const deviceToken = (await ok('POST', '/auth/login', { username: self.prn, password: self.secret }, null))
      .token as string;
    await ok('PUT', `/devices/${self.id}/user-meta`, { site: 'lab', room: '4' });
    await ok('PUT', `/devices/${self.id}/user-meta`, { site: 'field' });
    await ok('POST', `/trails/${self.id}/steps`, { state: { os: 'v2' } });
    await ok('PUT', `/trails/${self.id}/steps/0/progress`, { progress: 100, status: 'ERROR' }, deviceToken);
    const claimed = await logOf(hub, alice, self.prn, 6);
    assert.deepEqual(
      claimed.map((e) => e.type),
      [
        'device.created',
        'device.user_meta.updated',
        'device.user_meta.updated',
        'step.created',
        'step.progress.changed',
        'step.status.changed',
      ],
    );
    const all = [...events, ...claimed];
    assert.deepEqual(new Set(all.map((e) => e.type)), new Set(Object.keys(WEBHOOK_EVENTS)), 'every type');
    const validators = dataValidators();
    assert.deepEqual(schemaFailures(all, validators), []);
    // The check fails on an event whose data is not of its schema: a field more, one missing.
    for (const e of all) {
      const [first] = Object.keys(e.data);
      const { [first!]: _, ...missing } = e.data;
      assert.equal(schemaFailures([{ ...e, data: { ...e.data, extra: 1 } }], validators).length, 1);
      assert.equal(schemaFailures([{ ...e, data: missing }], validators).length, 1);
    }
  });
});
