// domain/events.ts is what schemas/typescript.ts makes of schemas/events/: a schema and the type the
// code decides and folds with cannot drift apart.
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'mocha';
import { SCHEMAS_DIR } from '../../schemas/registry.ts';
import { EVENT_TYPES_FILE, eventTypesSource } from '../../schemas/typescript.ts';

describe('event types from the schemas', () => {
  it('domain/events.ts is what the schemas make (npm run schemas:types writes it)', () => {
    assert.equal(readFileSync(EVENT_TYPES_FILE, 'utf8'), eventTypesSource());
  });

  it('a schema changed without its type is a difference: a field retyped, a new version with a field added', () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-schemas-'));
    try {
      cpSync(join(SCHEMAS_DIR, 'events'), dir, { recursive: true });
      const file = join(dir, 'DeviceRenamed.v1.avsc');
      const schema = JSON.parse(readFileSync(file, 'utf8'));
      const before = eventTypesSource(dir);
      assert.equal(before, eventTypesSource(), 'the copy makes the same types');
      schema.fields[2] = { name: 'nick', type: 'int' };
      writeFileSync(file, JSON.stringify(schema));
      const retyped = eventTypesSource(dir);
      assert.notEqual(retyped, before);
      assert.match(retyped, /export interface DeviceRenamed \{[^}]*nick: number;/);
      // A new version is the current one: its fields are the type's.
      writeFileSync(
        join(dir, 'DeviceRenamed.v2.avsc'),
        JSON.stringify({
          ...schema,
          fields: [...schema.fields, { name: 'reason', type: 'string', default: '' }],
        }),
      );
      assert.match(eventTypesSource(dir), /export interface DeviceRenamed \{[^}]*reason: string;/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
