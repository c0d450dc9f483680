// /admin: the operators' routes, for admins only (HUB_ADMINS, their own login token). The
// projections' status and replays: what `hub projections status` and `hub projections replay` do,
// through the same code (projections/replay.ts), for the console's operator page. A replay runs in
// the process that serves the request (API threads: their main thread), in the background.
import { type ProjectionView, ReplayRunningError } from '../../projections/replay.ts';
import { requireAdmin } from '../auth/middleware.ts';
import type { HubContext } from '../context.ts';
import { conflict, notFound } from '../errors.ts';
import type { Routes } from '../routes.ts';

const TIME = { type: ['string', 'null'], format: 'date-time' };

const REPLAY = {
  type: ['object', 'null'],
  description:
    'The replay running, or the last one this process ran, or an unfinished one the stores show (running in another process, or interrupted: asking for a replay resumes it). Null when there is none of these.',
  required: ['generation', 'position', 'head', 'percent', 'status', 'started', 'finished'],
  properties: {
    generation: { type: 'integer', description: 'The generation being built.' },
    position: { type: 'integer', description: 'The position of the log it has reached (its checkpoint).' },
    head: { type: 'integer', description: "The log's head as the replay last read it." },
    percent: { type: 'number', description: 'position / head, 0 to 100, one decimal.' },
    status: {
      enum: ['running', 'switched', 'done', 'interrupted', 'failed'],
      description:
        '`running`: catching up, reads answered from the active generation; `switched`: reads moved to the new generation, the old one is dropped after HUB_REPLAY_DROP_GRACE_MS (a new replay is refused until then); `done`; `interrupted` (the process stopped) or `failed` (the log has the reason): asking again resumes from `position`.',
    },
    started: { ...TIME, description: 'Known to the process that runs it; null elsewhere.' },
    finished: TIME,
    events_per_second: { type: ['integer', 'null'], description: 'The replay’s rate, known to its process.' },
    error: { type: 'string', description: 'When failed.' },
  },
};

const PROJECTION = {
  type: 'object',
  required: [
    'name',
    'version',
    'description',
    'generation',
    'checkpoint',
    'head',
    'lag_events',
    'lag_seconds',
    'replay',
  ],
  properties: {
    name: { type: 'string' },
    version: { type: 'integer', description: "The projection's code version." },
    description: { type: 'string' },
    generation: { type: 'integer', description: 'The active generation: the one reads are answered from.' },
    checkpoint: { type: 'integer', description: 'The position of the last event it applied.' },
    head: { type: 'integer', description: "The event store's head." },
    lag_events: { type: 'integer', description: 'head − checkpoint.' },
    lag_seconds: { type: 'number', description: 'While behind, the age of the last applied event; else 0.' },
    replay: REPLAY,
  },
};

const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());

function projectionRecord(v: ProjectionView) {
  const r = v.replay;
  return {
    name: v.name,
    version: v.version,
    description: v.description,
    generation: v.generation,
    checkpoint: v.checkpoint,
    head: v.head,
    lag_events: v.lagEvents,
    lag_seconds: Math.round(v.lagSeconds * 10) / 10,
    replay: r
      ? {
          generation: r.generation,
          position: r.position,
          head: r.head,
          percent: r.percent,
          status: r.status,
          started: iso(r.started),
          finished: iso(r.finished),
          events_per_second: r.eventsPerSecond ?? null,
          ...(r.error ? { error: r.error } : {}),
        }
      : null,
  };
}

export function adminRoutes(hub: HubContext) {
  const admins = requireAdmin(hub.config.admins);
  const ops = hub.projections;
  const unknown = (name: string) => notFound(`No projection named ${JSON.stringify(name)}.`);
  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/admin/projections',
      tag: 'admin',
      summary:
        "Every projection: version, active generation, checkpoint, lag and its replay's progress (admins).",
      description:
        'What `hub projections status` shows, read from the stores. With the embedded read models in memory (HUB_EMBEDDED_STATE=memory) they live in this process too, so they are seen here.',
      security: 'bearer',
      scopes: admins,
      responses: {
        200: {
          description: 'The projections.',
          schema: {
            type: 'object',
            required: ['items'],
            properties: { items: { type: 'array', items: PROJECTION } },
          },
        },
      },
      handler: async (ctx) => {
        ctx.body = { items: (await ops.list()).map(projectionRecord) };
      },
    });

    routes.add({
      method: 'get',
      path: '/admin/projections/{name}',
      tag: 'admin',
      summary: "One projection and its replay's progress (admins).",
      security: 'bearer',
      scopes: admins,
      responses: { 200: { description: 'The projection.', schema: PROJECTION } },
      handler: async (ctx) => {
        const view = await ops.one(ctx.params.name!);
        if (!view) throw unknown(ctx.params.name!);
        ctx.body = projectionRecord(view);
      },
    });

    routes.add({
      method: 'post',
      path: '/admin/projections/{name}/replay',
      tag: 'admin',
      summary: 'Rebuilds a projection into a new generation, then switches reads to it (admins).',
      description:
        "What `hub projections replay` does, in the background: answers at once with the replay's progress; read it at GET /admin/projections/{name}. Reads are answered from the active generation until the switch. An interrupted replay resumes where it stopped. One replay of a projection at a time, whichever process or command runs it (409). Embedded: runs inside the hub, its read models on disk or in memory alike.",
      security: 'bearer',
      scopes: admins,
      responses: {
        202: { description: 'Started: the projection with its replay.', schema: PROJECTION },
        409: { description: 'A replay of this projection is running (here, in another process or the CLI).' },
      },
      handler: async (ctx) => {
        const name = ctx.params.name!;
        let view: ProjectionView | undefined;
        try {
          view = await ops.replay(name);
        } catch (err) {
          if (err instanceof ReplayRunningError) throw conflict(err.message);
          throw err;
        }
        if (!view) throw unknown(name);
        ctx.status = 202;
        ctx.set('Location', `/admin/projections/${name}`);
        ctx.body = projectionRecord(view);
      },
    });
  };
}
