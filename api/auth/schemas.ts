// The shapes /auth publishes in /openapi.json that several of its route files share: the request
// fields of an account, the account record, and what every answer with a token has.
import { s } from '../schema.ts';

export const NICK = s.string({
  pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{2,63}$',
  description: '3 to 64 letters, digits, . _ -; unique, case-insensitively.',
});
export const EMAIL = s.string({ maxLength: 254, pattern: '^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$' });
export const PASSWORD = s.string({ minLength: 8, maxLength: 256, description: 'At least 8 characters.' });
export const ACCOUNT = {
  type: 'object',
  properties: {
    prn: { type: 'string' },
    type: { enum: ['USER', 'DEVICE', 'SERVICE'] },
    nick: { type: 'string' },
    email: { type: 'string' },
    status: { enum: ['pending', 'active'] },
    challenge: { type: 'string' },
    redirect_uris: { type: 'array', items: { type: 'string' } },
    'time-created': { type: 'string' },
    'time-modified': { type: 'string' },
    'redirect-uri': {
      type: 'string',
      description: 'Registration only: the browser address of the challenge.',
    },
  },
};
/** The query of a page an email links to (the verification link, the reset link). */
export const EMAILED_LINK_QUERY = s.object({
  required: ['token'],
  // An emailed link: mail link-trackers append parameters of their own (utm_*); ignored.
  additionalProperties: true,
  properties: { token: s.string({ maxLength: 512 }) },
});
/** What every answer with a token has; each operation's schema adds its own fields. */
export const TOKEN_RESPONSE = {
  type: 'object',
  required: ['token', 'token_type', 'expires_in'],
  properties: {
    token: { type: 'string', description: 'A JWT (ES256).' },
    token_type: { const: 'Bearer' },
    expires_in: { type: 'integer', description: 'Seconds.' },
  },
};
export const tokenResponse = (properties: Record<string, unknown>, required: string[] = []) => ({
  ...TOKEN_RESPONSE,
  required: [...TOKEN_RESPONSE.required, ...required],
  properties: { ...TOKEN_RESPONSE.properties, ...properties },
});
export const GRANTED_SCOPES = {
  type: 'array',
  items: { type: 'string' },
  description: 'The scopes granted.',
};
/** The answer of an operation that reports what it did: `status`, and a sentence for people. */
export const outcome = (status: string, extra: Record<string, unknown> = {}) => ({
  type: 'object',
  required: ['status', 'message', ...Object.keys(extra)],
  properties: { status: { const: status }, message: { type: 'string' }, ...extra },
});
