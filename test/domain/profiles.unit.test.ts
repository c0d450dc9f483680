// The profile's decision in given/when/then form: replaced as sent, nothing recorded when nothing
// changes, its nick and email read-only. No I/O.
import type { DomainEvent } from '../../domain/events.ts';
import { decideUpdateProfile, profiles, type UpdateProfile } from '../../domain/profiles.ts';
import { given } from './decider.ts';

const registered: DomainEvent<'AccountRegistered'> = {
  type: 'AccountRegistered',
  data: {
    account_id: 'a1',
    prn: 'prn:::accounts:/a1',
    type: 'USER',
    nick: 'Alice',
    email: 'alice@example.com',
    password_hash: 'hash',
    challenge: '',
    redirect_uris: [],
    active: true,
  },
};
const profileUpdated = (c: Partial<UpdateProfile>): DomainEvent<'ProfileUpdated'> => ({
  type: 'ProfileUpdated',
  data: { account_id: 'a1', profile: {}, meta: {}, ovmode: null, ...c },
});
const command = (c: Partial<UpdateProfile> = {}): UpdateProfile => ({
  profile: { bio: 'hi' },
  meta: { team: 'blue' },
  ovmode: null,
  ...c,
});

describe('profiles: decisions (unit)', () => {
  it('replaces the profile: fields, meta and ovmode as sent', () => {
    given(profiles)(registered, profileUpdated({ profile: { company: 'X' }, meta: { old: '1' } }))
      .when((s) => decideUpdateProfile(command({ ovmode: { mode: 'owned' } }), s))
      .thenEmits(
        profileUpdated({ profile: { bio: 'hi' }, meta: { team: 'blue' }, ovmode: { mode: 'owned' } }),
      );
  });

  it('the same profile again records nothing: a field set to empty reads as one not set, no ovmode as an empty one', () => {
    given(profiles)(registered, profileUpdated({ profile: { bio: 'hi' }, meta: { team: 'blue' } }))
      .when((s) => decideUpdateProfile(command({ profile: { bio: 'hi', company: '' }, ovmode: {} }), s))
      .thenEmits();
  });

  it("its nick and email may be sent when they are the account's, in any case", () => {
    given(profiles)(registered)
      .when((s) => decideUpdateProfile(command({ nick: 'alice', email: 'ALICE@example.com' }), s))
      .thenEmits(profileUpdated({ profile: { bio: 'hi' }, meta: { team: 'blue' } }));
  });

  it('refuses another nick or email', () => {
    given(profiles)(registered)
      .when((s) => decideUpdateProfile(command({ nick: 'bob' }), s))
      .thenRefuses('invalid', /^The nick cannot change through the profile\.$/);
    given(profiles)(registered)
      .when((s) => decideUpdateProfile(command({ email: 'bob@example.com' }), s))
      .thenRefuses('invalid', /^The email cannot change through the profile\.$/);
  });

  it('refuses an account that does not exist', () => {
    given(profiles)()
      .when((s) => decideUpdateProfile(command(), s))
      .thenRefuses('not_found', /^The account of this token no longer exists\.$/);
  });
});
