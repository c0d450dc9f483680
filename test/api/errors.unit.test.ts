import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { renderError, unauthorized } from '../../api/errors.ts';

describe('error rendering (unit)', () => {
  it("SQLite's storage that cannot serve (read-only, I/O error, disk full, cannot open) is 503; a constraint is ours, 500", () => {
    const file = join(mkdtempSync(join(tmpdir(), 'hub-ro-')), 'ro.sqlite');
    const made = new DatabaseSync(file);
    made.exec('CREATE TABLE t (x)');
    made.close();
    const readOnly = new DatabaseSync(file, { readOnly: true });
    let refused: unknown;
    try {
      readOnly.exec('INSERT INTO t VALUES (1)');
    } catch (err) {
      refused = err;
    } finally {
      readOnly.close();
    }
    assert.equal((refused as { errcode?: number }).errcode, 8, 'the driver names SQLITE_READONLY');
    assert.equal(renderError(refused, 'req_s').status, 503);
    for (const errcode of [778 /* IOERR_WRITE */, 13 /* FULL */, 14 /* CANTOPEN */])
      assert.equal(
        renderError(Object.assign(new Error('disk'), { errcode }), 'req_s').status,
        503,
        String(errcode),
      );
    assert.equal(
      renderError(Object.assign(new Error('UNIQUE constraint failed'), { errcode: 2067 }), 'req_s').status,
      500,
    );
  });

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
