// The operator page's calls to the admin API, in one place: the projection routes were being built
// beside the console (docs/console.md), so their paths and field names are read here alone. The
// fields are taken in snake_case or camelCase, and a list as `items` or as a bare array.
import { enc, query, request } from './api.js';

export const PROJECTIONS = '/admin/projections';

export const listAccounts = (skip, limit) =>
  request('GET', `/auth/accounts${query({ asadmin: 'yes', limit, skip })}`);

/** Every read model's status. */
export async function listProjections() {
  const answer = await request('GET', PROJECTIONS);
  const items = Array.isArray(answer) ? answer : (answer?.items ?? answer?.projections ?? []);
  return items.map(normalise);
}

export const projection = async (name) => normalise(await request('GET', `${PROJECTIONS}/${enc(name)}`));

/** Starts a replay (202); its progress is read with projection(name). */
export const replay = (name) => request('POST', `${PROJECTIONS}/${enc(name)}/replay`, {});

const pick = (o, ...names) => names.map((n) => o?.[n]).find((v) => v !== undefined && v !== null);

/** One projection's status, whatever the spelling of its fields. */
function normalise(p) {
  const head = pick(p, 'head', 'head_position');
  const checkpoint = pick(p, 'checkpoint', 'position');
  const r = pick(p, 'replay', 'progress', 'replay_progress');
  const lagEvents =
    pick(p, 'lag_events', 'lagEvents', 'lag') ?? (head !== undefined ? head - checkpoint : undefined);
  return {
    name: p.name,
    version: p.version,
    generation: p.generation,
    checkpoint,
    head,
    lagEvents: typeof lagEvents === 'object' ? pick(lagEvents, 'events') : lagEvents,
    lagSeconds: pick(p, 'lag_seconds', 'lagSeconds') ?? pick(p.lag, 'seconds'),
    replay: r
      ? {
          generation: pick(r, 'generation'),
          checkpoint: pick(r, 'checkpoint', 'position') ?? 0,
          head: pick(r, 'head') ?? head ?? 0,
          status: pick(r, 'status', 'state'),
          rate: pick(r, 'rate', 'events_per_second', 'eventsPerSecond'),
          eta: pick(r, 'eta_seconds', 'etaSeconds'),
        }
      : null,
  };
}
