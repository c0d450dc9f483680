// `hub webhooks listen`: a receiver on the developer's machine gets the account's events as a
// subscription's receiver would, without a public URL. It logs in, opens the live event stream
// (GET /webhooks/events/stream) and POSTs each event to --forward-to, signed as the dispatcher
// signs (processors/delivery/attempt.ts: deliveryRequest) with a secret made here and printed at
// start. The hub's egress rules do not apply: this process, not the hub, makes the request, so a
// loopback URL is what it is for. A dropped stream is opened again from the last event forwarded.
import { randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';
import { VERSION } from '../api/app.ts';
import { deliveryRequest } from '../processors/delivery/attempt.ts';
import { newSigningSecret, WebhookSigner } from '../processors/delivery/signing.ts';
import { EVENT_TYPES, type WebhookEvent } from '../processors/stream/derive.ts';

export const LISTEN_HELP = `Usage: hub webhooks listen --forward-to <url> [options]

Forwards your account's events, live, to a receiver on this machine, each POSTed and signed exactly
as a subscription's deliveries are (Webhook-Id, Webhook-Timestamp, Webhook-Signature) with a secret
made at start and printed: give it to your receiver's verification. One line per event: its type,
its id, the receiver's status and how long it took. A dropped stream is opened again where it left.

  --forward-to <url>   Where to POST each event (http://localhost:3000/hooks).
  --hub <url>          The hub's API (default: HUB_URL, else http://127.0.0.1:8080).
  --token <jwt>        A token with a webhooks read scope (default: HUB_TOKEN). Or:
  --username <nick>    Log in as this user (default: HUB_USERNAME), the password from HUB_PASSWORD.
  --events <types>     Only these event types, comma-separated (default: all).
  --device <id>        Only events about this device (id or PRN); repeat or separate by commas.
  --timeout <ms>       How long the receiver may take to answer (default 10000).

Ctrl-C stops it.`;

/** One event of a text/event-stream. */
export interface StreamEvent {
  id: string;
  event: string;
  data: string;
}

/**
 * Reads a text/event-stream body (the WHATWG rules: fields `id`, `event`, `data`, comment lines
 * starting with a colon) and calls `onEvent` per event, waiting for it before reading on.
 */
export async function readEventStream(
  body: ReadableStream<Uint8Array>,
  onEvent: (e: StreamEvent) => Promise<void> | void,
  onComment: (text: string) => void = () => {},
): Promise<void> {
  const decoder = new TextDecoder();
  let buffered = '';
  let id = '';
  let event = '';
  let data: string[] = [];
  for await (const chunk of body) {
    buffered += decoder.decode(chunk, { stream: true });
    for (;;) {
      const end = buffered.search(/\r\n|\n|\r/);
      if (end < 0) break;
      // A lone \r at the end may be the first half of \r\n: wait for the next chunk.
      if (buffered[end] === '\r' && end === buffered.length - 1) break;
      const line = buffered.slice(0, end);
      buffered = buffered.slice(end + (buffered.startsWith('\r\n', end) ? 2 : 1));
      if (line === '') {
        if (data.length > 0) await onEvent({ id, event: event || 'message', data: data.join('\n') });
        event = '';
        data = [];
        continue;
      }
      if (line.startsWith(':')) {
        onComment(line.slice(1).trim());
        continue;
      }
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? '' : line.slice(colon + (line[colon + 1] === ' ' ? 2 : 1));
      if (field === 'id') id = value;
      else if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
  }
}

interface Options {
  forwardTo: URL;
  hub: string;
  token: string | undefined;
  username: string | undefined;
  password: string | undefined;
  query: URLSearchParams;
  timeoutMs: number;
}

/** The claims a token says it holds (read, not verified: the hub verifies it). */
function claimsOf(token: string): { sub?: string; exp?: number } {
  try {
    return JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8'));
  } catch {
    return {};
  }
}

class Refused extends Error {}

const say = (line: string) => process.stdout.write(`${line}\n`);
const complain = (line: string) => process.stderr.write(`hub: ${line}\n`);

/** The hub's JSON error as one line. */
async function problem(res: Response): Promise<string> {
  const text = await res.text();
  try {
    const body = JSON.parse(text) as { error?: string; message?: string };
    return `${res.status} ${body.error ?? ''}: ${body.message ?? text}`;
  } catch {
    return `${res.status}: ${text.slice(0, 200)}`;
  }
}

export async function listenCommand(args: string[], env = process.env): Promise<number> {
  let values: Record<string, string | string[] | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        'forward-to': { type: 'string' },
        hub: { type: 'string' },
        token: { type: 'string' },
        username: { type: 'string' },
        events: { type: 'string' },
        device: { type: 'string', multiple: true },
        timeout: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (err) {
    complain(`${(err as Error).message} (see hub webhooks listen --help)`);
    return 2;
  }
  if (values.help) {
    say(LISTEN_HELP);
    return 0;
  }
  const options = parseOptions(values, env);
  if (typeof options === 'string') {
    complain(`${options} (see hub webhooks listen --help)`);
    return 2;
  }
  return listen(options);
}

function parseOptions(
  values: Record<string, string | string[] | boolean | undefined>,
  env: NodeJS.ProcessEnv,
): Options | string {
  const raw = values['forward-to'] as string | undefined;
  if (!raw) return '--forward-to is required';
  let forwardTo: URL;
  try {
    forwardTo = new URL(raw);
  } catch {
    return `--forward-to ${raw} is not a URL`;
  }
  if (forwardTo.protocol !== 'http:' && forwardTo.protocol !== 'https:')
    return '--forward-to must be an http or https URL';
  const hub = ((values.hub as string | undefined) ?? env.HUB_URL ?? 'http://127.0.0.1:8080').replace(
    /\/$/,
    '',
  );
  const token = (values.token as string | undefined) ?? env.HUB_TOKEN;
  const username = (values.username as string | undefined) ?? env.HUB_USERNAME;
  const password = env.HUB_PASSWORD;
  if (!token && !(username && password))
    return 'give a token (--token or HUB_TOKEN), or --username (or HUB_USERNAME) with HUB_PASSWORD';
  const query = new URLSearchParams();
  const events = (values.events as string | undefined)?.split(',').filter(Boolean) ?? [];
  const unknown = events.find((t) => !(t in EVENT_TYPES));
  if (unknown) return `--events: ${unknown} is not an event type (${Object.keys(EVENT_TYPES).join(', ')})`;
  if (events.length > 0) query.set('event_types', events.join(','));
  const devices = ((values.device as string[] | undefined) ?? [])
    .flatMap((d) => d.split(','))
    .filter(Boolean);
  if (devices.length > 0) query.set('devices', devices.join(','));
  const timeoutMs = Number((values.timeout as string | undefined) ?? 10_000);
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs < 1) return '--timeout must be a positive integer (ms)';
  return { forwardTo, hub, token, username, password, query, timeoutMs };
}

async function listen(o: Options): Promise<number> {
  const stopped = new AbortController();
  const stop = () => stopped.abort();
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);

  /** A token: the one given, or a login's (again when it expired). */
  let token = o.token;
  const login = async (): Promise<string> => {
    const res = await fetch(`${o.hub}/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ username: o.username, password: o.password }),
      signal: stopped.signal,
    });
    if (res.status !== 200) throw new Refused(`login as ${o.username} refused: ${await problem(res)}`);
    return ((await res.json()) as { token: string }).token;
  };
  const fresh = async (): Promise<string> => {
    const exp = token ? claimsOf(token).exp : undefined;
    if (token && (exp === undefined || exp * 1000 - Date.now() > 120_000)) return token;
    if (o.username && o.password) {
      token = await login();
      return token;
    }
    if (!token) throw new Refused('no token');
    // A given token near its end: refreshed (GET /auth/login) while the hub allows.
    const res = await fetch(`${o.hub}/auth/login`, {
      headers: { authorization: `Bearer ${token}` },
      signal: stopped.signal,
    });
    if (res.status !== 200)
      throw new Refused(`the token expires and was not refreshed: ${await problem(res)}`);
    token = ((await res.json()) as { token: string }).token;
    return token;
  };

  const secret = newSigningSecret();
  const signer = new WebhookSigner([secret]);
  let last: string | undefined;
  let backoffMs = 500;
  const backOff = async () => {
    backoffMs = Math.min(backoffMs * 2, 10_000);
    await pause(backoffMs, stopped.signal);
  };
  // The hub ends a stream when its token expires: a new one is at hand before then.
  const renew = setInterval(() => fresh().catch(() => {}), 30_000);
  try {
    token = await fresh();
    say(`Forwarding the events of ${claimsOf(token).sub ?? 'your account'} to ${o.forwardTo.href}`);
    say(`Webhook signing secret: ${secret}`);
    while (!stopped.signal.aborted) {
      let res: Response;
      try {
        token = await fresh();
        res = await fetch(`${o.hub}/webhooks/events/stream?${o.query}`, {
          headers: {
            authorization: `Bearer ${token}`,
            accept: 'text/event-stream',
            ...(last ? { 'last-event-id': last } : {}),
          },
          signal: stopped.signal,
        });
      } catch (err) {
        if (stopped.signal.aborted || err instanceof Refused) throw err;
        complain(`the hub does not answer (${(err as Error).message}); trying again`);
        await backOff();
        continue;
      }
      if (res.status === 401 && o.username && o.password) {
        token = undefined; // logged in again at the next turn
        await res.body?.cancel();
        continue;
      }
      if (res.status === 429 || res.status >= 500) {
        complain(`the stream was refused (${await problem(res)}); trying again`);
        await backOff();
        continue;
      }
      if (res.status !== 200 || !res.body) throw new Refused(`the stream was refused: ${await problem(res)}`);
      if (last === undefined) say('Ready: waiting for events (Ctrl-C to stop)');
      backoffMs = 500;
      try {
        await readEventStream(res.body, async (e) => {
          await forward(JSON.parse(e.data) as WebhookEvent);
          last = e.id;
        });
      } catch (err) {
        if (stopped.signal.aborted) break;
        complain(`the stream was cut (${(err as Error).message}); reconnecting`);
      }
      if (!stopped.signal.aborted) await pause(backoffMs, stopped.signal);
    }
    return 0;
  } catch (err) {
    if (stopped.signal.aborted) return 0;
    complain(err instanceof Refused ? err.message : String((err as Error).stack ?? err));
    return 1;
  } finally {
    clearInterval(renew);
    process.off('SIGINT', stop);
    process.off('SIGTERM', stop);
  }

  async function forward(event: WebhookEvent): Promise<void> {
    const { body, headers } = deliveryRequest(
      event,
      `del_${randomBytes(12).toString('hex')}`,
      signer,
      VERSION,
    );
    const started = performance.now();
    let outcome: string;
    try {
      const res = await fetch(o.forwardTo, {
        method: 'POST',
        headers,
        body,
        redirect: 'manual',
        signal: AbortSignal.timeout(o.timeoutMs),
      });
      await res.arrayBuffer();
      outcome = String(res.status);
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code;
      const timedOut = (err as Error).name === 'TimeoutError';
      outcome = `failed (${cause ?? (timedOut ? 'timeout' : (err as Error).message)})`;
    }
    const ms = Math.round(performance.now() - started);
    say(`${new Date().toISOString()}  ${event.type.padEnd(26)}  ${event.id}  -> ${outcome} in ${ms} ms`);
  }
}

const pause = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
