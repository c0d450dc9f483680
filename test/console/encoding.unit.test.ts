// The console's choice of content encoding from Accept-Encoding (api/console.ts).
import assert from 'node:assert/strict';
import { chooseEncoding } from '../../api/console.ts';

describe('console encoding (unit)', () => {
  it('prefers Brotli, then gzip, and honours q=0', () => {
    assert.equal(chooseEncoding('gzip, deflate, br, zstd'), 'br');
    assert.equal(chooseEncoding('gzip'), 'gzip');
    assert.equal(chooseEncoding('br;q=0, gzip;q=0.8'), 'gzip');
    assert.equal(chooseEncoding('*'), 'gzip');
    assert.equal(chooseEncoding('gzip;q=0.0, br;q=0'), 'identity');
    assert.equal(chooseEncoding(''), 'identity');
    assert.equal(chooseEncoding('identity'), 'identity');
  });
});
