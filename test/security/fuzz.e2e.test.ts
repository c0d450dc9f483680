// Schema-driven fuzzing: requests generated from /openapi.json for every operation (bodies from
// each schema, then broken: wrong types, unknown and missing fields, oversized and boundary values,
// hostile strings, malformed JSON, wrong content types; hostile path ids and query values; every
// kind of caller). No answer may be a 5xx, every refusal is in the one error shape, a refused
// request appends nothing, the hub stays healthy, and no log line or webhook carries a secret.
//
// HUB_FUZZ_REQUESTS (default 10,000) and HUB_FUZZ_SEED (default 1) reproduce a run.
import assert from 'node:assert/strict';
import {
  buildWorld,
  documentedOperations,
  type Operation,
  type Schema,
  saBasic,
  type World,
} from './world.ts';

const REQUESTS = Number(process.env.HUB_FUZZ_REQUESTS ?? 10_000);
const SEED = Number(process.env.HUB_FUZZ_SEED ?? 1);

/** Mulberry32: small, seeded, reproducible. */
class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

const HOSTILE_STRINGS = [
  '',
  ' ',
  '\u0000',
  '\ud800',
  '💥🔥',
  '‮evil',
  '../../etc/passwd',
  '<script>alert(1)</script>',
  "' OR 1=1 --",
  // biome-ignore lint/suspicious/noTemplateCurlyInString: a log-injection probe, meant literally
  '${jndi:ldap://x}',
  '%00',
  'null',
  '-1',
  '1e309',
  'prn:::devices:/',
  'a'.repeat(5000),
];

/** Path segments as sent on the wire: bad percent-encodings, traversal, NUL, huge, PRN-like. */
const HOSTILE_PATH_SEGMENTS = [
  '%ZZ',
  '%',
  '%00',
  '..%2F..%2Fetc%2Fpasswd',
  '%ED%A0%80',
  '%F0%9F%92%A5',
  'a'.repeat(5000),
  '-1',
  '%20',
  'prn%3A%3A%3Adevices%3A%2F',
  '__proto__',
];

/** Strings that satisfy common patterns of the document; the first that matches is used. */
const PATTERN_CANDIDATES = [
  'fuzz-nick-1',
  'prn:::auth:/reporting',
  'prn:::devices:/x',
  'https://127.0.0.1/hook',
  'device.created',
  'devices',
  'abc',
  'A1',
  '2026-11-21T10:00:00.123456789Z',
];

function sample(schema: Schema, rng: Rng, w: World, depth = 0): unknown {
  if (!schema || depth > 6) return null;
  if ('const' in schema) return schema.const;
  if (schema.enum) return rng.pick(schema.enum);
  if (schema.oneOf || schema.anyOf) return sample(rng.pick(schema.oneOf ?? schema.anyOf), rng, w, depth + 1);
  const type = Array.isArray(schema.type) ? rng.pick(schema.type) : schema.type;
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const props = Object.entries((schema.properties ?? {}) as Record<string, Schema>);
      for (const [name, prop] of props)
        if ((schema.required ?? []).includes(name) || rng.chance(0.5))
          out[name] = sampleNamed(name, prop, rng, w, depth);
      if (props.length === 0 && schema.additionalProperties && rng.chance(0.7))
        for (let i = rng.int(4); i > 0; i--)
          out[`k${rng.int(100)}`] = sample(schema.additionalProperties, rng, w, depth + 1);
      return out;
    }
    case 'array': {
      const n = Math.min(rng.int(4), schema.maxItems ?? 3);
      return Array.from({ length: n }, () => sample(schema.items ?? {}, rng, w, depth + 1));
    }
    case 'integer':
    case 'number': {
      const min = schema.minimum ?? 0;
      const max = schema.maximum ?? min + 1000;
      const n = min + rng.int(Math.max(1, Math.min(max - min + 1, 1e6)));
      return type === 'integer' ? n : n + rng.next();
    }
    case 'boolean':
      return rng.chance(0.5);
    case 'null':
      return null;
    case 'string': {
      if (schema.pattern) {
        const re = new RegExp(schema.pattern);
        const fit = PATTERN_CANDIDATES.find((c) => re.test(c));
        if (fit) return fit;
      }
      if (schema.format === 'uri' || schema.format === 'email')
        return schema.format === 'email' ? `fuzz${rng.int(1e6)}@example.com` : `${w.rx.url}/fuzz`;
      const n = Math.min(schema.maxLength ?? 16, 1 + rng.int(16));
      return Array.from({ length: Math.max(n, schema.minLength ?? 0) }, () =>
        rng.pick('abcxyz019-_.'.split('')),
      ).join('');
    }
    default:
      return rng.pick([1, 'x', true, null, {}, []]);
  }
}

/** Some fields mean something: aim them at real things (the receiver, real ids) or at danger. */
function sampleNamed(name: string, schema: Schema, rng: Rng, w: World, depth: number): unknown {
  if (name === 'url')
    return rng.pick([
      `${w.rx.url}/fuzz`,
      'http://169.254.169.254/latest/meta-data',
      'https://10.0.0.1/x',
      'file:///etc/passwd',
      'https://[::1]/x',
      'ftp://127.0.0.1/',
    ]);
  if (name === 'service') return rng.pick([w.svc.prn, w.alice.prn, 'prn:::auth:/nope']);
  if (name === 'username') return rng.pick([w.alice.nick, w.d1.prn, 'root==>alice', 'nobody']);
  if (name === 'password') return rng.pick(['wrong', w.alice.password, '']);
  return sample(schema, rng, w, depth + 1);
}

/** One class of bad input applied to a (mostly) valid value. */
function mutate(value: unknown, schema: Schema, rng: Rng): { body: unknown; kind: string } {
  const obj = value && typeof value === 'object' && !Array.isArray(value) ? { ...(value as object) } : {};
  const keys = Object.keys(obj);
  const kind = rng.pick([
    'valid',
    'valid',
    'wrong-type',
    'unknown-field',
    'missing-required',
    'oversized',
    'boundary',
    'hostile-string',
    'deep',
    'not-an-object',
  ] as const);
  const some = () => (keys.length ? rng.pick(keys) : 'x');
  switch (kind) {
    case 'valid':
      return { body: value, kind };
    case 'wrong-type':
      return { body: { ...obj, [some()]: rng.pick([42, -1.5, true, null, [], {}, ['x'], 'str']) }, kind };
    case 'unknown-field':
      return {
        body: { ...obj, [rng.pick(['__proto__', 'constructor', 'isAdmin', 'owner', 'zz'])]: 'x' },
        kind,
      };
    case 'missing-required': {
      const required = (schema?.required ?? []) as string[];
      const copy: Record<string, unknown> = { ...obj };
      if (required.length) delete copy[rng.pick(required)];
      return { body: copy, kind };
    }
    case 'oversized':
      return { body: { ...obj, [some()]: 'z'.repeat(rng.pick([4097, 70_000, 600_000])) }, kind };
    case 'boundary':
      return {
        body: { ...obj, [some()]: rng.pick([-1, 0, 101, 2 ** 31, 2 ** 53 + 2, -(2 ** 63), 1e308, 0.5]) },
        kind,
      };
    case 'hostile-string':
      return { body: { ...obj, [some()]: rng.pick(HOSTILE_STRINGS) }, kind };
    case 'deep': {
      let deep: unknown = 'bottom';
      for (let i = 0; i < 2000; i++) deep = { d: deep };
      return { body: { ...obj, [some()]: deep }, kind };
    }
    case 'not-an-object':
      return { body: rng.pick([[], 'text', 12, true, null, [obj]]), kind };
  }
}

/** Appended by followers of the store (processors/followers/publicity.ts), never by a request itself. */
// The followers' bookkeeping for earlier accepted requests: the publicity carrier's, and the
// recovery follower's record of what a bulk recovery queued.
const BACKGROUND_TYPES = new Set(['DevicePublicProcessed', 'StepPublicitySet', 'WebhookRecoveryQueued']);

describe('fuzzing every endpoint from /openapi.json (e2e)', function () {
  this.timeout(600_000);
  let w: World;
  let operations: Operation[] = [];

  before(async () => {
    w = await buildWorld();
    operations = await documentedOperations(w);
    // Scraping metrics is not a target (it changes with every request); the rest is.
    operations = operations.filter((o) => o.path !== '/metrics');
  });
  after(() => w?.stop());

  it(`answers ${REQUESTS.toLocaleString('en')} generated requests with no 5xx, refusals in the error shape, and refusals write nothing`, async () => {
    const rng = new Rng(SEED);
    const statuses = new Map<number, number>();
    const kinds = new Map<string, number>();
    const secrets = new Set(w.secrets);
    const callers = () =>
      rng.pick([
        { authorization: `Bearer ${w.alice.token}` },
        { authorization: `Bearer ${w.alice.token}` },
        { authorization: `Bearer ${w.bob.token}` },
        { authorization: `Bearer ${w.d2.token}` },
        { authorization: `Bearer ${w.readOnly}` },
        { authorization: `Bearer ${w.root.token}` },
        { authorization: `Bearer ${w.svc.token}` },
        {},
        { authorization: 'Bearer not.a.jwt' },
        { authorization: 'Basic Og==' },
        saBasic(),
      ]);
    const ids = (o: Operation) =>
      o.path.replace(/\{(\w+)\}/g, (_, name: string) => {
        if (rng.chance(0.3)) return rng.pick(HOSTILE_PATH_SEGMENTS);
        switch (name) {
          case 'device':
            return rng.pick([w.d1.id, w.d2.id]);
          case 'rev':
            return rng.pick(['0', '1', '-1', '99999999999999999999', 'abc']);
          case 'eid':
            return w.ids.event;
          case 'did':
            return w.ids.delivery;
          case 'rid':
            return w.ids.recovery;
          case 'challenge':
            return 'nochallenge';
          default:
            return o.path.startsWith('/apps')
              ? w.ids.app
              : o.path.startsWith('/webhooks')
                ? rng.pick([w.ids.webhook, w.ids.bobWebhook])
                : rng.pick([w.d1.id, w.d2.id, w.d1.prn]);
        }
      });
    const query = () =>
      rng.chance(0.4)
        ? `?${rng.pick(['limit', 'skip', 'status', 'type', 'since', 'until', 'resource_prn', 'token', 'owner'])}=${encodeURIComponent(
            rng.pick([
              '-1',
              '0',
              '1',
              '1000000',
              'abc',
              '1.5',
              '1e400',
              'failed',
              '',
              '2026-01-01T00:00:00Z',
              'a'.repeat(3000),
            ]),
          )}`
        : '';

    for (let n = 0; n < REQUESTS; n++) {
      const o = rng.pick(operations);
      const path = ids(o) + query();
      const headers: Record<string, string> = { ...callers() };
      let payload: string | undefined;
      let kind = 'no-body';
      // fetch sends no body with GET: the other methods get one even where none is expected.
      if (o.method !== 'GET' && (o.body || rng.chance(0.05))) {
        const m = mutate(sample(o.body ?? { type: 'object' }, rng, w), o.body, rng);
        kind = m.kind;
        payload = JSON.stringify(m.body);
        headers['content-type'] = 'application/json';
        if (rng.chance(0.04)) {
          kind = 'malformed-json';
          payload = payload.slice(0, Math.max(1, payload.length - 3));
        } else if (rng.chance(0.03)) {
          kind = 'wrong-content-type';
          headers['content-type'] = rng.pick([
            'text/plain',
            'application/x-www-form-urlencoded',
            'multipart/form-data',
          ]);
        }
      }
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
      const head = await w.hub.node.store.head();
      const res = await fetch(`${w.hub.url}${path}`, { method: o.method, headers, body: payload });
      // A live stream answers until the client goes: its status and headers are the answer.
      const live = res.ok && res.headers.get('content-type')?.startsWith('text/event-stream');
      const text = live ? '' : await res.text();
      if (live) await res.body?.cancel();
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      const what = `#${n} ${o.method} ${path.slice(0, 200)} (${kind}) → ${res.status} ${text.slice(0, 300)}`;
      assert.ok(res.status < 500, what);
      if (res.status >= 400) {
        const body = JSON.parse(text);
        assert.equal(body.code, res.status, what);
        assert.equal(typeof body.error, 'string', what);
        assert.equal(typeof body.message, 'string', what);
        // A refused request appended nothing: what came meanwhile is a follower's bookkeeping for
        // an earlier accepted request, which carries on in the background.
        const after = await w.hub.node.store.head();
        const appended = after === head ? [] : await w.hub.node.store.readAll(head, after - head);
        if (appended.some((e) => !BACKGROUND_TYPES.has(e.type))) {
          assert.fail(
            `appended by a refused request: ${what}: ${JSON.stringify(appended.map((e) => [e.type, e.stream, e.data]))}`,
          );
        }
      } else if (res.headers.get('content-type')?.includes('json')) {
        // Secrets handed out during the run join the ones the log may never carry.
        const found = text.match(/"(?:secret|refresh_token|password)":"([^"]{8,})"/g) ?? [];
        for (const f of found) secrets.add(f.slice(f.indexOf(':') + 2, -1));
      }
    }
    const health = await w.hub.call('GET', '/healthz');
    assert.equal(health.status, 200);
    const fiveXX = [...statuses].filter(([s]) => s >= 500).reduce((a, [, c]) => a + c, 0);
    assert.equal(fiveXX, 0);
    console.log(
      `      fuzz: ${REQUESTS} requests, seed ${SEED}; statuses ${JSON.stringify(Object.fromEntries([...statuses].sort()))}; kinds ${JSON.stringify(Object.fromEntries(kinds))}`,
    );

    // No log line of the whole run, and no webhook delivered, carries a secret or a password hash.
    const lines = w.hub.logs();
    assert.ok(lines.length > REQUESTS, 'the run was logged');
    const deliveries = w.rx.received.map((r) => `${JSON.stringify(r.headers)} ${r.body}`);
    for (const text of [...lines, ...deliveries]) {
      assert.ok(!/scrypt\$/.test(text), `a password hash in: ${text.slice(0, 300)}`);
      for (const secret of secrets) assert.ok(!text.includes(secret), `a secret in: ${text.slice(0, 300)}`);
    }
    assert.ok(secrets.size >= w.secrets.length);
  });
});
