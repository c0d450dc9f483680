// GET /webhooks/events/stream: the account's event log, live, as Server-Sent Events (what `hub
// webhooks listen` forwards to a receiver on the developer's machine). Each event's SSE id is its
// position in the log's own order (processors/stream/eventlog.ts), so a client that reconnects
// with Last-Event-ID reads on exactly after the last event it got, whichever API process it
// reaches. New entries are found by reading the log from the stream's position every POLL_MS:
// the one way that works on every adapter, and with the API apart from the processors that write.
import { PassThrough } from 'node:stream';
import type { Context } from 'koa';
import { EVENT_TYPES } from '../../processors/stream/derive.ts';
import { LOG_POSITION, type LogPosition } from '../../processors/stream/eventlog.ts';
import { matches, type SubscriptionFilter } from '../../processors/stream/processor.ts';
import { requireScope } from '../auth/middleware.ts';
import { badRequest, HttpError, unprocessable } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { EVENT, publicEvent } from './deliveries.ts';
import type { WebhookRoutes } from './routes.ts';

/** How often an open stream reads the log for what was appended since. */
const POLL_MS = 250;
/** Events read from the log at a time. */
const BATCH = 200;
const DEVICE_ID = /^[a-f0-9]{24}$/;
const DEVICE_PRN = /^prn:::devices:\/[a-f0-9]{24}$/;

const LIST = (what: string) =>
  s.string({ maxLength: 8192, description: `Comma-separated: ${what}. Absent: no filter.` });
const STREAM_QUERY = s.object({
  properties: {
    event_types: LIST('only events of these types (as a subscription’s `event_types`)'),
    devices: LIST('only events about these devices, by id or PRN (as a subscription’s `devices`)'),
    device_meta_keys: LIST('device-meta updates only when one of these keys changed'),
    user_meta_keys: LIST('user-meta updates only when one of these keys changed'),
    last_event_id: s.string({
      maxLength: 128,
      description: 'Where to resume, for clients that cannot send the Last-Event-ID header (which wins).',
    }),
  },
});

const split = (raw: string | undefined) => (raw ?? '').split(',').filter((v) => v !== '');

/** The stream's filter as a subscription's, so that it matches exactly what one would deliver. */
function filterOf(owner: string, query: Record<string, string | undefined>): SubscriptionFilter {
  const types = split(query.event_types);
  const unknown = types.find((t) => !(t in EVENT_TYPES));
  if (unknown !== undefined)
    throw unprocessable(`Invalid query: event_types: ${unknown} is not an event type.`, [
      { field: 'event_types', problem: `${unknown} is not an event type` },
    ]);
  const devices = split(query.devices).map((d) => {
    if (DEVICE_ID.test(d)) return `prn:::devices:/${d}`;
    if (DEVICE_PRN.test(d)) return d;
    throw unprocessable(`Invalid query: devices: ${d} is not a device id or PRN.`, [
      { field: 'devices', problem: `${d} is not a device id or PRN` },
    ]);
  });
  return {
    id: 'stream',
    owner,
    enabled: true,
    event_types: types.length > 0 ? types : Object.keys(EVENT_TYPES),
    devices,
    device_meta_keys: split(query.device_meta_keys),
    user_meta_keys: split(query.user_meta_keys),
  };
}

/** The streams open per account in a process: one taken before a stream opens, given back when it
 * ends. An embedded hub's API threads share the main thread's (api/threads.ts). */
export class StreamSlots {
  private readonly open = new Map<string, number>();

  /** 0 when taken, else how many `owner` has open (`max` or more). */
  async take(owner: string, max: number): Promise<number> {
    const n = this.open.get(owner) ?? 0;
    if (n >= max) return n;
    this.open.set(owner, n + 1);
    return 0;
  }

  async give(owner: string): Promise<void> {
    const left = (this.open.get(owner) ?? 1) - 1;
    if (left > 0) this.open.set(owner, left);
    else this.open.delete(owner);
  }
}

export function eventStreamRoutes({ hub }: WebhookRoutes) {
  const { config, logger, eventLog } = hub;
  const slots = hub.streamSlots ?? new StreamSlots();
  /** How to end each open stream: the server is closing (api/http.ts emits `closing` on the app). */
  const enders = new Set<() => void>();
  const hooked = new WeakSet<object>();

  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/webhooks/events/stream',
      tag: 'webhooks',
      summary:
        "Your account's event log, live: Server-Sent Events from now on, or from the Last-Event-ID sent.",
      description: [
        'Each event of the log as it is appended (every derived event, matched by a subscription or not), filtered like a subscription, as `text/event-stream`: `id` is the event’s position in the log, `event` its type, `data` the event as GET /webhooks/events/{eid} answers it.',
        'Reconnect with the header `Last-Event-ID` (or `last_event_id`) set to the last id received: the stream goes on with the event after it, nothing skipped or repeated (back to the log’s retention). Without one, it starts at the log’s end.',
        `A comment line (\`: heartbeat\`) comes after HUB_EVENT_STREAM_HEARTBEAT_MS without events. The stream ends when the token expires and when the server shuts down: reconnect (with a fresh token). At most HUB_EVENT_STREAMS_PER_ACCOUNT streams per account and API process (429 beyond).`,
      ].join('\n\n'),
      security: 'bearer',
      scopes: requireScope('webhooks', 'read'),
      query: STREAM_QUERY,
      responses: {
        200: {
          description: 'The stream: `id`, `event` and `data` lines per event (the schema is of `data`).',
          mediaType: 'text/event-stream',
          schema: EVENT,
        },
        400: { description: '`bad_request`: a Last-Event-ID this stream did not send.' },
        429: {
          description: '`too_many_streams`: the account has HUB_EVENT_STREAMS_PER_ACCOUNT streams open here.',
        },
      },
      handler: async (ctx, { query }) => {
        const owner = ctx.state.auth!.sub;
        const filter = filterOf(owner, query);
        const resume = ctx.get('Last-Event-ID') || query.last_event_id;
        if (resume && !LOG_POSITION.test(resume))
          throw badRequest('Last-Event-ID is not an id this stream sent.', [
            { field: 'Last-Event-ID', problem: 'not an id of this stream' },
          ]);
        const from = resume || (await eventLog.head());
        const open = await slots.take(owner, config.eventStreamsPerAccount);
        if (open > 0)
          throw new HttpError(
            429,
            'too_many_streams',
            `Your account has ${open} event streams open (HUB_EVENT_STREAMS_PER_ACCOUNT); close one first.`,
            { headers: { 'Retry-After': '5' } },
          );
        if (!hooked.has(ctx.app)) {
          hooked.add(ctx.app);
          ctx.app.on('closing', () => {
            for (const end of enders) end();
          });
        }
        const body = new PassThrough();
        ctx.status = 200;
        ctx.type = 'text/event-stream';
        ctx.set({ 'Cache-Control': 'no-cache, no-transform', 'X-Accel-Buffering': 'no' });
        ctx.body = body;
        // The headers go out at once, with a comment: a client knows the stream is open.
        body.write(': open\n\n');
        void pump(ctx, body, owner, filter, from).finally(
          () => slots.give(owner).catch(() => {}), // the main thread gone: the process is stopping
        );
      },
    });
  };

  /** Reads the log and writes what matches until the client goes, the token expires or the
   * server closes. A failure of the log ends the stream: the client resumes from its last id. */
  async function pump(
    ctx: Context,
    body: PassThrough,
    owner: string,
    filter: SubscriptionFilter,
    from: LogPosition,
  ): Promise<void> {
    let ended = false;
    let wake: () => void = () => {};
    const end = () => {
      ended = true;
      wake();
    };
    enders.add(end);
    body.once('close', end);
    ctx.req.once('close', end);
    const expires = ctx.state.auth!.exp * 1000;
    let position = from;
    let lastWrite = Date.now();
    const write = async (text: string) => {
      lastWrite = Date.now();
      if (!body.write(text))
        await new Promise<void>((resolve) => {
          const go = () => {
            body.off('drain', go);
            body.off('close', go);
            resolve();
          };
          body.on('drain', go);
          body.on('close', go);
        });
    };
    try {
      while (!ended && Date.now() < expires) {
        const tail = await eventLog.tail(owner, position, BATCH);
        for (const { event, position: at } of tail.items) {
          if (ended) break;
          if (matches(filter, event))
            await write(`id: ${at}\nevent: ${event.type}\ndata: ${JSON.stringify(publicEvent(event))}\n\n`);
          position = at;
        }
        if (ended) break;
        position = tail.position;
        if (tail.more) continue;
        if (Date.now() - lastWrite >= config.eventStreamHeartbeatMs) await write(': heartbeat\n\n');
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, Math.min(POLL_MS, Math.max(0, expires - Date.now())));
          wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
    } catch (err) {
      logger.warn({ err: (err as Error).message, owner }, 'event stream ended: the event log did not answer');
    } finally {
      enders.delete(end);
      body.end();
    }
  }
}
