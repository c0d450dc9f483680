// The catalogue of webhook event types (schemas/webhook-events.ts): its schemas compile strictly,
// hold their examples and refuse what is not of them, and docs/webhooks.md shows what it holds.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'mocha';
import { STEP_STATUSES } from '../../domain/trails.ts';
import {
  catalogueMarkdown,
  DOCS_FILE,
  type JsonSchema,
  STEP_STATUS_VALUES,
  WEBHOOK_EVENTS,
  withCatalogue,
} from '../../schemas/webhook-events.ts';
import { dataValidators } from '../processors/scenario.ts';

/** Every object schema within `schema`, with where it is. */
function objectsOf(schema: JsonSchema, at = ''): [string, JsonSchema][] {
  const found: [string, JsonSchema][] = schema.type === 'object' ? [[at || '(data)', schema]] : [];
  for (const [name, p] of Object.entries((schema.properties ?? {}) as Record<string, JsonSchema>))
    found.push(...objectsOf(p, `${at}.${name}`));
  if (schema.items) found.push(...objectsOf(schema.items as JsonSchema, `${at}[]`));
  return found;
}

describe('webhook event catalogue (unit)', () => {
  it('has the nine types of the specification, in its order', () => {
    assert.deepEqual(Object.keys(WEBHOOK_EVENTS), [
      'device.created',
      'device.updated',
      'device.deleted',
      'device.public.toggled',
      'device.device_meta.updated',
      'device.user_meta.updated',
      'step.created',
      'step.progress.changed',
      'step.status.changed',
    ]);
    assert.deepEqual(STEP_STATUS_VALUES, [...STEP_STATUSES]);
  });

  it('each schema compiles in strict mode, holds its example, and says of every object what else it allows', () => {
    const validators = dataValidators();
    for (const [type, { schema, example }] of Object.entries(WEBHOOK_EVENTS)) {
      const validate = validators[type]!;
      assert.ok(validate(example), `${type}: ${JSON.stringify(validate.errors)}`);
      for (const [at, object] of objectsOf(schema))
        assert.ok('additionalProperties' in object, `${type} ${at} does not say what else it allows`);
    }
  });

  it('refuses data with a field missing, a field more, or a field of another type', () => {
    const validators = dataValidators();
    for (const [type, { schema, example }] of Object.entries(WEBHOOK_EVENTS)) {
      const validate = validators[type]!;
      const [first] = schema.required as [string];
      const { [first]: _, ...missing } = example as Record<string, unknown>;
      assert.equal(validate(missing), false, `${type} without ${first}`);
      assert.equal(validate({ ...example, extra: 1 }), false, `${type} with a field more`);
      assert.equal(validate({ ...example, [first]: [] }), false, `${type} with ${first} an array`);
    }
    const meta = validators['device.device_meta.updated']!;
    const { example } = WEBHOOK_EVENTS['device.device_meta.updated'];
    assert.equal(meta({ ...example, changed: { temp: 21 } }), false, 'a metadata value is a string');
    const status = validators['step.status.changed']!;
    assert.equal(status({ rev: 1, status: 'FINISHED', prev_status: 'NEW' }), false, 'not a status');
  });

  it('docs/webhooks.md shows the catalogue (node schemas/webhook-events.ts writes it)', () => {
    const doc = readFileSync(DOCS_FILE, 'utf8');
    assert.equal(doc, withCatalogue(doc));
    assert.ok(doc.includes(catalogueMarkdown()));
    // An edit by hand between the markers is a difference.
    const edited = doc.replace('"greenhouse-sensor"', '"edited-by-hand"');
    assert.notEqual(edited, doc);
    assert.notEqual(withCatalogue(edited), edited);
    assert.throws(() => withCatalogue('# No markers'), /marker lines are missing/);
  });
});
