// Delegation: a user grants a service scopes by a single-use access code, which the service swaps
// for a long-lived delegated token; and implicit authorize, which issues a registered app a token
// for the user straight away.

import { appStream, apps } from '../../domain/apps.ts';
import {
  codeStream,
  codes,
  decideAppScopes,
  decideIssueAccessCode,
  decideRedeemAccessCode,
  refuseEndedGrant,
} from '../../domain/logins.ts';
import { handle, load } from '../../infra/eventstore/aggregate.ts';
import { secretToken, sha256 } from '../../infra/secrets.ts';
import { forbidden, unauthorized, unprocessable } from '../errors.ts';
import type { Routes } from '../routes.ts';
import { s } from '../schema.ts';
import type { AuthContext } from './context.ts';
import { requireFirstParty } from './middleware.ts';
import { GRANTED_SCOPES, tokenResponse } from './schemas.ts';
import { parseScopes, SCOPE_NAME, SERVICE_PRN, signToken } from './tokens.ts';

export function delegationRoutes(a: AuthContext) {
  const { hub, findAccount, loadAccount, loginHolds } = a;
  const { store, config, keys } = hub;

  return (routes: Routes) => {
    routes.add({
      method: 'post',
      path: '/auth/code',
      tag: 'auth',
      summary: 'Grant a service scopes on your behalf: answers a short-lived, single-use access code.',
      security: 'bearer',
      middleware: [requireFirstParty],
      body: s.object({
        required: ['service', 'scopes'],
        additionalProperties: false,
        properties: {
          service: s.string({
            pattern: SERVICE_PRN.source,
            description: 'The service PRN, prn:<domain>:auth:/<name>.',
          }),
          scopes: s.string({
            minLength: 1,
            maxLength: 1024,
            description: '`*` for all, or scope names separated by spaces or commas.',
          }),
        },
      }),
      responses: {
        200: {
          description: 'The code; the service swaps it at POST /auth/token.',
          schema: {
            type: 'object',
            required: ['code'],
            properties: { code: { type: 'string' }, expires_in: { type: 'integer' } },
          },
        },
      },
      handler: async (ctx, { body }) => {
        const claims = ctx.state.auth!;
        if (claims.type !== 'USER' || claims.act)
          throw forbidden('Only users, acting for themselves, may grant access codes.');
        await loginHolds(claims);
        const scopes = parseScopes(body.scopes);
        if (scopes.length === 0)
          throw unprocessable('Name at least one scope.', [{ field: 'scopes', problem: 'names no scope' }]);
        const bad = scopes.find((s) => !SCOPE_NAME.test(s));
        if (bad)
          throw unprocessable(`Unknown scope ${bad}.`, [
            { field: 'scopes', problem: `${bad} is not a scope name` },
          ]);
        const command = {
          service: await findAccount(body.service),
          user: await findAccount(claims.sub),
          scopes,
          expires: Date.now() + config.accessCodeTtlS * 1000,
        };
        const code = secretToken();
        const { appended } = await handle(store, codeStream(sha256(code)), codes, (c) => ({
          events: decideIssueAccessCode(command, c),
          result: undefined,
        }));
        await hub.consistency.written(ctx, appended!.position);
        ctx.body = { code, expires_in: config.accessCodeTtlS };
      },
    });

    routes.add({
      method: 'post',
      path: '/auth/token',
      tag: 'auth',
      summary: 'A service swaps an access code for a long-lived delegated token.',
      description:
        "Called with the service's own token. The delegated token authenticates as the user, has `aud` = the service PRN and only the granted scopes. A code works once and only for the service it names: unknown, expired or reused codes answer 401, a code of another service 403.",
      security: 'bearer',
      middleware: [requireFirstParty],
      body: s.object({
        required: ['access-code'],
        additionalProperties: false,
        properties: { 'access-code': s.string({ maxLength: 512 }) },
      }),
      responses: {
        200: {
          description: 'The delegated token.',
          schema: tokenResponse({ scopes: GRANTED_SCOPES }, ['scopes']),
        },
      },
      handler: async (ctx, { body }) => {
        const caller = ctx.state.auth!;
        if (caller.type !== 'SERVICE' || caller.act)
          throw forbidden('Only SERVICE accounts, acting for themselves, swap access codes.');
        const command = { service: caller.sub, now: Date.now() };
        // One try: a concurrent append redeemed the code, so a conflict is its reuse.
        const { state, appended } = await handle(
          store,
          codeStream(sha256(body['access-code'])),
          codes,
          (c) => ({ events: decideRedeemAccessCode(command, c), result: undefined }),
          { attempts: 1 },
        ).catch((err) => {
          if ((err as Error).name === 'WrongExpectedRevisionError')
            throw unauthorized('This access code was used already.');
          throw err;
        });
        await hub.consistency.written(ctx, appended!.position);
        const grant = state.grant!;
        const user = await loadAccount(grant.account_id);
        refuseEndedGrant(user, grant);
        const { token } = await signToken(
          keys,
          {
            sub: user!.prn,
            aud: grant.service,
            azp: grant.service,
            nick: user!.nick,
            type: user!.type,
            scopes: grant.scopes,
          },
          config.delegatedTokenTtlS,
        );
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.delegatedTokenTtlS,
          scopes: grant.scopes,
        };
      },
    });

    routes.add({
      method: 'post',
      path: '/auth/authorize',
      tag: 'auth',
      summary: 'Implicit authorize: issue an access token for a registered app straight away.',
      description:
        "Called with the user's token. `client_id` is the app id or PRN; `redirect_uri` must equal one registered for the app exactly. The token authenticates as the user, has `aud` = the app PRN, the requested scopes (all the app declares when none are asked) and lasts HUB_IMPLICIT_TOKEN_TTL_S (an hour). `redirect_to` is the redirect URI with the token in its fragment.",
      security: 'bearer',
      middleware: [requireFirstParty],
      body: s.object({
        required: ['client_id', 'redirect_uri'],
        additionalProperties: false,
        properties: {
          client_id: s.string({ maxLength: 256 }),
          redirect_uri: s.string({ maxLength: 2048 }),
          scope: s.string({ maxLength: 1024 }),
          state: s.string({ maxLength: 1024 }),
          response_type: s.const('token'),
        },
      }),
      responses: {
        200: {
          description: 'The token.',
          schema: tokenResponse(
            {
              scopes: GRANTED_SCOPES,
              state: { type: 'string', description: 'As sent.' },
              redirect_to: {
                type: 'string',
                description:
                  'The redirect URI with the token in its fragment (access_token, token_type, expires_in, state).',
              },
            },
            ['scopes', 'redirect_to'],
          ),
        },
      },
      handler: async (ctx, { body }) => {
        const claims = ctx.state.auth!;
        if (claims.type !== 'USER' || claims.act)
          throw forbidden('Only users, acting for themselves, authorize apps.');
        await loginHolds(claims);
        const appId = body.client_id.startsWith('prn:::apps:/')
          ? body.client_id.slice('prn:::apps:/'.length)
          : body.client_id;
        const { state: app } = await load(store, appStream(appId), apps);
        const scopes = decideAppScopes(
          { redirectUri: body.redirect_uri, scopes: body.scope ? parseScopes(body.scope) : undefined },
          app,
        );
        const { token } = await signToken(
          keys,
          {
            sub: claims.sub,
            aud: app.prn,
            azp: app.prn,
            nick: claims.nick,
            type: claims.type,
            scopes,
          },
          config.implicitTokenTtlS,
        );
        const fragment = new URLSearchParams({
          access_token: token,
          token_type: 'Bearer',
          expires_in: String(config.implicitTokenTtlS),
          ...(body.state ? { state: body.state } : {}),
        });
        ctx.body = {
          token,
          token_type: 'Bearer',
          expires_in: config.implicitTokenTtlS,
          scopes,
          ...(body.state ? { state: body.state } : {}),
          redirect_to: `${body.redirect_uri}#${fragment}`,
        };
      },
    });
  };
}
