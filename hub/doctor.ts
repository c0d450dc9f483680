// `hub doctor`: checks the configuration and every dependency the hub needs under it, and says
// what is wrong and how to fix it. It writes nothing: it only reads the event store, and creates
// no directory, table, topic or key. Every connection has a short timeout, so an unreachable dependency
// fails in seconds instead of after the clients' usual retries. Secrets are never shown: URLs
// have their password replaced by ***, and any configured secret is scrubbed from every detail.
// Here: the run, the configuration and what it sets (keys, device CA, public URL, webhooks, admins,
// captcha); the services it reaches are checked in doctor-services.ts.
import { X509Certificate } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fromPem, jwtKeyFile } from '../api/auth/keys.ts';
import { deviceCaFile } from '../api/devices/ca.ts';
import { type Config, ConfigError, knobs, loadConfig } from '../infra/config.ts';
import { nameOwner } from '../infra/eventstore/aggregate.ts';
import { openEventStore } from '../infra/eventstore/open.ts';
import {
  type CheckResult,
  dataDirCheck,
  esdbCheck,
  kafkaChecks,
  listenCheck,
  mailCheck,
  postgresCheck,
  reason,
  redactUrl,
  redisCheck,
  result,
  sqliteCheck,
  storedHead,
} from './doctor-services.ts';

export type { CheckResult, Level } from './doctor-services.ts';

export interface DoctorOptions {
  /** Bound of one connection attempt or request, ms (the whole check gets a little more). */
  timeoutMs?: number;
}

/** Variables named HUB_* that are not knobs but belong to the tooling (benchmarks, infra/local.sh). */
const TOOLING = /^HUB_(BENCH|INFRA|APT)_/;

/** Runs every check that applies to the configuration in `env`, in a stable order. */
export async function runDoctor(
  env: Record<string, string | undefined> = process.env,
  options: DoctorOptions = {},
): Promise<CheckResult[]> {
  const timeoutMs = options.timeoutMs ?? 4000;
  const loaded = configChecks(env);
  if (!loaded.config) return scrub(loaded.results, secretsOf(env));
  const config = loaded.config;
  const bounded = (name: string, check: () => Promise<CheckResult | CheckResult[]>) =>
    withTimeout(name, check, timeoutMs + 2000);
  const checks: Array<Promise<CheckResult | CheckResult[]>> = [bounded('listen', () => listenCheck(config))];
  if (config.profile === 'embedded') {
    checks.push(
      Promise.resolve(dataDirCheck(config)),
      bounded('sqlite', async () => sqliteCheck(config)),
    );
  } else {
    // PostgreSQL keeps the event log and the delivery records, whichever the event store.
    checks.push(bounded('postgres', () => postgresCheck(config, timeoutMs)));
    if (config.eventStoreKind === 'esdb') checks.push(bounded('esdb', () => esdbCheck(config)));
    checks.push(bounded('redis', () => redisCheck(config, timeoutMs)));
    checks.push(bounded('kafka', () => kafkaChecks(config, timeoutMs)));
  }
  checks.push(
    bounded('mail', () => mailCheck(config, timeoutMs)),
    bounded('keys', () => keysCheck(config)),
    Promise.resolve(deviceCaCheck(config)),
    Promise.resolve(publicUrlCheck(config)),
    Promise.resolve(webhooksCheck(config)),
    Promise.resolve(callbacksCheck(config)),
    Promise.resolve(captchaCheck(config)),
    bounded('admins', () => adminsCheck(config)),
  );
  const results = [...loaded.results, ...(await Promise.all(checks)).flat()];
  return scrub(results, secretsOf(env));
}

/** Loads the configuration; reports every invalid variable, not only the first. */
function configChecks(env: Record<string, string | undefined>): {
  config: Config | undefined;
  results: CheckResult[];
} {
  const results: CheckResult[] = [];
  const defaults = new Map(Object.values(knobs).map((k) => [k.env, k.default]));
  const unknown = Object.keys(env)
    .filter((name) => name.startsWith('HUB_') && !defaults.has(name) && !TOOLING.test(name))
    .sort();
  if (unknown.length > 0) {
    results.push(
      result(
        'config',
        'warn',
        `unknown variable${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')} (misspelt? README.md lists every knob); ignored`,
      ),
    );
  }
  // loadConfig stops at the first invalid variable: put its default in and load again, to list all.
  const probe = { ...env };
  const failed = new Set<string>();
  for (;;) {
    try {
      const config = loadConfig(probe);
      if (failed.size > 0) break;
      const set = Object.keys(env).filter((name) => defaults.has(name)).length;
      results.unshift(
        result(
          'config',
          'ok',
          `${config.profile} profile, event store ${config.eventStoreKind}, ${set} HUB_* variable${set === 1 ? '' : 's'} set`,
        ),
      );
      return { config, results };
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      if (failed.has(err.variable)) break;
      failed.add(err.variable);
      results.push(result('config', 'fail', `${err.message}; see README.md, Configuration`));
      probe[err.variable] = defaults.get(err.variable) ?? '';
    }
  }
  results.push(result('skipped', 'warn', 'the other checks run once the configuration loads'));
  return { config: undefined, results };
}

async function keysCheck(config: Config): Promise<CheckResult> {
  if (config.jwtPrivateKey) {
    // Loading the configuration checked that it is an ES256 key.
    const { kid } = await fromPem(config.jwtPrivateKey);
    return result('keys', 'ok', `HUB_JWT_PRIVATE_KEY is set: an ES256 key, kid ${kid}`);
  }
  if (config.profile === 'distributed') {
    return result(
      'keys',
      'warn',
      'HUB_JWT_PRIVATE_KEY is not set: a key generated once and shared through Redis signs tokens (development only); set an ES256 PKCS#8 PEM',
    );
  }
  const file = resolve(jwtKeyFile(config.dataDir));
  if (!existsSync(file)) {
    // Made at the first start only: the hub refuses to make one for a store that holds data.
    const held = storedHead(config);
    return held > 0
      ? result(
          'keys',
          'fail',
          `${file} is missing, but the event store holds data (head ${held}) signed and sealed with it: restore it, or set HUB_JWT_PRIVATE_KEY to it; the hub does not start without it`,
        )
      : result('keys', 'ok', `signing key generated at the first start into ${file}`);
  }
  try {
    const { kid } = await fromPem(readFileSync(file, 'utf8'));
    return result('keys', 'ok', `signing key ${file}, kid ${kid}`);
  } catch (err) {
    return result(
      'keys',
      'fail',
      `${file} does not load (${reason(err)}): restore it, or remove it to generate a new one (tokens already issued stop verifying)`,
    );
  }
}

function deviceCaCheck(config: Config): CheckResult {
  // Loading the configuration checked the rest: both set or neither, parsed, the key P-256 and
  // the certificate's own.
  if (config.deviceCaCert) {
    const x509 = new X509Certificate(config.deviceCaCert);
    const until = new Date(x509.validTo);
    const what = `${x509.subject.replace(/\n/g, ', ')}, valid until ${until.toISOString().slice(0, 10)}`;
    if (until.getTime() < Date.now())
      return result('device-ca', 'fail', `HUB_DEVICE_CA_CERT has expired: ${what}`);
    if (until.getTime() < Date.now() + 30 * 86_400_000)
      return result('device-ca', 'warn', `HUB_DEVICE_CA_CERT expires within 30 days: ${what}`);
    return result('device-ca', 'ok', `HUB_DEVICE_CA_CERT ${what}`);
  }
  if (config.profile === 'distributed') {
    return result(
      'device-ca',
      'warn',
      'HUB_DEVICE_CA_CERT/KEY are not set: a CA generated once and shared through Redis signs device certificates (development only)',
    );
  }
  const file = resolve(deviceCaFile(config.dataDir));
  return existsSync(file)
    ? result('device-ca', 'ok', `device CA ${file}`)
    : result('device-ca', 'ok', `device CA generated at the first start into ${dirname(file)}`);
}

function publicUrlCheck(config: Config): CheckResult {
  if (config.publicUrl)
    return result('public-url', 'ok', `links in emails and redirects use ${config.publicUrl}`);
  const listening = `http://${config.host}:${config.port}`;
  if (config.profile === 'distributed') {
    return result(
      'public-url',
      'warn',
      `HUB_PUBLIC_URL is not set: links in emails use the projector's own address (${listening}), which users may not reach; set it to the API's public address`,
    );
  }
  return result(
    'public-url',
    'ok',
    `HUB_PUBLIC_URL is not set: links use the listening address (${listening})`,
  );
}

function webhooksCheck(config: Config): CheckResult {
  const loose = [
    config.webhookAllowHttp ? 'HUB_WEBHOOK_ALLOW_HTTP=true (plain http:// URLs)' : '',
    config.webhookAllowNetworks.length > 0
      ? `HUB_WEBHOOK_ALLOW_NETWORKS=${config.webhookAllowNetworks.join(',')} (private addresses)`
      : '',
  ].filter(Boolean);
  if (loose.length > 0)
    return result('webhooks', 'warn', `${loose.join(', ')}: development and tests only; unset in production`);
  return result('webhooks', 'ok', 'webhooks reach https:// URLs at public addresses only');
}

function callbacksCheck(config: Config): CheckResult {
  const secret = config.saAdminSecret;
  if (!secret)
    return result('callbacks', 'ok', 'HUB_SA_ADMIN_SECRET is not set: /callbacks refuses everyone');
  return result(
    'callbacks',
    'ok',
    'HUB_SA_ADMIN_SECRET is set: the operator account saadmin may use /callbacks',
  );
}

/** HUB_ADMINS names nicks; one that no account holds yet is reserved for the operator to register. */
async function adminsCheck(config: Config): Promise<CheckResult> {
  if (config.admins.length === 0) return result('admins', 'ok', 'HUB_ADMINS is empty: no admins');
  const reserved = (nicks: string[]) =>
    result(
      'admins',
      'warn',
      `HUB_ADMINS lists ${nicks.join(', ')}, not registered yet: reserved, only the operator registers them (POST /auth/accounts with HTTP Basic saadmin)`,
    );
  if (config.profile === 'embedded' && !existsSync(resolve(config.dataDir, 'events.sqlite')))
    return reserved(config.admins);
  const store = await openEventStore(config);
  try {
    const missing: string[] = [];
    for (const nick of config.admins)
      if (!(await nameOwner(store, 'nick', nick.toLowerCase()))) missing.push(nick);
    if (missing.length > 0) return reserved(missing);
    return result('admins', 'ok', `every nick HUB_ADMINS lists is registered (${config.admins.join(', ')})`);
  } finally {
    await store.close();
  }
}

function captchaCheck(config: Config): CheckResult {
  if (!config.captchaVerifyUrl)
    return result('captcha', 'ok', 'off (HUB_CAPTCHA_VERIFY_URL is not set): registration asks no captcha');
  if (!config.captchaSecret)
    return result(
      'captcha',
      'warn',
      `HUB_CAPTCHA_VERIFY_URL is set but HUB_CAPTCHA_SECRET is not: the provider will refuse every check`,
    );
  return result('captcha', 'ok', `registration answers are checked at ${redactUrl(config.captchaVerifyUrl)}`);
}

/** A check that does not finish within the bound fails, naming it. */
async function withTimeout(
  name: string,
  check: () => Promise<CheckResult | CheckResult[]>,
  ms: number,
): Promise<CheckResult | CheckResult[]> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<CheckResult>((ok) => {
    timer = setTimeout(() => ok(result(name, 'fail', `no answer within ${ms / 1000} s`)), ms);
  });
  try {
    return await Promise.race([check().catch((err: unknown) => result(name, 'fail', reason(err))), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Every secret the environment holds: secret knobs, and the passwords of URL knobs. */
function secretsOf(env: Record<string, string | undefined>): string[] {
  const secrets: string[] = [];
  for (const name of [
    'HUB_JWT_PRIVATE_KEY',
    'HUB_SA_ADMIN_SECRET',
    'HUB_METRICS_TOKEN',
    'HUB_CAPTCHA_SECRET',
    'HUB_DEVICE_CA_KEY',
  ]) {
    if (env[name]) secrets.push(env[name]);
  }
  for (const name of [
    'HUB_POSTGRES_URL',
    'HUB_ESDB_URL',
    'HUB_REDIS_URL',
    'HUB_MAIL_TRANSPORT',
    'HUB_CAPTCHA_VERIFY_URL',
  ]) {
    const raw = env[name];
    if (!raw) continue;
    try {
      const { password } = new URL(raw);
      if (password) secrets.push(password, decodeURIComponent(password));
    } catch {
      const m = /\/\/[^:/@]*:([^@/]*)@/.exec(raw);
      if (m?.[1]) secrets.push(m[1]);
    }
  }
  // Very short ones would blank out ordinary words; the URLs are redacted where shown anyway.
  return [...new Set(secrets)].filter((s) => s.length >= 4).sort((a, b) => b.length - a.length);
}

function scrub(results: CheckResult[], secrets: string[]): CheckResult[] {
  return results.map((r) => ({
    ...r,
    detail: secrets.reduce((detail, secret) => detail.split(secret).join('***'), r.detail),
  }));
}
