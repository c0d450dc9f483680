// The catalogue of webhook event types (the specification's section Events): for each type, when it
// fires, the JSON Schema (2020-12, the dialect of OpenAPI 3.1) of its `data`, and an example of
// that `data`. The one source: GET /webhooks/event-types answers it, /openapi.json publishes it,
// docs/webhooks.md's section is written from it, and test/webhooks/event-types.e2e.test.ts checks
// every event the hub derives against it. Every object of a schema says what else it allows
// (`additionalProperties`), so that a field derived and not described here is a failure too.
//
//   node schemas/webhook-events.ts      writes the catalogue into docs/webhooks.md

import { readFileSync, writeFileSync } from 'node:fs';

/** A JSON Schema, as plain JSON. */
export type JsonSchema = Record<string, unknown>;

export interface EventTypeEntry {
  /** When the event fires. */
  description: string;
  /** The JSON Schema of the event's `data`. */
  schema: JsonSchema;
  /** A `data` of that schema. */
  example: Record<string, unknown>;
}

const DEVICE_ID = { type: 'string', pattern: '^[a-f0-9]{24}$', description: 'The device id.' };
const DEVICE = {
  type: 'string',
  pattern: '^prn:::devices:/[a-f0-9]{24}$',
  description: 'The PRN of the device the event is about.',
};
const NICK = { type: 'string', description: "The device's nick, unique among its owner's devices." };
const META_MAP = { type: 'object', additionalProperties: { type: 'string' } };
const REV = { type: 'integer', minimum: 0, description: "The step's revision in the device's trail." };
const PROGRESS = { type: 'integer', minimum: 0, maximum: 100 };
/** The step statuses of the specification (domain/trails.ts STEP_STATUSES; a test holds them equal). */
export const STEP_STATUS_VALUES = ['NEW', 'STARTED', 'DONE', 'UPDATED', 'WONTGO', 'ERROR'];
const STATUS = { type: 'string', enum: STEP_STATUS_VALUES };

/** An object of exactly these properties, every one of them required. */
const exactly = (properties: Record<string, JsonSchema>): JsonSchema => ({
  type: 'object',
  required: Object.keys(properties),
  additionalProperties: false,
  properties,
});

/** The data of the two metadata events: `field` names the whole map after the change. */
const metaChange = (field: 'device_meta' | 'user_meta', owner: string): JsonSchema =>
  exactly({
    device: DEVICE,
    keys: {
      type: 'array',
      items: { type: 'string' },
      uniqueItems: true,
      description: 'The keys changed and removed, sorted.',
    },
    changed: { ...META_MAP, description: 'Each key set, with its new value.' },
    removed: { type: 'array', items: { type: 'string' }, description: 'The keys removed.' },
    [field]: { ...META_MAP, description: `The whole ${owner} metadata after the change.` },
  });

const EXAMPLE_ID = '6650b2c4e1f0a93d7c2b4e81';
const EXAMPLE_DEVICE = `prn:::devices:/${EXAMPLE_ID}`;

/** The catalogue, in the specification's order. Its keys are the event types. */
export const WEBHOOK_EVENTS = {
  'device.created': {
    description:
      'A device record was first observed by its owner: created or registered by its owner, or claimed (the new owner observes it for the first time).',
    schema: exactly({
      id: DEVICE_ID,
      prn: { ...DEVICE, description: 'The device PRN.' },
      nick: NICK,
      owner: { type: 'string', pattern: '^prn:', description: "The owner's account PRN." },
      public: { type: 'boolean', description: 'Whether the device is public.' },
      user_meta: { ...META_MAP, description: 'User-set metadata (tags, labels).' },
      device_meta: { ...META_MAP, description: 'Device-reported metadata.' },
    }),
    example: {
      id: EXAMPLE_ID,
      prn: EXAMPLE_DEVICE,
      nick: 'greenhouse-sensor',
      owner: 'prn:::accounts:/6650b1f0e1f0a93d7c2b4d02',
      public: false,
      user_meta: { site: 'lab' },
      device_meta: { fw: '1.0' },
    },
  },
  'device.updated': {
    description:
      'Device fields changed: its nick, the only one besides flags and metadata; not sent for bookkeeping timestamps alone.',
    schema: exactly({
      device: DEVICE,
      changed: { ...exactly({ nick: NICK }), description: 'The fields changed, with their new values.' },
      previous: { ...exactly({ nick: NICK }), description: 'The same fields, with their values before.' },
    }),
    example: {
      device: EXAMPLE_DEVICE,
      changed: { nick: 'greenhouse-2' },
      previous: { nick: 'greenhouse-sensor' },
    },
  },
  'device.deleted': {
    description: "A device was marked as garbage: the device's last event.",
    schema: exactly({ device: DEVICE, nick: { ...NICK, description: "The device's last nick." } }),
    example: { device: EXAMPLE_DEVICE, nick: 'greenhouse-2' },
  },
  'device.public.toggled': {
    description: "A device's public flag flipped (setting it to the value it has sends nothing).",
    schema: exactly({ device: DEVICE, public: { type: 'boolean', description: 'The flag now.' } }),
    example: { device: EXAMPLE_DEVICE, public: true },
  },
  'device.device_meta.updated': {
    description:
      'Device-reported metadata changed: the keys changed or removed (a report that changes nothing sends nothing).',
    schema: metaChange('device_meta', 'device-reported'),
    example: {
      device: EXAMPLE_DEVICE,
      keys: ['fw', 'temp'],
      changed: { temp: '21.5' },
      removed: ['fw'],
      device_meta: { temp: '21.5' },
    },
  },
  'device.user_meta.updated': {
    description: 'User-set metadata (tags, labels) changed: the keys changed or removed.',
    schema: metaChange('user_meta', 'user-set'),
    example: {
      device: EXAMPLE_DEVICE,
      keys: ['room', 'site'],
      changed: { site: 'field' },
      removed: ['room'],
      user_meta: { site: 'field' },
    },
  },
  'step.created': {
    description: 'A new trail step (revision) was pushed.',
    schema: exactly({
      device: DEVICE,
      rev: REV,
      commit_msg: { type: 'string', description: "The step's commit message." },
      progress: { const: 0, description: 'A new step has made no progress.' },
      status: { const: 'NEW', description: 'A new step is NEW.' },
    }),
    example: { device: EXAMPLE_DEVICE, rev: 3, commit_msg: 'firmware 1.1', progress: 0, status: 'NEW' },
  },
  'step.progress.changed': {
    description: "A step's progress changed.",
    schema: exactly({
      device: DEVICE,
      rev: REV,
      progress: { ...PROGRESS, description: 'The progress now, 0 to 100.' },
      prev_progress: { ...PROGRESS, description: 'The progress before.' },
    }),
    example: { device: EXAMPLE_DEVICE, rev: 3, progress: 40, prev_progress: 0 },
  },
  'step.status.changed': {
    description: 'A step moved between NEW, STARTED, DONE, UPDATED, WONTGO and ERROR.',
    // Exactly the specification's three fields.
    schema: exactly({
      rev: REV,
      status: { ...STATUS, description: 'The status now.' },
      prev_status: { ...STATUS, description: 'The status before.' },
    }),
    example: { rev: 3, status: 'DONE', prev_status: 'STARTED' },
  },
} satisfies Record<string, EventTypeEntry>;

export type WebhookEventType = keyof typeof WEBHOOK_EVENTS;

// docs/webhooks.md: the catalogue between these two lines is written here.
const BEGIN =
  '<!-- The catalogue, written from schemas/webhook-events.ts by `node schemas/webhook-events.ts`: edit it there. -->';
const END = '<!-- End of the catalogue. -->';
export const DOCS_FILE = new URL('../docs/webhooks.md', import.meta.url).pathname;

/** A property's type as the docs' tables say it. */
function typeText(schema: JsonSchema): string {
  if ('const' in schema) return `\`${JSON.stringify(schema.const)}\``;
  if (Array.isArray(schema.enum)) return `one of ${schema.enum.map((v) => `\`${v}\``).join(', ')}`;
  if (schema.type === 'array') return `array of ${typeText(schema.items as JsonSchema)}`;
  if (schema.type === 'object' && schema.additionalProperties && !schema.properties)
    return `map of key → ${typeText(schema.additionalProperties as JsonSchema)}`;
  if (schema.type === 'object')
    return `object: ${Object.keys(schema.properties as object)
      .map((k) => `\`${k}\``)
      .join(', ')}`;
  if (schema.type === 'integer') {
    const [min, max] = [schema.minimum, schema.maximum];
    if (min !== undefined && max !== undefined) return `integer, ${min} to ${max}`;
    return min !== undefined ? `integer ≥ ${min}` : 'integer';
  }
  return String(schema.type) + (schema.pattern ? ` (\`${schema.pattern}\`)` : '');
}

/** JSON indented by two, a value that fits on one line written on one (a schema's `required`). */
function pretty(value: unknown, indent = ''): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  const inner = `${indent}  `;
  const [open, close, parts] = Array.isArray(value)
    ? ['[', ']', value.map((v) => pretty(v, inner))]
    : ['{', '}', Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pretty(v, inner)}`)];
  const flat = `${open}${parts.join(', ')}${close}`;
  if (indent.length + flat.length <= 96 && !flat.includes('\n')) return flat;
  return `${open}\n${parts.map((p) => inner + p).join(',\n')}\n${indent}${close}`;
}

const json = (value: unknown) => ['```json', pretty(value), '```'];

/** The catalogue as docs/webhooks.md shows it, between its two marker lines. */
export function catalogueMarkdown(): string {
  const entries = Object.entries(WEBHOOK_EVENTS) as [string, EventTypeEntry][];
  const out = [
    BEGIN,
    '',
    '| Type | Fires when | `data` |',
    '|---|---|---|',
    ...entries.map(
      ([type, e]) =>
        `| [\`${type}\`](#${type.replace(/\./g, '')}) | ${e.description} | ${Object.keys(
          e.schema.properties as object,
        )
          .map((k) => `\`${k}\``)
          .join(', ')} |`,
    ),
  ];
  for (const [type, e] of entries) {
    const properties = e.schema.properties as Record<string, JsonSchema>;
    out.push(
      '',
      `### \`${type}\``,
      '',
      e.description,
      '',
      '| Field | Type | Meaning |',
      '|---|---|---|',
      ...Object.entries(properties).map(
        ([name, p]) => `| \`${name}\` | ${typeText(p)} | ${p.description ?? ''} |`,
      ),
      '',
      'Example `data`:',
      '',
      ...json(e.example),
      '',
      '<details><summary>JSON Schema of <code>data</code></summary>',
      '',
      ...json(e.schema),
      '',
      '</details>',
    );
  }
  out.push('', END);
  return out.join('\n');
}

/** `markdown` with the catalogue between its marker lines written afresh. */
export function withCatalogue(markdown: string): string {
  const begin = markdown.indexOf(BEGIN);
  const end = markdown.indexOf(END);
  if (begin < 0 || end < begin)
    throw new Error(`the catalogue's marker lines are missing: ${BEGIN} … ${END}`);
  return markdown.slice(0, begin) + catalogueMarkdown() + markdown.slice(end + END.length);
}

if (import.meta.main) {
  writeFileSync(DOCS_FILE, withCatalogue(readFileSync(DOCS_FILE, 'utf8')));
  console.log(`wrote the event types into ${DOCS_FILE}`);
}
