// /callbacks: change notifications for operators and the internal pipeline, with HTTP Basic
// `saadmin` and HUB_SA_ADMIN_SECRET (an empty secret refuses everyone). A notification older than
// the entity's last change (`timemodified`) is ignored: 409 stale_notification.
import type { Middleware } from 'koa';
import { DEVICE_PRN, deviceStream, devices } from '../../domain/devices.ts';
import { decideCarryPublicity, trailStream, trails } from '../../domain/trails.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import { carryPublicity } from '../../processors/followers/publicity.ts';
import { deviceKeys } from '../../projections/devices.ts';
import { operatorCheck } from '../auth/operator.ts';
import type { HubContext } from '../context.ts';
import { REV, stepBookkeeping } from '../devices/records.ts';
import { HttpError, notFound, unprocessable } from '../errors.ts';
import { parseRfc3339 } from '../http.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';

const QUERY = s.object({
  properties: {
    timemodified: s.string({
      description:
        'When the notification was made: RFC 3339 with up to nine fractional digits, URL-encoded (Z for UTC, %2B for +; an unencoded + is read too). A date or time that does not exist is 422.',
    }),
  },
});

const ERROR = { $ref: '#/components/schemas/Error' };
/** The answers every callback shares besides its 200. */
const REFUSALS = {
  401: {
    description: 'Not the operator (HTTP Basic `saadmin`), or HUB_SA_ADMIN_SECRET is empty.',
    schema: ERROR,
  },
  429: {
    description:
      'Too many wrong credentials from this address (HUB_CALLBACKS_FAILURES_PER_MINUTE): try again after `Retry-After` seconds.',
    schema: ERROR,
  },
  404: { description: 'No such entity.', schema: ERROR },
  409: {
    description:
      '`stale_notification`: the entity changed after `timemodified`, and the notification is ignored (nothing is changed).',
    schema: ERROR,
  },
  422: { description: '`timemodified` is not an RFC 3339 timestamp.', schema: ERROR },
};

export function callbackRoutes(hub: HubContext) {
  const { store } = hub;
  const isOperator = operatorCheck(
    hub.config.saAdminSecret,
    hub.fixedWindows,
    hub.config.callbacksFailuresPerMinute,
  );
  const basic: Middleware = async (ctx, next) => {
    await isOperator(ctx);
    await next();
  };

  function stale(raw: string | undefined, modifiedMs: number): void {
    if (raw === undefined) return;
    const at = parseRfc3339(raw);
    if (at === undefined)
      throw unprocessable('timemodified is not an RFC 3339 timestamp.', [
        { field: 'timemodified', problem: 'is not RFC 3339' },
      ]);
    if (BigInt(modifiedMs) * 1_000_000n > at) {
      throw new HttpError(
        409,
        'stale_notification',
        `Ignored: the entity changed at ${new Date(modifiedMs).toISOString()}, after this notification.`,
      );
    }
  }

  /** A device by id, PRN, or nick when that nick names one device only. */
  async function deviceId(ref: string): Promise<string> {
    const id = DEVICE_PRN.exec(ref)?.[1] ?? ref;
    if (/^[a-f0-9]{24}$/.test(id)) return id;
    const rs = hub.readStore;
    const g = await rs.activeGeneration('devices');
    const named = await rs.range('devices', g, deviceKeys.byNick(ref));
    // Deleted devices give their nick back; those deleted before their event said which nick
    // are still in the index, and are skipped here.
    const records = await Promise.all(named.map((id) => rs.get('devices', g, deviceKeys.record(id))));
    const ids = named.filter((_, i) => records[i] && !(records[i] as { garbage?: boolean }).garbage);
    if (ids.length > 1)
      throw new HttpError(409, 'ambiguous', `Several devices have the nick ${ref}; use the device id.`);
    if (ids.length === 0) throw notFound('No such device.');
    return ids[0]!;
  }

  return (routes: Routes) => {
    routes.add({
      method: 'put',
      path: '/callbacks/devices/{id}',
      tag: 'callbacks',
      summary: 'A device changed: mark its steps public or non-public to match it, and count them.',
      description:
        "`id`: the device id, its PRN, or a nick that names one device (several: 409 `ambiguous`). Its steps' public and garbage flags are set to the device's. `timemodified` is compared with the last change of the device's ownership, public flag or garbage mark (not its metadata).",
      security: 'basic',
      middleware: [basic],
      query: QUERY,
      responses: {
        200: {
          description: 'What was marked.',
          schema: {
            type: 'object',
            required: ['device_id', 'steps_marked_as_public', 'steps_marked_as_non_public'],
            properties: {
              device_id: { type: 'string' },
              steps_marked_as_public: { type: 'integer' },
              steps_marked_as_non_public: { type: 'integer' },
            },
          },
        },
        ...REFUSALS,
        409: {
          description: `${REFUSALS[409].description} \`ambiguous\`: several devices have this nick; use the id.`,
          schema: ERROR,
        },
      },
      handler: async (ctx, { query }) => {
        const id = await deviceId(ctx.params.id!);
        const { state: device } = await load(store, deviceStream(id), devices);
        if (!device.id) throw notFound('No such device.');
        stale(query.timemodified, device.flagsModified);
        const carried = await carryPublicity(store, id);
        if (carried.position) await hub.consistency.written(ctx, carried.position);
        ctx.body = {
          device_id: id,
          steps_marked_as_public: carried.markedPublic,
          steps_marked_as_non_public: carried.markedNonPublic,
        };
      },
    });

    routes.add({
      method: 'put',
      path: '/callbacks/steps/{id}',
      tag: 'callbacks',
      summary:
        'A step changed: bring its public and garbage flags in line with its device, and answer its bookkeeping record.',
      description:
        "`id`: `<device id>-<rev>`, the rev in decimal. `timemodified` is compared with the step's push or the last setting of its flags.",
      security: 'basic',
      middleware: [basic],
      query: QUERY,
      responses: {
        200: {
          description: "The step's bookkeeping record.",
          schema: {
            type: 'object',
            properties: {
              id: { type: 'string' },
              owner: { type: 'string' },
              device: { type: 'string' },
              objects: {
                type: 'array',
                items: { type: 'string' },
                description: 'sha256 of every object the step references.',
              },
              public: { type: 'boolean' },
              garbage: { type: 'boolean' },
            },
          },
        },
        ...REFUSALS,
      },
      handler: async (ctx, { query }) => {
        const m = /^([a-f0-9]{24})-(\d+)$/.exec(ctx.params.id!);
        if (!m || !REV.test(m[2]!)) throw notFound('No such step.');
        const [, id, revText] = m;
        const rev = Number(revText);
        const { state: device } = await load(store, deviceStream(id!), devices);
        const { state: trail } = await load(store, trailStream(id!), trails);
        const step = trail.steps.get(rev);
        if (!device.id || !step) throw notFound('No such step.');
        stale(query.timemodified, step.flagsModified);
        const command = { deviceId: id!, public: device.public, garbage: device.garbage, rev };
        const { appended, state } = await handle(store, trailStream(id!), trails, (t) => ({
          events: decideCarryPublicity(command, t),
          result: undefined,
        }));
        if (appended) await hub.consistency.written(ctx, appended.position);
        const latest = appended ? (await load(store, trailStream(id!), trails)).state : state;
        ctx.body = stepBookkeeping(device, latest.steps.get(rev)!);
      },
    });
  };
}
