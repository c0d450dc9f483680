// /trails/{device}/steps: a device's trail of steps (revisions), pushed by its owner or the device,
// with progress that the device reports.
import {
  decidePushStep,
  decideReportProgress,
  STEP_STATUSES,
  trailStream,
  trails,
} from '../../domain/trails.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import { requireScope } from '../auth/middleware.ts';
import type { HubContext } from '../context.ts';
import { PAGE_QUERY, pageSchema } from '../context.ts';
import { forbidden, notFound } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { deviceAccess } from './access.ts';
import { REV, stepRecord } from './records.ts';

const STEP = {
  type: 'object',
  properties: {
    id: { type: 'string', description: '<device id>-<rev>' },
    device: { type: 'string' },
    owner: { type: 'string' },
    rev: { type: 'integer' },
    state: { type: 'object' },
    'commit-msg': { type: 'string' },
    objects: {
      type: 'array',
      items: { type: 'string' },
      description: 'sha256 of every object the state references.',
    },
    progress: {
      type: 'object',
      properties: {
        progress: { type: 'integer' },
        status: { enum: [...STEP_STATUSES] },
        'status-msg': { type: 'string' },
      },
    },
    public: { type: 'boolean' },
    garbage: { type: 'boolean' },
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
  },
};

export function trailRoutes(hub: HubContext) {
  const { store } = hub;
  const access = deviceAccess(store, hub.config.admins);

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/trails/{device}/steps',
      tag: 'trails',
      summary: "Push a new step (revision) to a device's trail (the owner or the device).",
      description:
        "`rev` defaults to the next one and must be it (409 otherwise). `objects` lists every sha256 (64 hex digits) found among the state's string values.",
      security: 'bearer',
      scopes: requireScope('trails', 'write'),
      body: s.object({
        required: ['state'],
        additionalProperties: false,
        properties: {
          rev: s.integer({ minimum: 0 }),
          state: s.map(),
          'commit-msg': s.string({ maxLength: 4096 }),
        },
      }),
      responses: { 200: { description: 'The step.', schema: STEP } },
      handler: async (ctx, { body }) => {
        const { device, viewer } = await access.resolve(ctx, ctx.params.device!);
        if (viewer !== 'owner' && viewer !== 'device')
          throw viewer === 'admin'
            ? forbidden('Only the owner or the device pushes steps.')
            : notFound('No such device.');
        const command = { device, rev: body.rev, state: body.state, commitMsg: body['commit-msg'] ?? '' };
        const { appended, result: rev } = await handle(store, trailStream(device.id), trails, (t) => {
          const events = decidePushStep(command, t);
          return { events, result: events[0]!.data.rev };
        });
        await hub.consistency.written(ctx, appended!.position);
        const { state } = await load(store, trailStream(device.id), trails);
        ctx.body = stepRecord(device, state.steps.get(rev)!);
      },
    });

    routes.add({
      method: 'get',
      path: '/trails/{device}/steps',
      tag: 'trails',
      summary: "The steps of a device's trail, by rev.",
      security: 'bearer',
      scopes: requireScope('trails', 'read'),
      query: s.object({ properties: PAGE_QUERY }),
      responses: { 200: { description: 'A page of steps.', schema: pageSchema(STEP) } },
      handler: async (ctx, { query }) => {
        const { device, viewer } = await access.resolve(ctx, ctx.params.device!);
        const { state } = await load(store, trailStream(device.id), trails);
        const steps = [...state.steps.values()]
          .filter((s) => viewer !== 'public' || s.public)
          .sort((a, b) => a.rev - b.rev);
        ctx.body = {
          items: steps.slice(query.skip, query.skip + query.limit).map((s) => stepRecord(device, s)),
          total: steps.length,
          limit: query.limit,
          skip: query.skip,
        };
      },
    });

    routes.add({
      method: 'get',
      path: '/trails/{device}/steps/{rev}',
      tag: 'trails',
      summary: 'One step.',
      security: 'bearer',
      scopes: requireScope('trails', 'read'),
      responses: { 200: { description: 'The step.', schema: STEP } },
      handler: async (ctx) => {
        const { device, viewer } = await access.resolve(ctx, ctx.params.device!);
        const { state } = await load(store, trailStream(device.id), trails);
        const step = REV.test(ctx.params.rev!) ? state.steps.get(Number(ctx.params.rev)) : undefined;
        if (!step || (viewer === 'public' && !step.public)) throw notFound('No such step.');
        ctx.body = stepRecord(device, step);
      },
    });

    routes.add({
      method: 'put',
      path: '/trails/{device}/steps/{rev}/progress',
      tag: 'trails',
      summary: 'The device reports progress on a step: progress (0–100), status and a message.',
      security: 'bearer',
      scopes: requireScope('trails', 'write'),
      body: s.object({
        required: ['progress', 'status'],
        additionalProperties: false,
        properties: {
          progress: s.integer({ minimum: 0, maximum: 100 }),
          status: s.enum(STEP_STATUSES),
          'status-msg': s.string({ maxLength: 4096 }),
        },
      }),
      responses: { 200: { description: 'The step.', schema: STEP } },
      handler: async (ctx, { body }) => {
        const { device, viewer } = await access.resolve(ctx, ctx.params.device!);
        if (viewer !== 'device')
          throw viewer === 'public'
            ? notFound('No such device.')
            : forbidden('Only the device itself reports progress.');
        if (!REV.test(ctx.params.rev!)) throw notFound('No such step.');
        const rev = Number(ctx.params.rev);
        const command = {
          device,
          rev,
          progress: body.progress,
          status: body.status,
          statusMsg: body['status-msg'] ?? '',
        };
        const { appended } = await handle(store, trailStream(device.id), trails, (t) => ({
          events: decideReportProgress(command, t),
          result: undefined,
        }));
        if (appended) await hub.consistency.written(ctx, appended.position);
        const { state } = await load(store, trailStream(device.id), trails);
        ctx.body = stepRecord(device, state.steps.get(rev)!);
      },
    });
  };
}
