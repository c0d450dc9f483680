// What a decision refuses, in the domain's words. Decisions throw these; api/errors.ts gives each
// refusal its HTTP status and the one error shape, so no decision knows about HTTP.

/** Why a command is refused. */
export type Refusal =
  /** The thing does not exist, or the caller may not learn that it does. */
  | 'not_found'
  /** The caller may see the thing but not do this to it. */
  | 'forbidden'
  /** The caller's credentials (a login, a secret, a token's login) do not hold. */
  | 'unauthorized'
  /** The command contradicts the state (a name taken, a step already there). */
  | 'conflict'
  /** A field is wrong for this state (`details` name each). */
  | 'invalid'
  /** Over a size limit (keys in a map). */
  | 'too_large';

export interface RefusalDetail {
  field: string;
  problem: string;
}

export class DomainError extends Error {
  readonly refusal: Refusal;
  /** A code finer than the refusal's own (`ambiguous`, `account_pending`), when clients tell them apart. */
  readonly code: string | undefined;
  readonly details: RefusalDetail[] | undefined;
  constructor(refusal: Refusal, message: string, extra: { code?: string; details?: RefusalDetail[] } = {}) {
    super(message);
    this.name = 'DomainError';
    this.refusal = refusal;
    this.code = extra.code;
    this.details = extra.details;
  }
}

export const refuse = {
  notFound: (message: string) => new DomainError('not_found', message),
  forbidden: (message: string, code?: string) => new DomainError('forbidden', message, { code }),
  unauthorized: (message: string, code?: string) => new DomainError('unauthorized', message, { code }),
  conflict: (message: string, code?: string) => new DomainError('conflict', message, { code }),
  invalid: (message: string, details?: RefusalDetail[]) => new DomainError('invalid', message, { details }),
  tooLarge: (message: string) => new DomainError('too_large', message),
};
