// The operator page's calls to the admin API (docs/projections.md, "The admin API"), in one place,
// with the status mapped to the names the page uses.
import { enc, query, request } from './api.js';

export const PROJECTIONS = '/admin/projections';

export const listAccounts = (skip, limit) =>
  request('GET', `/auth/accounts${query({ asadmin: 'yes', limit, skip })}`);

/** Every read model's status. */
export async function listProjections() {
  const answer = await request('GET', PROJECTIONS);
  return answer.items.map(normalise);
}

export const projection = async (name) => normalise(await request('GET', `${PROJECTIONS}/${enc(name)}`));

/** Starts a replay (202); its progress is read with projection(name). */
export const replay = (name) => request('POST', `${PROJECTIONS}/${enc(name)}/replay`, {});

/** One projection's status as GET /admin/projections/{name} answers it. */
function normalise(p) {
  const r = p.replay;
  return {
    name: p.name,
    version: p.version,
    generation: p.generation,
    checkpoint: p.checkpoint,
    head: p.head,
    lagEvents: p.lag_events,
    lagSeconds: p.lag_seconds,
    replay: r
      ? {
          generation: r.generation,
          checkpoint: r.position ?? 0,
          head: r.head ?? p.head ?? 0,
          // running, switched (reads moved; the old generation is dropped soon), done, interrupted, failed
          status: r.status,
          rate: r.events_per_second,
          error: r.error,
        }
      : null,
  };
}
