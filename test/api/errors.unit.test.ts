import assert from 'node:assert/strict';
import { renderError, unauthorized } from '../../api/errors.ts';

describe('error rendering (unit)', () => {
  it('a dependency that cannot be reached is 503 with Retry-After, not a 500', () => {
    const lost = Object.assign(new Error('Reached the max retries per request limit (which is 3).'), {
      name: 'MaxRetriesPerRequestError',
    });
    for (const err of [
      lost,
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5433'), { code: 'ECONNREFUSED' }),
      Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      new Error('Connection terminated unexpectedly'),
      Object.assign(new Error('sorry, too many clients already'), { code: '53300' }),
    ]) {
      const r = renderError(err, 'req_2');
      assert.equal(r.status, 503, err.message);
      assert.equal(r.body.error, 'unavailable');
      assert.equal(r.headers['Retry-After'], '1');
      assert.ok(!r.body.message.includes('127.0.0.1'), 'nothing internal');
    }
    // A write cut off may have been stored: not an invitation to repeat it blindly.
    const write = renderError(lost, 'req_5', 'POST');
    assert.equal(write.status, 503);
    assert.equal(write.headers['Retry-After'], undefined);
    assert.match(write.body.message, /may or may not have been made/);
    assert.equal(renderError(new Error('a bug'), 'req_3').status, 500);
    assert.equal(renderError(Object.assign(new Error('protocol'), { code: '08P01' }), 'req_6').status, 500);
    assert.equal(
      renderError(new Error('Connection is closed.'), 'req_7').status,
      500,
      'a closed client is our bug',
    );
    assert.equal(renderError(Object.assign(new Error('x'), { code: '23505' }), 'req_4').status, 500);
  });

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
