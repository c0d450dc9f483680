// A whole hub for end-to-end tests: a real node (every role, embedded unless told otherwise) on
// an ephemeral port, with its logs and emails readable, and the account flows users go through.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { type HubNode, type Role, startNode } from '../hub/node.ts';
import { type JsonResponse, memoryLogger, request, testConfig } from './harness.ts';

export interface TestHub {
  node: HubNode;
  url: string;
  dataDir: string;
  logs: () => string[];
  /** Every answer body this hub gave through call(), as JSON: for leak checks. */
  answers: string[];
  /** Its HUB_ADMINS, whose nicks only the operator registers (signup sends `operator`). */
  admins: string[];
  /** The operator's credentials (HTTP Basic saadmin), when it has any. */
  operator: Record<string, string>;
  /** JSON request against the hub, with an optional bearer token. */
  call(
    method: string,
    path: string,
    options?: { token?: string; body?: unknown; headers?: Record<string, string> },
  ): Promise<JsonResponse>;
  stop(): Promise<void>;
}

export async function startHub(
  env: Record<string, string> = {},
  roles: Role[] = ['api', 'projector'],
): Promise<TestHub> {
  const config = testConfig({
    HUB_ADMINS: 'root',
    HUB_SA_ADMIN_SECRET: TEST_OPERATOR_SECRET,
    HUB_LOGIN_LIMIT_PER_MINUTE: '100000',
    HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE: '100000',
    HUB_LOGIN_ACCOUNT_LIMIT_PER_MINUTE: '100000',
    ...env,
  });
  const logs = memoryLogger('debug');
  const node = await startNode(config, roles, { logger: logs.logger });
  const answers: string[] = [];
  return {
    node,
    url: node.url,
    dataDir: config.dataDir,
    logs: logs.lines,
    answers,
    admins: config.admins,
    operator: operatorBasic(config.saAdminSecret),
    call: caller(node.url, answers),
    stop: () => node.stop(),
  };
}

/** The operator secret of the suite's hubs (HUB_SA_ADMIN_SECRET: 32 characters at least). */
export const TEST_OPERATOR_SECRET = 'operator-secret-of-the-test-hubs-0123456789';
/** HTTP Basic headers of the operator account `saadmin` with `secret` (none for an empty one). */
export const operatorBasic = (secret: string): Record<string, string> =>
  secret ? { authorization: `Basic ${Buffer.from(`saadmin:${secret}`).toString('base64')}` } : {};

/** JSON requests against a hub at `url`, each answer kept in `answers`. */
function caller(url: string, answers: string[]): TestHub['call'] {
  return async (method, path, o = {}) => {
    const r = await request(`${url}${path}`, {
      method,
      body: o.body,
      headers: { ...(o.token ? { authorization: `Bearer ${o.token}` } : {}), ...o.headers },
    });
    answers.push(JSON.stringify(r.body));
    return r;
  };
}

/** The newest email to `to` whose subject matches, waiting for the mailer (it follows the store). */
export async function readMail(
  hub: TestHub,
  to: string,
  subject: RegExp,
  after = 0,
): Promise<{ subject: string; text: string; sent: number }> {
  const dir = join(hub.dataDir, 'mail');
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    let files: string[] = [];
    try {
      files = readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort();
    } catch {}
    for (const file of files.reverse()) {
      const sent = Number(file.split('-')[0]);
      if (sent < after) continue;
      const mail = JSON.parse(readFileSync(join(dir, file), 'utf8'));
      const recipients = (mail.to as { address: string }[]).map((a) => a.address);
      if (recipients.includes(to) && subject.test(mail.subject))
        return { subject: mail.subject, text: mail.text, sent };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`no email to ${to} matching ${subject}`);
}

export interface User {
  nick: string;
  email: string;
  password: string;
  prn: string;
  token: string;
  refresh: string;
}

/** Registers, passes the challenge, follows the emailed link and logs in: what a new user does. */
export async function signup(hub: TestHub, nick: string, password = `pw-${nick}-secret`): Promise<User> {
  const email = `${nick}@example.com`;
  // A nick HUB_ADMINS lists is registered by the operator (docs/api.md, Admins).
  const registered = await hub.call('POST', '/auth/accounts', {
    body: { email, nick, password },
    headers: hub.admins?.includes(nick) ? hub.operator : {},
  });
  assert.equal(registered.status, 200, JSON.stringify(registered.body));
  const challenge = new URL(registered.body['redirect-uri']).pathname;
  const started = Date.now() - 1;
  assert.equal((await hub.call('POST', challenge, { body: {} })).status, 202);
  const mail = await readMail(hub, email, /Verify/, started);
  const link = /(http\S+\/auth\/verify\?token=\S+)/.exec(mail.text)![1]!;
  assert.equal((await request(link)).status, 200);
  const login = await hub.call('POST', '/auth/login', { body: { username: nick, password } });
  assert.equal(login.status, 200, JSON.stringify(login.body));
  return {
    nick,
    email,
    password,
    prn: registered.body.prn,
    token: login.body.token,
    refresh: login.body.refresh_token,
  };
}

export interface Device {
  id: string;
  prn: string;
  nick: string;
  secret: string;
  token: string;
}

/** A device the owner creates (POST /devices with `body`), logged in with its PRN and secret. */
export async function createDevice(
  hub: TestHub,
  owner: User,
  body: Record<string, unknown> = {},
): Promise<Device> {
  const r = await hub.call('POST', '/devices', { token: owner.token, body });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const login = await hub.call('POST', '/auth/login', {
    body: { username: r.body.prn, password: r.body.secret },
  });
  assert.equal(login.status, 200);
  return {
    id: r.body.id,
    prn: r.body.prn,
    nick: r.body.nick,
    secret: r.body.secret,
    token: login.body.token,
  };
}

/** An admin-made SERVICE account, logged in. */
/** A user's token delegated to a service (POST /auth/code, then /auth/token) with these scopes. */
export async function delegated(hub: TestHub, user: User, service: User, scopes: string): Promise<string> {
  const code = await hub.call('POST', '/auth/code', {
    token: user.token,
    body: { service: service.prn, scopes },
  });
  assert.equal(code.status, 200, JSON.stringify(code.body));
  const swapped = await hub.call('POST', '/auth/token', {
    token: service.token,
    body: { 'access-code': code.body.code },
  });
  assert.equal(swapped.status, 200, JSON.stringify(swapped.body));
  return swapped.body.token;
}

export async function serviceAccount(hub: TestHub, adminToken: string, nick: string): Promise<User> {
  const password = `pw-${nick}-secret`;
  const r = await hub.call('POST', '/auth/accounts', {
    token: adminToken,
    body: { email: `${nick}@services.example.com`, nick, password, type: 'SERVICE' },
  });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const login = await hub.call('POST', '/auth/login', { body: { username: nick, password } });
  assert.equal(login.status, 200, JSON.stringify(login.body));
  return {
    nick,
    email: `${nick}@services.example.com`,
    password,
    prn: r.body.prn,
    token: login.body.token,
    refresh: login.body.refresh_token,
  };
}

// ---------------------------------------------------------------- roles as processes

const ROOT = new URL('..', import.meta.url).pathname;

export interface RoleProcess {
  child: ChildProcess;
  /** Where it serves HTTP: the API, or /metrics and the probes for the other roles. */
  url: string;
  output(): string;
}

/** `hub <command>` in its own process, resolved once it serves HTTP (every role does). */
export async function spawnRole(command: string, env: Record<string, string>): Promise<RoleProcess> {
  const child = spawn(process.execPath, ['bin/hub.ts', command], {
    cwd: ROOT,
    env: { ...process.env, HUB_PORT: '0', HUB_LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stderr!.on('data', (d) => {
    out += d;
  });
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once('exit', (code) =>
      reject(new Error(`hub ${command} exited with ${code}: ${out.slice(-2000)}`)),
    );
  });
  return { child, url, output: () => out };
}

/** Signals a process and waits for it to end: its exit code (null when killed by the signal) and how long it took. */
export async function endProcess(
  child: ChildProcess,
  signal: NodeJS.Signals = 'SIGKILL',
): Promise<{ code: number | null; ms: number }> {
  const started = Date.now();
  if (child.exitCode !== null || child.signalCode !== null) return { code: child.exitCode, ms: 0 };
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  child.kill(signal);
  return { code: await exited, ms: Date.now() - started };
}

/** A hub seen through HTTP only (processes of their own), for the account helpers; `env` is the
 * environment it was started with beside the process's. */
export function remoteHub(
  url: string,
  dataDir: string,
  env: Record<string, string | undefined> = {},
): TestHub {
  const answers: string[] = [];
  return {
    url,
    dataDir,
    answers,
    admins: (env.HUB_ADMINS ?? '').split(',').filter(Boolean),
    operator: operatorBasic(env.HUB_SA_ADMIN_SECRET ?? ''),
    logs: () => [],
    node: undefined as never,
    stop: async () => {},
    call: caller(url, answers),
  };
}
