// The TypeScript types of the events, written from their Avro schemas (the current version of
// each), so that a schema and the type the code folds and decides with cannot drift:
// `npm run schemas:types` writes domain/events.ts, and a unit test fails when that file is not
// what this makes of schemas/events/.
//
//   node schemas/typescript.ts          writes domain/events.ts
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SCHEMAS_DIR } from './registry.ts';

export const EVENT_TYPES_FILE = new URL('../domain/events.ts', import.meta.url).pathname;

// biome-ignore lint/suspicious/noExplicitAny: Avro JSON as written in the .avsc files
type Avro = any;

/** The current (highest) version of each event schema in `dir`, by name. */
function currentSchemas(dir: string): Map<string, Avro> {
  const current = new Map<string, { version: number; json: Avro }>();
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.avsc'))) {
    const m = /^(\w+)\.v(\d+)\.avsc$/.exec(file);
    if (!m) throw new Error(`schema file ${file} is not named <Name>.v<N>.avsc`);
    const version = Number(m[2]);
    if ((current.get(m[1]!)?.version ?? 0) < version)
      current.set(m[1]!, { version, json: JSON.parse(readFileSync(join(dir, file), 'utf8')) });
  }
  return new Map([...current].sort(([a], [b]) => a.localeCompare(b)).map(([name, { json }]) => [name, json]));
}

/** Records and enums named inside the events (an app's Scope), written once each and referred to
 * by name, as Avro refers to them. */
type Named = Map<string, string>;

/** The TypeScript type of an Avro type, as JSON decodes it. */
function typeOf(t: Avro, indent: string, named: Named): string {
  if (Array.isArray(t)) return t.map((u) => typeOf(u, indent, named)).join(' | ');
  if (typeof t === 'string') {
    switch (t) {
      case 'null':
        return 'null';
      case 'boolean':
        return 'boolean';
      case 'int':
      case 'long':
      case 'float':
      case 'double':
        return 'number';
      case 'string':
      case 'bytes':
        return 'string';
      default: {
        const name = t.split('.').at(-1)!;
        if (!named.has(name)) throw new Error(`the named type ${t} is used before its definition`);
        return name;
      }
    }
  }
  switch (t.type) {
    case 'array':
      return `Array<${typeOf(t.items, indent, named)}>`;
    case 'map':
      return `Record<string, ${typeOf(t.values, indent, named)}>`;
    case 'enum':
      named.set(t.name, (t.symbols as string[]).map((s) => `'${s}'`).join(' | '));
      return t.name;
    case 'record':
      named.set(t.name, fields(t, '  ', named));
      return t.name;
    default:
      return typeOf(t.type, indent, named);
  }
}

function fields(record: Avro, indent: string, named: Named): string {
  const lines = (record.fields as Avro[]).map((f) => {
    const doc = f.doc ? `${indent}/** ${f.doc} */\n` : '';
    return `${doc}${indent}${f.name}: ${typeOf(f.type, indent, named)};`;
  });
  return `{\n${lines.join('\n')}\n${indent.slice(2)}}`;
}

/** The source of domain/events.ts for the schemas in `dir`. */
export function eventTypesSource(dir = join(SCHEMAS_DIR, 'events')): string {
  const schemas = currentSchemas(dir);
  const out = [
    '// Generated from schemas/events/*.avsc (the current version of each) by `npm run schemas:types`',
    '// (schemas/typescript.ts): do not edit. test/schemas/event-types.unit.test.ts fails when this file',
    '// and the schemas differ.',
    '',
  ];
  const named: Named = new Map();
  const events: string[] = [];
  for (const [name, schema] of schemas) {
    if (schema.doc) events.push(`/** ${schema.doc} */`);
    events.push(`export interface ${name} ${fields(schema, '  ', named)}`, '');
  }
  for (const [name, type] of named)
    out.push(
      type.startsWith('{') ? `export interface ${name} ${type}` : `export type ${name} = ${type};`,
      '',
    );
  out.push(...events);
  out.push(
    '/** The data of every event of the store, by its type. */',
    'export interface EventData {',
    ...[...schemas.keys()].map((name) => `  ${name}: ${name};`),
    '}',
    '',
    'export type EventType = keyof EventData;',
    '',
    '/** An event as a decision returns it: `DomainEvent<"DeviceRenamed" | …>` is the union of those',
    ' * types, each with its data, so that `switch (e.type)` narrows `e.data`. */',
    'export type DomainEvent<T extends EventType = EventType> = {',
    '  [K in T]: { type: K; data: EventData[K]; id?: string };',
    '}[T];',
    '',
    '/** An event as `evolve` folds it: with the time it was recorded (ms). */',
    'export type FoldedEvent<T extends EventType = EventType> = DomainEvent<T> & { created: number };',
    '',
  );
  return out.join('\n');
}

if (import.meta.main) {
  writeFileSync(EVENT_TYPES_FILE, eventTypesSource());
  console.log(`wrote ${EVENT_TYPES_FILE}`);
}
