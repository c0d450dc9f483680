// Every configuration knob of Device Hub, in one place, with its default and meaning.
// Values come from HUB_* environment variables; an invalid value stops the start with one line
// naming the variable (ConfigError). README's configuration table is checked against this list.

import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto';
import { availableParallelism } from 'node:os';

export type Profile = 'embedded' | 'distributed';
export type EventStoreKind = 'sqlite' | 'postgres' | 'esdb';

type Parser<T> = (raw: string) => T;

interface Knob<T> {
  env: string;
  default: string;
  meaning: string;
  parse: Parser<T>;
}

export class ConfigError extends Error {
  readonly variable: string;
  constructor(variable: string, problem: string) {
    super(`${variable} ${problem}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}

const int =
  (min: number, max: number): Parser<number> =>
  (raw) => {
    const n = Number(raw);
    if (!/^-?\d+$/.test(raw.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new Error(`must be an integer from ${min} to ${max}`);
    }
    return n;
  };
const oneOf =
  <T extends string>(...values: T[]): Parser<T> =>
  (raw) => {
    if (!(values as string[]).includes(raw)) throw new Error(`must be one of ${values.join(', ')}`);
    return raw as T;
  };
/** `auto` (resolved later: by roles, by profile) or an integer from lo to hi. */
const autoOr =
  (lo: number, hi: number): Parser<number | 'auto'> =>
  (raw) => {
    if (raw === 'auto') return 'auto';
    try {
      return int(lo, hi)(raw);
    } catch {
      throw new Error(`must be auto or an integer from ${lo} to ${hi}`);
    }
  };

/**
 * HUB_API_THREADS's `auto` for a process of `profile` running `roles`. More threads than cores
 * only add switching; at most 4, as every thread's writes and reads go through the one main
 * thread (measured on 2 cores; a larger machine may choose a count). In a distributed process
 * that runs other roles too (`hub start`), that main thread also projects, derives and
 * dispatches, and every write waits for it: a core is left to it (on 2 cores, one thread instead
 * of two gave a fifth more events/s at saturation and less latency at 500 writes/s, ingestion the
 * same; docs/benchmarks.md). An embedded process's threads append without the main thread and
 * keep one per core. The threads share the port with SO_REUSEPORT, which Node offers on Linux and
 * FreeBSD only.
 */
export function autoApiThreads(profile: string, roles: readonly string[]): number {
  const cores = availableParallelism();
  const reusePort = process.platform === 'linux' || process.platform === 'freebsd';
  if (cores < 2 || !reusePort) return 0;
  const others = profile === 'distributed' && roles.some((r) => r !== 'api');
  return Math.min(others ? cores - 1 : cores, 4);
}
/** `auto`, 0 or 1: see HUB_DISPATCHER_HTTP_THREADS. */
const httpThreadCount: Parser<number> = (raw) => {
  if (raw === 'auto') return availableParallelism() < 2 ? 0 : 1;
  if (raw === '0' || raw === '1') return Number(raw);
  throw new Error('must be auto, 0 or 1');
};
const text: Parser<string> = (raw) => raw;
/** The operator's /callbacks password: empty (closed) or long enough not to be guessed. */
const operatorSecret: Parser<string> = (raw) => {
  if (raw !== '' && raw.length < 32)
    throw new Error(
      `has ${raw.length} characters: use at least 32, random (or leave it empty: /callbacks closed)`,
    );
  return raw;
};
/** A PEM block; `\n` escapes (one-line environment values) become newlines. */
const pem: Parser<string> = (raw) => raw.replace(/\\n/g, '\n');
const nonEmpty: Parser<string> = (raw) => {
  if (!raw.trim()) throw new Error('must not be empty');
  return raw;
};
/** A PEM EC P-256 private key (what ES256 and the device CA sign with), or empty. */
const p256KeyPem: Parser<string> = (raw) => {
  const value = pem(raw);
  if (!value) return value;
  let key: KeyObject;
  try {
    key = createPrivateKey(value);
  } catch {
    throw new Error('must be a private key in PEM (PKCS#8)');
  }
  if (key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== 'prime256v1')
    throw new Error('must be an EC key on the curve P-256 (ES256)');
  return value;
};
const certificatePem: Parser<string> = (raw) => {
  const value = pem(raw);
  if (!value) return value;
  try {
    new X509Certificate(value);
  } catch {
    throw new Error('must be an X.509 certificate in PEM');
  }
  return value;
};
const list: Parser<string[]> = (raw) =>
  raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const url =
  (...protocols: string[]): Parser<string> =>
  (raw) => {
    if (raw === '') return raw;
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      throw new Error(`must be a URL (${protocols.join(' or ')})`);
    }
    if (!protocols.includes(parsed.protocol)) throw new Error(`must use ${protocols.join(' or ')}`);
    return raw;
  };

const knob = <T>(env: string, def: string, meaning: string, parse: Parser<T>): Knob<T> => ({
  env,
  default: def,
  meaning,
  parse,
});

/** The table: README.md lists exactly these, in this order. */
export const knobs = {
  profile: knob(
    'HUB_PROFILE',
    'embedded',
    '`embedded`: one process, no external services, data in HUB_DATA_DIR. `distributed`: PostgreSQL or EventStoreDB, Kafka and Redis, each role its own process.',
    oneOf<Profile>('embedded', 'distributed'),
  ),
  host: knob('HUB_HOST', '127.0.0.1', 'Address this process serves HTTP on.', nonEmpty),
  port: knob(
    'HUB_PORT',
    '8080',
    'Port this process serves HTTP on: the API (api role) and /metrics, /healthz, /readyz (every role); 0 picks a free one.',
    int(0, 65535),
  ),
  apiThreads: knob(
    'HUB_API_THREADS',
    'auto',
    'Worker threads serving the HTTP API of a process with the api role, all on HUB_PORT (the kernel spreads connections among them), while the main thread keeps the stores and the other roles. 0: the main thread serves HTTP itself. auto: one per core the process may use, at most 4, and one fewer in a distributed process that runs other roles besides the API (its main thread projects, derives and dispatches too); 0 on a single core, and off Linux and FreeBSD (the threads share the port with SO_REUSEPORT).',
    autoOr(0, 64), // auto: see autoApiThreads
  ),
  dataDir: knob(
    'HUB_DATA_DIR',
    '.hub/data',
    'Directory of the embedded profile (event store file, keys).',
    nonEmpty,
  ),
  logLevel: knob(
    'HUB_LOG_LEVEL',
    'info',
    'Log level of the JSON logs on stdout (one JSON object a line; besides them each role prints one plain line when it starts, `Device Hub (<profile>) <roles>: listening on <url>`, which scripts wait for; a fatal start error goes to stderr as text).',
    oneOf('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
  ),
  eventStore: knob(
    'HUB_EVENT_STORE',
    '',
    'Event store adapter: `sqlite`, `postgres` or `esdb`. Empty: `sqlite` when embedded, `postgres` when distributed.',
    (raw) => (raw === '' ? '' : oneOf<EventStoreKind>('sqlite', 'postgres', 'esdb')(raw)),
  ),
  sqliteSync: knob(
    'HUB_SQLITE_SYNC',
    'full',
    'SQLite durability: `full` fsyncs every group commit (survives power loss); `normal` survives a process crash only.',
    oneOf('full', 'normal'),
  ),
  deriveLingerMs: knob(
    'HUB_DERIVE_LINGER_MS',
    '5',
    "Embedded profile: how long the event store's writer thread may hold the news of the API threads' commits before the main thread (projections, event log, webhooks) hears of them, ms, so that a steady rate reaches the derivation in batches instead of one event at a time: about a third less CPU per event at 500 writes/s, for that much more end-to-end latency. A read waiting for its caller's last write is told at once; writes are answered as soon as they are durable, whatever this is. 0: every commit at once.",
    int(0, 100),
  ),
  callerCacheEntries: knob(
    'HUB_CALLER_CACHE_ENTRIES',
    '100000',
    "Most callers each in-process table keeps (verified tokens, accounts' last password change, rate-limit buckets, login windows, callers' last write): about 200 bytes each; the least recently used go first (a forgotten token is verified again, a forgotten bucket starts full).",
    int(1000, 10_000_000),
  ),
  stateCacheEntries: knob(
    'HUB_STATE_CACHE_ENTRIES',
    '10000',
    "Most entries of each in-process cache of states (aggregates by kind and API thread, device actors, unsealed device secrets, subscriptions, the embedded event log's numbers of names): up to a few KB each (a device's metadata maps); the least recently used go first and are read again when needed. The default fits a 512 MiB container.",
    int(100, 10_000_000),
  ),
  doneJobsKeptS: knob(
    'HUB_DONE_JOBS_KEPT_S',
    '900',
    'Distributed profile: how long Redis keeps the id of a delivered (or dead-lettered) job, seconds, so a job sent again meanwhile (a processor or a consumer that restarted) is not delivered twice; its body goes at once. Sized by traffic: about 100 bytes a job.',
    int(1, 31_536_000),
  ),
  embeddedState: knob(
    'HUB_EMBEDDED_STATE',
    'sqlite',
    "Embedded profile: where the derived state lives (read models, the event log, the device actors' states). `sqlite`: in HUB_DATA_DIR/derived.sqlite, kept across restarts, so a start resumes from its checkpoints. `memory`: in the process, rebuilt from the whole event store at each start (tests and benchmarks).",
    oneOf('sqlite', 'memory'),
  ),
  postgresUrl: knob(
    'HUB_POSTGRES_URL',
    'postgres://hub@127.0.0.1:5433/hub',
    'PostgreSQL connection string of the distributed profile: its event store (HUB_EVENT_STORE `postgres`), and in any case its event log and delivery attempt records (with EventStoreDB too); `?schema=<name>` uses a schema other than public.',
    url('postgres:', 'postgresql:'),
  ),
  postgresLogConnections: knob(
    'HUB_POSTGRES_LOG_CONNECTIONS',
    '4',
    "Distributed profile: connections per process to HUB_POSTGRES_URL for the event log and the delivery attempt records (besides the event store's own). Writes take at most two per log, reads one each (a list two).",
    int(1, 100),
  ),
  postgresLogLingerMs: knob(
    'HUB_POSTGRES_LOG_LINGER_MS',
    '20',
    "Distributed profile: how long an append to the event log or the delivery attempt records may wait for more to go in the same INSERT, ms: at a steady rate each statement costs PostgreSQL about the same whatever it carries, and the appends came one or two at a time. Nothing waits for them on a delivery's way (the event is delivered, the attempt made, before); they show in GET /webhooks/events and the attempt lists that much later. 256 rows go at once. 0: each as soon as one of two statements in flight is done.",
    int(0, 1000),
  ),
  esdbUrl: knob(
    'HUB_ESDB_URL',
    '',
    'EventStoreDB connection string, e.g. `esdb://127.0.0.1:2113?tls=false`. Also enables its contract tests.',
    url('esdb:', 'esdb+discover:'),
  ),
  snapshotEvery: knob(
    'HUB_SNAPSHOT_EVERY',
    '250',
    "Events between snapshots of an aggregate's state (a device, an account, a trail, …), in every event store: the first load of a stream after a start reads its snapshot and the events after it, and a load or a command that leaves a stream this many events past its snapshot writes a new one. 0: no snapshots are read or written.",
    int(0, 1_000_000),
  ),
  redisUrl: knob(
    'HUB_REDIS_URL',
    'redis://127.0.0.1:6380',
    'Redis (read models, actor states, the delivery schedule) in the distributed profile.',
    url('redis:', 'rediss:'),
  ),
  kafkaBrokers: knob(
    'HUB_KAFKA_BROKERS',
    '127.0.0.1:9092',
    'Comma-separated Kafka bootstrap brokers in the distributed profile.',
    list,
  ),
  kafkaPrefix: knob(
    'HUB_KAFKA_PREFIX',
    '',
    'Prefix of the Kafka topic and consumer group names: several hubs (or benchmarks) can share one cluster.',
    (raw) => {
      if (!/^[A-Za-z0-9._-]*$/.test(raw)) throw new Error('may hold only letters, digits, ".", "_" and "-"');
      return raw;
    },
  ),
  kafkaPartitions: knob(
    'HUB_KAFKA_PARTITIONS',
    '12',
    'Partitions of the changes and deliveries topics when the hub creates them: the most processor and dispatcher instances that share the work.',
    int(1, 1024),
  ),
  kafkaFetchWaitMs: knob(
    'HUB_KAFKA_FETCH_WAIT_MS',
    '500',
    "How long a consumer's fetch may wait on the broker for HUB_KAFKA_FETCH_MIN_BYTES of messages, ms. With the default minimum (1 byte) it is how long an idle consumer's fetch waits before it is sent again: a message arriving meanwhile is answered at once. Before 2026-11-27 it was 20 ms for 8 KB: every Kafka hop of a lone change waited up to that (two hops on a webhook's way), and each idle consumer fetched 50 times a second.",
    int(1, 5000),
  ),
  kafkaFetchMinBytes: knob(
    'HUB_KAFKA_FETCH_MIN_BYTES',
    '1',
    'Bytes a consumer fetch waits for on the broker (up to HUB_KAFKA_FETCH_WAIT_MS) before it is answered. 1: a message is handed on as soon as it is there; batches still form at high rates, as the next fetch goes out only once the last one is handled. Larger values trade latency for fewer fetches.',
    int(1, 1 << 20),
  ),
  kafkaSessionTimeoutMs: knob(
    'HUB_KAFKA_SESSION_TIMEOUT_MS',
    '10000',
    "How long a consumer group waits for a member that stopped heartbeating before it hands the member's partitions to the others, ms: after a processor or dispatcher crashes (a kill -9, a lost host), its partitions wait this long for another instance (a stop leaves the group at once). Members heartbeat about every second, between the chunks they handle. Lower brings the work back sooner; a member held up longer than this (an overloaded host, a long pause) is taken out of the group and rebalanced, its unfinished work handed to another (at least once). The broker bounds it: group.min.session.timeout.ms (6,000 by default) and group.max.session.timeout.ms, and refuses a member outside them: its processor or dispatcher then fails to start, naming the reason (`hub doctor` compares it with the broker's bounds).",
    int(3000, 1_800_000),
  ),
  processorConcurrency: knob(
    'HUB_PROCESSOR_CONCURRENCY',
    '64',
    'Device actors the stream processor runs at once per partition.',
    int(1, 10_000),
  ),
  processorHandOff: knob(
    'HUB_PROCESSOR_HANDOFF',
    'auto',
    'Distributed: how the stream processor hands its delivery jobs to a dispatcher. auto: straight to the dispatcher of its own process while that is the only one (its member of the group holds every partition of the deliveries topic), as the embedded profile does, the deliveries topic otherwise; a process running every role (`hub start`) then puts no job on the topic: on a 2-core machine, its send-to-delivery p50 at 500 writes/s fell from 51-119 ms to 21-52 ms in seven alternated rounds, at the same CPU per event (docs/webhooks.md). topic: always through the deliveries topic.',
    oneOf('auto', 'topic'),
  ),
  relayHandOff: knob(
    'HUB_RELAY_HANDOFF',
    'auto',
    'Distributed: how the change relay hands the stored events to the stream processor. auto: in memory to the processor of its own process (the processor role runs both) while that processor holds every partition of the changes topic and has handled everything on it, the changes topic otherwise (when a second processor joins, the changes not yet made durable are sent through the topic again); a process running every role (`hub start`) or the only processor then puts no change on the topic. topic: always through the changes topic.',
    oneOf('auto', 'topic'),
  ),
  webhookTimeoutMs: knob(
    'HUB_WEBHOOK_TIMEOUT_MS',
    '10000',
    'Time one delivery attempt may take, from connecting to the end of the answer, ms (a timeout is retried).',
    int(100, 60_000),
  ),
  webhookAllowHttp: knob(
    'HUB_WEBHOOK_ALLOW_HTTP',
    'false',
    'Allow plain http:// webhook URLs (development and tests only).',
    (raw) => oneOf('true', 'false')(raw) === 'true',
  ),
  webhookAllowNetworks: knob(
    'HUB_WEBHOOK_ALLOW_NETWORKS',
    '',
    'Comma-separated CIDR ranges webhooks may reach although not public, e.g. `127.0.0.0/8` (development and tests only).',
    (raw) => {
      const ranges = list(raw);
      for (const r of ranges)
        if (!/^[\d.]+\/\d{1,2}$|^[0-9a-f:]+\/\d{1,3}$/i.test(r))
          throw new Error(`holds ${r}, which is not a CIDR range`);
      return ranges;
    },
  ),
  webhookRotationWindowS: knob(
    'HUB_WEBHOOK_ROTATION_WINDOW_S',
    '0',
    'After rotate-secret, how long the previous secret still signs beside the new one, seconds; 0: until the next rotation (the specification).',
    int(0, 86_400 * 30),
  ),
  dispatcherMaxInFlight: knob(
    'HUB_DISPATCHER_MAX_IN_FLIGHT',
    '1024',
    'Delivery attempts in flight and jobs waiting per dispatcher process.',
    int(1, 100_000),
  ),
  dispatcherHttpThreads: knob(
    'HUB_DISPATCHER_HTTP_THREADS',
    'auto',
    "A thread of the dispatcher's own for the HTTP side of delivery attempts (undici, the sockets, the answers), beside the thread that signs, schedules and records them, taking the attempts past 1,000 a second: at moderate rates they stay on the dispatching thread, two wake-ups an attempt fewer. 0: one thread does all. auto: 1 when the process may use two cores or more (on 2 cores, 1.12 × the deliveries/s: the one thread was the limit while the machine had room), else 0.",
    httpThreadCount,
  ),
  webhookMaxInFlight: knob(
    'HUB_WEBHOOK_MAX_IN_FLIGHT',
    '32',
    'Delivery attempts in flight per subscription per dispatcher process.',
    int(1, 10_000),
  ),
  webhookDisableAfterS: knob(
    'HUB_WEBHOOK_DISABLE_AFTER_S',
    '432000',
    'The failure period: a subscription whose every attempt has failed for this long (from its first failure, or from when it was last enabled if later) is disabled by the hub, with `disabled_reason` `endpoint_failing`, and its owner is emailed, seconds (432000: 5 days). 0: never disabled.',
    int(0, 86_400 * 365),
  ),
  eventLogRetentionDays: knob(
    'HUB_EVENT_LOG_RETENTION_DAYS',
    '30',
    'How long the account-wide event log (GET /webhooks/events) keeps an event, days.',
    int(1, 3650),
  ),
  eventStreamsPerAccount: knob(
    'HUB_EVENT_STREAMS_PER_ACCOUNT',
    '5',
    "Live streams of an account's event log (GET /webhooks/events/stream, `hub webhooks listen`) open at once per API process (an embedded hub's API threads share one count); one more is refused with 429.",
    int(1, 1000),
  ),
  eventStreamHeartbeatMs: knob(
    'HUB_EVENT_STREAM_HEARTBEAT_MS',
    '15000',
    'How long a live event stream may stay silent: past it, a comment line keeps proxies and load balancers from closing it as idle, ms.',
    int(100, 300_000),
  ),
  publicUrl: knob(
    'HUB_PUBLIC_URL',
    '',
    'Address users reach the API at, for links in emails and redirect-uri. Empty: the address it listens on.',
    url('http:', 'https:'),
  ),
  jwtPrivateKey: knob(
    'HUB_JWT_PRIVATE_KEY',
    '',
    'ES256 private key (PKCS#8 PEM) that signs tokens. Empty: generated on first start (embedded: kept in HUB_DATA_DIR/keys).',
    p256KeyPem,
  ),
  admins: knob('HUB_ADMINS', '', 'Comma-separated nicks of the admin accounts.', list),
  serviceDomain: knob(
    'HUB_SERVICE_DOMAIN',
    '',
    'The <domain> of service account PRNs (prn:<domain>:auth:/<nick>).',
    text,
  ),
  accessTokenTtlS: knob(
    'HUB_ACCESS_TOKEN_TTL_S',
    '3600',
    'Lifetime of tokens from login and refresh, seconds.',
    int(60, 86_400 * 30),
  ),
  refreshWindowS: knob(
    'HUB_REFRESH_WINDOW_S',
    '604800',
    'How long after a login GET /auth/login may keep refreshing its token, seconds.',
    int(60, 86_400 * 365),
  ),
  refreshTokenTtlS: knob(
    'HUB_REFRESH_TOKEN_TTL_S',
    '2592000',
    'Lifetime of a refresh token, seconds.',
    int(60, 86_400 * 365),
  ),
  delegatedTokenTtlS: knob(
    'HUB_DELEGATED_TOKEN_TTL_S',
    '31536000',
    'Lifetime of delegated tokens (POST /auth/token), seconds.',
    int(60, 86_400 * 3650),
  ),
  implicitTokenTtlS: knob(
    'HUB_IMPLICIT_TOKEN_TTL_S',
    '3600',
    'Lifetime of tokens from POST /auth/authorize, seconds.',
    int(60, 86_400),
  ),
  verifyTtlS: knob(
    'HUB_VERIFY_TTL_S',
    '172800',
    'How long a verification link works, seconds; a registration still not verified that long after it (and its last link), or twice that long whatever, gives its nick and email up to a new registration.',
    int(1, 2_592_000),
  ),
  accessCodeTtlS: knob(
    'HUB_ACCESS_CODE_TTL_S',
    '600',
    'Lifetime of an access code (POST /auth/code), seconds.',
    int(1, 86_400),
  ),
  loginLimitPerMinute: knob(
    'HUB_LOGIN_LIMIT_PER_MINUTE',
    '30',
    'Login, registration, recovery and challenge attempts per client address per minute (429 above).',
    int(1, 1_000_000),
  ),
  deviceRegisterLimitPerMinute: knob(
    'HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE',
    '120',
    'Devices registering themselves (POST /devices without a token) per client address per minute (429 above): a provisioning line behind one address registers many.',
    int(1, 1_000_000),
  ),
  loginAccountLimitPerMinute: knob(
    'HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE',
    '10',
    'Failed logins (and wrong current passwords at POST /auth/password) per account and client address per minute: that address then gets 429 for that account until the minute ends. The account is counted whichever name it is given by; a device by its PRN.',
    int(1, 1_000_000),
  ),
  loginAccountFailuresPerHour: knob(
    'HUB_LOGIN_ACCOUNT_FAILURES_PER_HOUR',
    '100',
    'Failed logins per account per hour from all addresses: above it only the addresses the account logged in from (HUB_LOGIN_KNOWN_ADDRESS_DAYS) may still try, the others get 429 until the hour ends.',
    int(1, 1_000_000),
  ),
  loginKnownAddressDays: knob(
    'HUB_LOGIN_KNOWN_ADDRESS_DAYS',
    '30',
    'How long a client address a login succeeded from stays known to its account (each login renews it), days.',
    int(1, 3650),
  ),
  captchaVerifyUrl: knob(
    'HUB_CAPTCHA_VERIFY_URL',
    '',
    'Captcha check of the registration challenge (hCaptcha/reCAPTCHA/Turnstile siteverify URL). Empty: off.',
    url('http:', 'https:'),
  ),
  captchaSecret: knob('HUB_CAPTCHA_SECRET', '', 'Secret sent with each captcha check.', text),
  mailTransport: knob(
    'HUB_MAIL_TRANSPORT',
    'file',
    '`smtp://user:pass@host:port` (or smtps://), `file` (JSON files in HUB_DATA_DIR/mail) or `log` (recipient and subject only).',
    (raw) => {
      if (raw === 'file' || raw === 'log' || /^smtps?:\/\//.test(raw)) return raw;
      throw new Error('must be file, log or an smtp:// URL');
    },
  ),
  mailFrom: knob('HUB_MAIL_FROM', 'Device Hub <no-reply@localhost>', 'Sender of the emails.', text),
  saAdminSecret: knob(
    'HUB_SA_ADMIN_SECRET',
    '',
    'Password of the operator account `saadmin` for /callbacks (HTTP Basic): at least 32 characters (the hub does not start with a shorter one). Empty: /callbacks refuses everyone.',
    operatorSecret,
  ),
  metricsToken: knob(
    'HUB_METRICS_TOKEN',
    '',
    'Bearer token the Prometheus scraper sends to GET /metrics. Empty: /metrics answers only direct connections from this machine (loopback, not forwarded).',
    text,
  ),
  callbacksFailuresPerMinute: knob(
    'HUB_CALLBACKS_FAILURES_PER_MINUTE',
    '10',
    'Wrong operator credentials at /callbacks per client address per minute: that address then gets 429 until the minute ends.',
    int(1, 1_000_000),
  ),
  deviceCaCert: knob(
    'HUB_DEVICE_CA_CERT',
    '',
    'PEM certificate of the CA that signs device certificates. Empty: generated on first start.',
    certificatePem,
  ),
  deviceCaKey: knob(
    'HUB_DEVICE_CA_KEY',
    '',
    'PEM (PKCS#8) private key of that CA (EC P-256: it signs with ECDSA P-256).',
    p256KeyPem,
  ),
  metaMaxKeys: knob(
    'HUB_META_MAX_KEYS',
    '200',
    'Most keys in a device-meta or user-meta map (413 above).',
    int(1, 100_000),
  ),
  metaMaxKeyLength: knob(
    'HUB_META_MAX_KEY_LENGTH',
    '128',
    'Longest metadata key, in characters (422 above).',
    int(1, 4096),
  ),
  metaMaxValueLength: knob(
    'HUB_META_MAX_VALUE_LENGTH',
    '4096',
    'Longest metadata value, in characters (422 above).',
    int(1, 1_048_576),
  ),
  bodyLimitBytes: knob(
    'HUB_BODY_LIMIT_BYTES',
    '1048576',
    'Largest request body accepted (413 above it).',
    int(1024, 64 * 1024 * 1024),
  ),
  rateLimitPerSecond: knob(
    'HUB_RATE_LIMIT_PER_SECOND',
    '500',
    'Sustained requests per second per caller (the account once its token is verified, else the client address); 0 disables.',
    int(0, 1_000_000),
  ),
  rateLimitBurst: knob(
    'HUB_RATE_LIMIT_BURST',
    '1000',
    'Requests a caller may send at once above the sustained rate.',
    int(1, 10_000_000),
  ),
  readWaitMs: knob(
    'HUB_READ_WAIT_MS',
    '2000',
    "How long a read of a read model waits for it to apply the caller's last write (or `X-Hub-Min-Position`) before answering 503.",
    int(0, 60_000),
  ),
  projectionBatch: knob(
    'HUB_PROJECTION_BATCH',
    '500',
    'Events per batch applied to a read model.',
    int(1, 100_000),
  ),
  projectorLingerMs: knob(
    'HUB_PROJECTOR_LINGER_MS',
    'auto',
    "Following live writes, the least time between two reads of the event store by the projector's followers (the read models' runners, the mailer, the publicity carrier), ms: under steady writes, one batch per interval instead of one per write; full pages (a backlog) are read back to back, and a write after at least this long without a read is read at once. Reads of read models then wait up to this much more for the caller's last write. Not the relay's (webhooks' latency). 0: every write is read at once. auto: 10 in the distributed profile (there, with the API at 1,000 writes/s, the projector took 24 % of a core instead of 30, Redis 15 % instead of 18), 0 in the embedded one (no gain measured, and on API threads every read waits for the store's head).",
    autoOr(0, 1000), // auto: by profile in loadConfig
  ),
  replayDropGraceMs: knob(
    'HUB_REPLAY_DROP_GRACE_MS',
    '5000',
    'After a replay switches reads, how long the old generation is kept for readers still resolving it.',
    int(0, 600_000),
  ),
  shutdownTimeoutMs: knob(
    'HUB_SHUTDOWN_TIMEOUT_MS',
    '25000',
    'On SIGTERM or SIGINT, the bound of the drain: HTTP requests in flight get half of it, webhook attempts their own timeout; past it the process exits 1.',
    int(0, 600_000),
  ),
};

type Knobs = typeof knobs;
export type Config = Omit<
  { [K in keyof Knobs]: ReturnType<Knobs[K]['parse']> },
  'projectorLingerMs' | 'apiThreads'
> & {
  eventStoreKind: EventStoreKind;
  /** HUB_PROJECTOR_LINGER_MS, `auto` resolved by profile. */
  projectorLingerMs: number;
  /** HUB_API_THREADS, `auto` resolved for a process serving the API and every other role (see
   * autoApiThreads; hub/node.ts's forRoles resolves it for the roles a process runs). */
  apiThreads: number;
  /** Whether HUB_API_THREADS was `auto`. */
  apiThreadsAuto: boolean;
};

const SECRET_KNOBS = new Set([
  'HUB_JWT_PRIVATE_KEY',
  'HUB_SA_ADMIN_SECRET',
  'HUB_CAPTCHA_SECRET',
  'HUB_DEVICE_CA_KEY',
]);

/** A value as an error may show it: secrets hidden, passwords in URLs masked. */
function shown(env: string, raw: string): string {
  if (SECRET_KNOBS.has(env)) return '(hidden)';
  return JSON.stringify(raw.replace(/\/\/([^:/@]*):[^@/]*@/, '//$1:***@'));
}

/** Reads the configuration from an environment (process.env by default). Throws ConfigError. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const out: Record<string, unknown> = {};
  for (const [key, k] of Object.entries(knobs) as [string, Knob<unknown>][]) {
    const raw = env[k.env] ?? k.default;
    try {
      out[key] = k.parse(raw);
    } catch (err) {
      throw new ConfigError(k.env, `${(err as Error).message} (got ${shown(k.env, raw)})`);
    }
  }
  const config = out as Config;
  if (out.projectorLingerMs === 'auto') config.projectorLingerMs = config.profile === 'embedded' ? 0 : 10;
  config.apiThreadsAuto = out.apiThreads === 'auto';
  // As for a process of every role (`hub start`); forRoles resolves it for the roles a process runs.
  if (config.apiThreadsAuto) config.apiThreads = autoApiThreads(config.profile, ['api', 'processor']);
  config.eventStoreKind =
    (config.eventStore as EventStoreKind | '') || (config.profile === 'embedded' ? 'sqlite' : 'postgres');
  if (config.eventStoreKind === 'sqlite' && config.profile === 'distributed') {
    // SQLite is one process's file; the distributed profile runs many.
    throw new ConfigError(
      'HUB_EVENT_STORE',
      'cannot be sqlite in the distributed profile (use postgres or esdb)',
    );
  }
  // The device CA is both or neither: a certificate without its key could sign nothing.
  if (Boolean(config.deviceCaCert) !== Boolean(config.deviceCaKey))
    throw new ConfigError(
      config.deviceCaCert ? 'HUB_DEVICE_CA_KEY' : 'HUB_DEVICE_CA_CERT',
      'must be set with HUB_DEVICE_CA_CERT and HUB_DEVICE_CA_KEY both (or neither: generated)',
    );
  if (
    config.deviceCaCert &&
    !new X509Certificate(config.deviceCaCert).checkPrivateKey(createPrivateKey(config.deviceCaKey))
  )
    throw new ConfigError('HUB_DEVICE_CA_KEY', 'is not the key of HUB_DEVICE_CA_CERT');
  if (config.eventStoreKind === 'esdb' && !config.esdbUrl) {
    throw new ConfigError('HUB_ESDB_URL', 'must be set when HUB_EVENT_STORE is esdb');
  }
  return config;
}
