import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SchemaError, SchemaRegistry } from '../../schemas/registry.ts';

const FIXTURES = new URL('../fixtures/schemas/events', import.meta.url).pathname;

describe('schema registry (unit)', () => {
  it('loads every schema of the project, and every message type that crosses a process boundary', () => {
    const registry = SchemaRegistry.load();
    for (const name of ['ChangeRecord', 'WebhookEvent', 'DeliveryJob']) assert.ok(registry.has(name), name);
    for (const name of registry.names()) {
      const type = registry.type(name);
      // Every older version must be readable by the current one (Avro resolution).
      for (let v = 1; v < registry.currentVersion(name); v++) type.createResolver(registry.type(name, v));
    }
  });

  it('refuses invalid data with an error naming the field', () => {
    const registry = SchemaRegistry.load([FIXTURES]);
    const check = (value: unknown, field: string) =>
      assert.throws(
        () => registry.validate('DeviceMetaReported', value),
        (err: unknown) => err instanceof SchemaError && err.field === field && err.message.includes(field),
      );
    check({ device_id: 7, meta: {} }, 'device_id');
    check({ device_id: 'd1', meta: { temp: 21 } }, 'meta.temp');
    check({ device_id: 'd1', meta: {}, colour: 'red' }, 'colour');
    check({ meta: {} }, 'device_id');
    const apps = SchemaRegistry.load();
    assert.throws(
      () => apps.validate('AppUpdated', { app_id: 'a', fields: { nick: 'n', name: 'n', surprise: 1 } }),
      (err: unknown) => err instanceof SchemaError,
      'an undeclared field inside a nested record is refused too',
    );
    registry.validate('DeviceMetaReported', { device_id: 'd1', meta: { temp: '21' } });
    // An avsc record (a clone's), whose methods are enumerable on its prototype, is its fields alone.
    registry.validate(
      'DeviceMetaReported',
      registry.type('DeviceMetaReported').clone({ device_id: 'd1', meta: {} }),
    );
  });

  it('normalizes every schema as avsc would: defaults filled in, fields in the schema order', () => {
    const registry = SchemaRegistry.load();
    let fast = 0;
    for (const name of registry.names()) {
      const type = registry.type(name) as ReturnType<typeof registry.type> & {
        fields?: { name: string; defaultValue(): unknown }[];
      };
      if (!type.fields) continue;
      const full = type.random() as unknown as Record<string, unknown>;
      // The value complete, then without each field that has a default, and with keys reversed.
      const values = [
        full,
        Object.fromEntries(Object.entries(full).reverse()),
        ...type.fields
          .filter((f) => f.defaultValue() !== undefined)
          .map((f) => Object.fromEntries(Object.entries(full).filter(([k]) => k !== f.name))),
      ];
      for (const value of values) {
        const normalized = registry.normalize(name, value);
        assert.equal(JSON.stringify(normalized), JSON.stringify(type.clone(value)), name);
        if (Object.getPrototypeOf(normalized) === Object.prototype) fast++;
      }
    }
    // The records without nested records (most events) take the path that skips the encoding.
    assert.ok(fast > 20, `${fast} values normalized without the encoding`);
  });

  it('reads data written with the previous version of a schema as the current one', () => {
    // The writer only knows v1, as a process deployed before the schema changed would.
    const oldDir = mkdtempSync(join(tmpdir(), 'hub-schemas-'));
    copyFileSync(join(FIXTURES, 'DeviceMetaReported.v1.avsc'), join(oldDir, 'DeviceMetaReported.v1.avsc'));
    const writer = SchemaRegistry.load([oldDir]);
    assert.equal(writer.currentVersion('DeviceMetaReported'), 1);
    const bytes = writer.encode('DeviceMetaReported', { device_id: 'd1', meta: { fw: '1.2' } });

    const reader = SchemaRegistry.load([FIXTURES]);
    assert.equal(reader.currentVersion('DeviceMetaReported'), 2);
    assert.deepEqual(
      { ...(reader.decode('DeviceMetaReported', 1, bytes) as object) },
      { device_id: 'd1', meta: { fw: '1.2' }, removed: [], reported_by: null },
    );
    assert.deepEqual(
      { ...(reader.upcast('DeviceMetaReported', 1, { device_id: 'd2', meta: {} }) as object) },
      { device_id: 'd2', meta: {}, removed: [], reported_by: null },
    );
  });

  it('names an unknown schema', () => {
    assert.throws(
      () => SchemaRegistry.load([FIXTURES]).validate('Nope', {}),
      /Nope: field type is not a known schema/,
    );
  });
});
