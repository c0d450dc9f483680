import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileCheckpoints } from '../../infra/checkpoints.ts';

describe('file checkpoints (int)', () => {
  it('keeps the last position across a reopen, written in place over an older, longer value', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hub-cp-'));
    // As an older version left it: a plain JSON file, longer than what follows.
    writeFileSync(join(dir, 'relay.json'), JSON.stringify({ position: 123_456_789_012 }));
    const first = new FileCheckpoints(dir);
    assert.equal(await first.get('relay'), 123_456_789_012);
    await first.set('relay', 7);
    await first.set('relay', 42);
    await first.set('mailer', 3);
    first.close();
    const reopened = new FileCheckpoints(dir);
    assert.equal(await reopened.get('relay'), 42);
    assert.equal(await reopened.get('mailer'), 3);
    assert.equal(await reopened.get('never-set'), 0);
    assert.equal(JSON.parse(readFileSync(join(dir, 'relay.json'), 'utf8')).position, 42);
    reopened.close();
  });
});
