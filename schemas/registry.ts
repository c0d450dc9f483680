// Avro schemas (avsc) of every domain event and every message that crosses a process boundary.
// Files are `<dir>/<Name>.v<N>.avsc`; the highest N is current. Data written with an older
// version is read through Avro schema resolution, so schemas evolve by Avro's rules (new fields
// need defaults). A schema may refer to the named types of other files in its folder, like
// DeliveryJob to WebhookEvent.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import avro from 'avsc';

export const SCHEMAS_DIR = new URL('.', import.meta.url).pathname;

export class SchemaError extends Error {
  readonly field: string;
  constructor(schema: string, field: string, problem: string) {
    super(`${schema}: ${field ? `field ${field} ` : ''}${problem}`);
    this.name = 'SchemaError';
    this.field = field;
  }
}

interface Versions {
  current: number;
  types: Map<number, avro.Type>;
}

export class SchemaRegistry {
  private readonly schemas = new Map<string, Versions>();
  private readonly resolvers = new Map<string, avro.Resolver>();

  /** Loads every .avsc file under the folders given (default: this folder's events/ and topics/). */
  static load(dirs: string[] = [join(SCHEMAS_DIR, 'events'), join(SCHEMAS_DIR, 'topics')]): SchemaRegistry {
    const registry = new SchemaRegistry();
    const registered: Record<string, avro.Type> = {};
    const owned = new Map<string, Set<string>>(); // schema name -> full names its files define
    for (const dir of dirs) {
      let files: string[];
      try {
        files = readdirSync(dir).filter((f) => f.endsWith('.avsc'));
      } catch {
        continue;
      }
      let pending = files
        .map((file) => {
          const m = /^(\w+)\.v(\d+)\.avsc$/.exec(file);
          if (!m) throw new Error(`schema file ${file} is not named <Name>.v<N>.avsc`);
          return {
            file,
            name: m[1]!,
            version: Number(m[2]),
            json: JSON.parse(readFileSync(join(dir, file), 'utf8')),
          };
        })
        .sort((a, b) => a.version - b.version || a.name.localeCompare(b.name));
      // A schema may name types of other files: parse in passes until every reference resolves.
      while (pending.length > 0) {
        const waiting: typeof pending = [];
        let lastError: Error | undefined;
        for (const item of pending) {
          // Each file parses against the named types of other files, not its own earlier
          // versions (which may define the same names).
          const own = owned.get(item.name) ?? new Set<string>();
          const visible = Object.fromEntries(Object.entries(registered).filter(([n]) => !own.has(n)));
          const before = new Set(Object.keys(visible));
          let type: avro.Type;
          try {
            type = avro.Type.forSchema(item.json, { registry: visible });
          } catch (err) {
            if (!/undefined type name/.test((err as Error).message)) throw err;
            lastError = new Error(`${item.file}: ${(err as Error).message}`);
            waiting.push(item);
            continue;
          }
          for (const [n, t] of Object.entries(visible)) {
            if (before.has(n)) continue;
            own.add(n);
            registered[n] = t; // the newest version's named types are the ones others see
          }
          owned.set(item.name, own);
          const entry = registry.schemas.get(item.name) ?? { current: 0, types: new Map() };
          entry.types.set(item.version, type);
          entry.current = Math.max(entry.current, item.version);
          registry.schemas.set(item.name, entry);
        }
        if (waiting.length === pending.length) throw lastError;
        pending = waiting;
      }
    }
    return registry;
  }

  names(): string[] {
    return [...this.schemas.keys()].sort();
  }

  has(name: string): boolean {
    return this.schemas.has(name);
  }

  currentVersion(name: string): number {
    return this.entry(name).current;
  }

  type(name: string, version = this.currentVersion(name)): avro.Type {
    const type = this.entry(name).types.get(version);
    if (!type) throw new SchemaError(name, '', `has no version ${version}`);
    return type;
  }

  /** Throws SchemaError naming the first field that does not match the current schema. */
  validate(name: string, value: unknown): void {
    const type = this.type(name);
    if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
      const unknown = unknownField(type, value as Record<string, unknown>);
      if (unknown) throw new SchemaError(name, unknown, 'is not in the schema');
    }
    let first: { path: string; expected: string } | undefined;
    const ok = type.isValid(value, {
      noUndeclaredFields: true,
      errorHook: (path: string[], _v: unknown, t: avro.Type) => {
        first ??= { path: path.join('.'), expected: t.typeName };
      },
    });
    if (ok) return;
    if (value === null || typeof value !== 'object') throw new SchemaError(name, '', 'must be a record');
    throw new SchemaError(name, first?.path ?? '', `must be of type ${first?.expected ?? 'record'}`);
  }

  /** The value as the current schema has it: missing fields with defaults filled in. */
  normalize(name: string, value: unknown): unknown {
    const type = this.type(name);
    const fields = flatFields(type);
    // A record whose fields hold no records of their own (most events) takes its defaults at the
    // top alone: filled in here, in the schema's field order, as avsc's clone would; clone goes
    // through the binary encoding, an allocation and a copy for each event appended.
    if (!fields || value === null || typeof value !== 'object') return type.clone(value);
    const given = value as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    for (const f of fields) {
      const v = given[f.name];
      out[f.name] = v === undefined ? f.defaultValue() : v;
    }
    return out;
  }

  encode(name: string, value: unknown): Buffer {
    return this.type(name).toBuffer(value);
  }

  /** Reads bytes written with `version` of the schema as the current version. */
  decode(name: string, version: number, bytes: Buffer): unknown {
    const current = this.type(name);
    if (version === this.currentVersion(name)) return current.fromBuffer(bytes);
    return current.fromBuffer(bytes, this.resolver(name, version));
  }

  /** Brings a value of an older version up to the current one (e.g. stored JSON event data). */
  upcast(name: string, version: number, value: unknown): unknown {
    if (version === this.currentVersion(name)) return value;
    return this.decode(name, version, this.type(name, version).toBuffer(value));
  }

  private resolver(name: string, version: number): avro.Resolver {
    const key = `${name}@${version}`;
    let resolver = this.resolvers.get(key);
    if (!resolver) {
      resolver = this.type(name).createResolver(this.type(name, version));
      this.resolvers.set(key, resolver);
    }
    return resolver;
  }

  private entry(name: string): Versions {
    const entry = this.schemas.get(name);
    if (!entry) throw new SchemaError(name, 'type', 'is not a known schema');
    return entry;
  }
}

type Field = { name: string; type: avro.Type; defaultValue(): unknown };
const fieldsOf = (type: avro.Type) => (type as unknown as { fields?: Field[] }).fields;

/** Each record type's field names, worked out once. */
const fieldNames = new WeakMap<avro.Type, Set<string>>();
function unknownField(type: avro.Type, value: Record<string, unknown>): string | undefined {
  const fields = fieldsOf(type);
  if (!fields) return undefined;
  let known = fieldNames.get(type);
  if (!known) {
    known = new Set(fields.map((f) => f.name));
    fieldNames.set(type, known);
  }
  // Own keys alone: an avsc record (a clone's) has its methods enumerable on its prototype.
  for (const k of Object.keys(value)) if (!known.has(k)) return k;
  return undefined;
}

/** A record's fields when none of them holds a record, enum, fixed or bytes (values that a
 * shallow copy would share or that need converting), else undefined; worked out once per type. */
const flat = new WeakMap<avro.Type, Field[] | null>();
function flatFields(type: avro.Type): Field[] | undefined {
  let fields = flat.get(type);
  if (fields === undefined) {
    const all = fieldsOf(type);
    fields = all?.every((f) => plain(f.type)) ? all : null;
    flat.set(type, fields);
  }
  return fields ?? undefined;
}
function plain(type: avro.Type): boolean {
  const t = type as unknown as {
    typeName: string;
    types?: avro.Type[];
    valuesType?: avro.Type;
    itemsType?: avro.Type;
  };
  switch (t.typeName) {
    case 'null':
    case 'boolean':
    case 'int':
    case 'long':
    case 'float':
    case 'double':
    case 'string':
      return true;
    case 'map':
      return plain(t.valuesType!);
    case 'array':
      return plain(t.itemsType!);
    case 'union:unwrapped':
      return t.types!.every(plain);
    default:
      return false;
  }
}
