import assert from 'node:assert/strict';
import { renderError, unauthorized } from '../../api/errors.ts';

describe('error rendering (unit)', () => {
  it('renders our errors with their status, code and headers', () => {
    const r = renderError(unauthorized('Token expired.'), 'req_1');
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, {
      error: 'unauthorized',
      message: 'Token expired.',
      code: 401,
      request_id: 'req_1',
    });
    assert.deepEqual(r.headers, { 'WWW-Authenticate': 'Bearer' });
  });

  it("shows another library's 4xx only when it is marked safe to expose, with allowed headers only", () => {
    const exposed = renderError(
      {
        status: 405,
        expose: true,
        message: 'Method Not Allowed',
        headers: { Allow: 'GET', 'X-Internal': 'db-1' },
      },
      'req_2',
    );
    assert.equal(exposed.status, 405);
    assert.equal(exposed.body.error, 'method_not_allowed');
    assert.deepEqual(exposed.headers, { Allow: 'GET' });
    const unmarked = renderError(
      { status: 400, message: 'password authentication failed for user "hub"' },
      'req_3',
    );
    assert.equal(unmarked.status, 500);
    assert.doesNotMatch(unmarked.body.message, /password|hub/);
  });

  it('never exposes a 5xx message', () => {
    const r = renderError(
      { status: 503, expose: true, message: 'connect ECONNREFUSED 10.0.0.5:5432' },
      'req_4',
    );
    assert.equal(r.status, 500);
    assert.doesNotMatch(r.body.message, /ECONNREFUSED|10\.0\.0\.5/);
    assert.match(r.body.message, /req_4/);
  });
});
