// /auth: registration (two steps) and recovery, login for every account class and refresh,
// delegation by access codes and implicit authorize, the admin listing of accounts, and the keys
// that verify tokens. Each concern is a file of its own; this one composes them, in the order
// /openapi.json lists them. Handlers are thin: they validate (the schemas are the ones
// /openapi.json publishes), authorize, run a decision of domain/accounts.ts or domain/logins.ts
// through the event store, and shape the answer.
import { accountKeys } from '../../projections/accounts.ts';
import type { HubContext, Page } from '../context.ts';
import { PAGE_QUERY, pageSchema } from '../context.ts';
import { forbidden } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import { accountRecord } from './accounts.ts';
import { type AuthContext, authContext } from './context.ts';
import { delegationRoutes } from './delegation.ts';
import { loginRoutes } from './login.ts';
import { requireAccountType, requireFirstParty } from './middleware.ts';
import { recoveryRoutes } from './recovery.ts';
import { registrationRoutes } from './registration.ts';
import { ACCOUNT } from './schemas.ts';

export function authRoutes(hub: HubContext) {
  const a = authContext(hub);
  const parts = [
    registrationRoutes(a),
    loginRoutes(a),
    delegationRoutes(a),
    accountRoutes(a),
    recoveryRoutes(a),
  ];
  return (routes: Routes) => {
    for (const add of parts) add(routes);
    routes.add({
      method: 'get',
      path: '/auth/.well-known/jwks.json',
      tag: 'auth',
      summary: 'The public keys that verify Device Hub tokens (for services checking delegated tokens).',
      security: 'none',
      responses: {
        200: {
          description: 'A JWK set.',
          schema: { type: 'object', properties: { keys: { type: 'array' } } },
        },
      },
      handler: (ctx) => {
        ctx.body = { keys: [hub.keys.jwk] };
      },
    });
  };
}

/** GET /auth/accounts: one's own account, or (an admin) every account, from the read model. */
function accountRoutes(a: AuthContext) {
  const { hub, adminToken, findAccount } = a;
  return (routes: Routes) => {
    routes.add({
      method: 'get',
      path: '/auth/accounts',
      tag: 'auth',
      summary: 'With ?asadmin=yes (admins only): every account, paginated. Without: your own account.',
      description:
        'For accounts (users and services): a device has none (403). The admin listing (asadmin=yes) is served from a read model and waits for X-Hub-Min-Position; your own account comes from the event store.',
      waitsForWrites: true,
      security: 'bearer',
      middleware: [requireFirstParty, requireAccountType('USER', 'SERVICE')],
      query: s.object({ properties: { asadmin: s.enum(['yes', 'no']), ...PAGE_QUERY } }),
      responses: { 200: { description: 'A page of account records.', schema: pageSchema(ACCOUNT) } },
      handler: async (ctx, { query }) => {
        const claims = ctx.state.auth!;
        if (query.asadmin !== 'yes') {
          const own = await findAccount(claims.sub);
          const page: Page<unknown> = {
            items: own ? [accountRecord(own)] : [],
            total: own ? 1 : 0,
            limit: query.limit,
            skip: query.skip,
          };
          ctx.body = page;
          return;
        }
        if (!adminToken(claims)) throw forbidden('Only admins may list all accounts.');
        await hub.consistency.readable(ctx, ['accounts']);
        const rs = hub.readStore;
        const generation = await rs.activeGeneration('accounts');
        const ids = await rs.range('accounts', generation, accountKeys.byCreated, {
          offset: query.skip,
          limit: query.limit,
        });
        const items = (
          await Promise.all(ids.map((id) => rs.get('accounts', generation, accountKeys.record(id))))
        ).filter(Boolean);
        ctx.body = {
          items,
          total: await rs.count('accounts', generation, accountKeys.byCreated),
          limit: query.limit,
          skip: query.skip,
        };
      },
    });
  };
}
