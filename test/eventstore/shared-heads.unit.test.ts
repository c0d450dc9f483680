// The heads the embedded store's writer shares with the process's threads (port.ts SharedHeads):
// what a reader may conclude from them, without threads (a second view of the same memory).
import assert from 'node:assert/strict';
import { SharedHeads } from '../../infra/eventstore/port.ts';

describe('SharedHeads (unit)', () => {
  it('tells the head and each written stream’s last revision to every view of its memory', () => {
    const writer = new SharedHeads();
    const reader = new SharedHeads(writer.buffer);
    assert.equal(reader.head(), 0);
    assert.equal(reader.revision('device-1'), undefined);
    writer.setRevision('device-1', 0);
    writer.setRevision('device-2', 41);
    writer.setHead(2 ** 40); // past 32 bits
    writer.setRevision('device-1', 7);
    assert.equal(reader.revision('device-1'), 7);
    assert.equal(reader.revision('device-2'), 41);
    assert.equal(reader.revision('device-3'), undefined);
    assert.equal(reader.head(), 2 ** 40);
  });

  it('a stream whose slot another stream took is not known, never mistaken for the other', () => {
    const heads = new SharedHeads();
    const written: string[] = [];
    let collided: [string, string] | undefined;
    for (let i = 0; !collided && i < 20_000; i++) {
      const stream = `device-${i}`;
      heads.setRevision(stream, i);
      written.push(stream);
      const lost = written.find((s, j) => heads.revision(s) !== j);
      if (lost) collided = [lost, stream];
    }
    assert.ok(collided, 'two of 20,000 streams share a slot');
    const [lost, taker] = collided;
    assert.equal(heads.revision(lost), undefined);
    assert.equal(heads.revision(taker), written.indexOf(taker));
  });

  it('forgets every stream (a writer thread died), the head kept', () => {
    const heads = new SharedHeads();
    heads.setRevision('device-1', 3);
    heads.setHead(12);
    heads.forget();
    assert.equal(heads.revision('device-1'), undefined);
    assert.equal(heads.head(), 12);
    heads.setRevision('device-1', 4);
    assert.equal(heads.revision('device-1'), 4);
  });
});
