// The unique-name aggregate's decisions in given/when/then form: a name is taken by one owner at a
// time, and given back only by its holder. No I/O.
import assert from 'node:assert/strict';
import type { DomainEvent } from '../../domain/events.ts';
import { decideClaimName, decideReleaseName, NameTakenError, names } from '../../domain/names.ts';
import { given } from './decider.ts';

const BOB = { kind: 'nick', value: 'bob', owner: 'b1' };
const EVE = { ...BOB, owner: 'e1' };
const claimed = (owner: string): DomainEvent<'NameClaimed'> => ({
  type: 'NameClaimed',
  data: { kind: 'nick', value: 'bob', owner_id: owner },
});
const released: DomainEvent<'NameReleased'> = { type: 'NameReleased', data: { kind: 'nick', value: 'bob' } };

describe('names: decisions (unit)', () => {
  describe('claim', () => {
    it('a free name is taken', () => {
      given(names)()
        .when((s) => decideClaimName(BOB, s))
        .thenEmits(claimed('b1'));
    });

    it('a name given back is free again', () => {
      given(names)(claimed('e1'), released)
        .when((s) => decideClaimName(BOB, s))
        .thenEmits(claimed('b1'));
    });

    it('its holder claiming it again changes nothing', () => {
      given(names)(claimed('b1'))
        .when((s) => decideClaimName(BOB, s))
        .thenEmits();
    });

    it("someone else's is refused: a NameTakenError, a conflict naming the kind", () => {
      given(names)(claimed('b1'))
        .when((s) => decideClaimName(EVE, s))
        .thenRefuses('conflict', /^nick 'bob' is taken$/);
      assert.throws(
        () => decideClaimName(EVE, given(names)(claimed('b1')).state),
        (err) => err instanceof NameTakenError && err.kind === 'nick',
      );
    });
  });

  describe('release', () => {
    it('its holder gives it back', () => {
      given(names)(claimed('b1'))
        .when((s) => decideReleaseName(BOB, s))
        .thenEmits(released);
    });

    it("anyone else's release, or a free name's, changes nothing", () => {
      given(names)(claimed('b1'))
        .when((s) => decideReleaseName(EVE, s))
        .thenEmits();
      given(names)()
        .when((s) => decideReleaseName(BOB, s))
        .thenEmits();
    });
  });
});
