// The webhook subscription aggregate's decisions, each command's rules in given/when/then form, and
// the retry policy's delays. No I/O: what the egress says of a URL comes with the command.
import assert from 'node:assert/strict';
import type { DomainEvent, EventData } from '../../domain/events.ts';
import {
  type AutoDisable,
  type CreateSubscription,
  DEFAULT_RETRY_POLICY,
  decideAutoDisable,
  decideCreate,
  decideDelete,
  decidePatch,
  decideReplace,
  decideRotateSecret,
  ENDPOINT_FAILING,
  nextDelayS,
  type SubscriptionFields,
  subscriptions,
} from '../../domain/subscriptions.ts';
import { SchemaRegistry } from '../../schemas/registry.ts';
import { given } from './decider.ts';

const ID = '0123456789abcdef01234567';
const OWNER = 'prn:::accounts:/a1';

const FIELDS: SubscriptionFields = {
  nick: 'hook',
  url: 'https://example.com/hook',
  description: '',
  event_types: ['device.created'],
  enabled: true,
  devices: [],
  user_meta_keys: [],
  device_meta_keys: [],
  custom_headers: {},
  retry_policy: null,
  rate_limit: null,
};
const created = (data: Partial<EventData['WebhookCreated']> = {}): DomainEvent<'WebhookCreated'> => ({
  type: 'WebhookCreated',
  data: { webhook_id: ID, owner_prn: OWNER, ...FIELDS, secret_sealed: 'sealed-1', ...data },
});
const updated = (fields: Partial<SubscriptionFields>): DomainEvent<'WebhookUpdated'> => ({
  type: 'WebhookUpdated',
  data: { webhook_id: ID, owner_prn: OWNER, ...FIELDS, ...fields },
});
const deleted: DomainEvent<'WebhookDeleted'> = {
  type: 'WebhookDeleted',
  data: { webhook_id: ID, owner_prn: OWNER },
};

describe('subscriptions: decisions (unit)', () => {
  describe('create', () => {
    const command = (c: Partial<CreateSubscription> = {}): CreateSubscription => ({
      id: ID,
      ownerPrn: OWNER,
      fields: { nick: 'hook', url: FIELDS.url, event_types: ['device.created'], enabled: true },
      secretSealed: 'sealed-1',
      ...c,
    });

    it('a new subscription, the fields not sent at their defaults', () => {
      given(subscriptions)()
        .when((s) => decideCreate(command(), s))
        .thenEmits(created());
    });

    it('refuses a URL the egress refused, and reserved headers, naming each (the URL first)', () => {
      const c = command({
        fields: { ...FIELDS, custom_headers: { 'Webhook-Id': 'x', Host: 'y', 'X-Ok': 'z' } },
        urlProblem: 'must use https',
      });
      given(subscriptions)()
        .when((s) => decideCreate(c, s))
        .thenRefuses('invalid', /^url must use https\.$/);
      assert.throws(
        () => decideCreate(c, subscriptions.initial()),
        (err: { details?: unknown }) => {
          assert.deepEqual(err.details, [
            { field: 'url', problem: 'must use https' },
            { field: 'custom_headers.Webhook-Id', problem: 'is a reserved header name' },
            { field: 'custom_headers.Host', problem: 'is a reserved header name' },
          ]);
          return true;
        },
      );
    });

    it('refuses a reserved header alone in its message', () => {
      given(subscriptions)()
        .when((s) =>
          decideCreate(command({ fields: { ...FIELDS, custom_headers: { 'content-length': '1' } } }), s),
        )
        .thenRefuses('invalid', /^custom_headers\.content-length is a reserved header name\.$/);
    });

    it('a rate limit sent is recorded', () => {
      given(subscriptions)()
        .when((s) => decideCreate(command({ fields: { ...command().fields, rate_limit: 20 } }), s))
        .thenEmits(created({ rate_limit: 20 }));
    });

    it('an event written before rate limits (v1) reads as unlimited', () => {
      const { rate_limit: _, ...v1 } = created().data;
      const read = SchemaRegistry.load().upcast('WebhookCreated', 1, v1) as EventData['WebhookCreated'];
      assert.equal(read.rate_limit, null);
      const state = subscriptions.evolve(subscriptions.initial(), {
        type: 'WebhookCreated',
        data: read,
        created: 1,
      });
      assert.equal(state.rate_limit, null);
    });

    it('refuses a stream that exists already', () => {
      given(subscriptions)(created())
        .when((s) => decideCreate(command(), s))
        .thenRefuses('conflict', /exists already/);
    });
  });

  describe('replace', () => {
    it('every field as sent, the others at their defaults (not as they were)', () => {
      given(subscriptions)(created({ description: 'old', devices: [`prn:::devices:/${ID}`], rate_limit: 3 }))
        .when((s) =>
          decideReplace(
            { fields: { nick: 'new', url: FIELDS.url, event_types: ['device.created'], enabled: false } },
            s,
          ),
        )
        .thenEmits(updated({ nick: 'new', enabled: false }));
    });

    it('refuses the problems of the fields', () => {
      given(subscriptions)(created())
        .when((s) => decideReplace({ fields: FIELDS, urlProblem: 'resolves to a private address' }, s))
        .thenRefuses('invalid', /^url resolves to a private address\.$/);
    });

    it('refuses a deleted or unknown subscription', () => {
      given(subscriptions)(created(), deleted)
        .when((s) => decideReplace({ fields: FIELDS }, s))
        .thenRefuses('not_found', /^No such subscription\.$/);
      given(subscriptions)()
        .when((s) => decideReplace({ fields: FIELDS }, s))
        .thenRefuses('not_found', /^No such subscription\.$/);
    });
  });

  describe('patch', () => {
    it('merges the fields sent into the subscription as it is now (pausing it here)', () => {
      given(subscriptions)(created(), updated({ description: 'set meanwhile' }))
        .when((s) => decidePatch({ fields: { enabled: false } }, s))
        .thenEmits(updated({ description: 'set meanwhile', enabled: false }));
    });

    it('a retry policy set to null goes back to the default one', () => {
      const policy = { max_attempts: 2, delays_s: [5] };
      given(subscriptions)(created({ retry_policy: policy }))
        .when((s) => decidePatch({ fields: { retry_policy: null } }, s))
        .thenEmits(updated({ retry_policy: null }));
      given(subscriptions)(created({ retry_policy: policy }))
        .when((s) => decidePatch({ fields: { nick: 'n' } }, s))
        .thenEmits(updated({ nick: 'n', retry_policy: policy }));
    });

    it('a rate limit is kept by a patch that does not send it, and set to null is lifted', () => {
      given(subscriptions)(created())
        .when((s) => decidePatch({ fields: { rate_limit: 5 } }, s))
        .thenEmits(updated({ rate_limit: 5 }));
      given(subscriptions)(created({ rate_limit: 5 }))
        .when((s) => decidePatch({ fields: { nick: 'n' } }, s))
        .thenEmits(updated({ nick: 'n', rate_limit: 5 }));
      given(subscriptions)(created({ rate_limit: 5 }))
        .when((s) => decidePatch({ fields: { rate_limit: null } }, s))
        .thenEmits(updated({ rate_limit: null }));
    });

    it('refuses a reserved header, whether sent now or kept', () => {
      given(subscriptions)(created())
        .when((s) => decidePatch({ fields: { custom_headers: { 'User-Agent': 'x' } } }, s))
        .thenRefuses('invalid', /^custom_headers\.User-Agent is a reserved header name\.$/);
    });

    it('refuses a deleted subscription', () => {
      given(subscriptions)(created(), deleted)
        .when((s) => decidePatch({ fields: { enabled: true } }, s))
        .thenRefuses('not_found', /^No such subscription\.$/);
    });
  });

  describe('delete', () => {
    it('deletes the subscription; deleting again changes nothing', () => {
      given(subscriptions)(created()).when(decideDelete).thenEmits(deleted);
      given(subscriptions)(created(), deleted).when(decideDelete).thenEmits();
    });

    it('refuses an unknown subscription', () => {
      given(subscriptions)()
        .when(decideDelete)
        .thenRefuses('not_found', /^No such subscription\.$/);
    });
  });

  describe('rotate secret', () => {
    it('the new secret signs, the current one becomes the previous', () => {
      given(subscriptions)(created())
        .when((s) => decideRotateSecret({ secretSealed: 'sealed-2' }, s))
        .thenEmits({
          type: 'WebhookSecretRotated',
          data: { webhook_id: ID, owner_prn: OWNER, secret_sealed: 'sealed-2', previous_sealed: 'sealed-1' },
        });
    });

    it('refuses a deleted subscription', () => {
      given(subscriptions)(created(), deleted)
        .when((s) => decideRotateSecret({ secretSealed: 'sealed-2' }, s))
        .thenRefuses('not_found', /^No such subscription\.$/);
    });
  });

  it('the state: a deleted subscription is disabled; a rotation keeps the previous secret and its time', () => {
    const { state } = given(subscriptions)(created(), {
      type: 'WebhookSecretRotated',
      data: { webhook_id: ID, owner_prn: OWNER, secret_sealed: 'sealed-2', previous_sealed: 'sealed-1' },
    });
    assert.equal(state.previousSealed, 'sealed-1');
    assert.equal(state.rotated, 1_001);
    assert.equal(given(subscriptions)(created(), deleted).state.enabled, false);
  });
});

describe('subscriptions: disabled by the hub for failing (unit)', () => {
  const PERIOD = 5 * 86_400_000;
  const command = (c: Partial<AutoDisable> = {}): AutoDisable => ({
    failingSince: 2_000,
    lastSuccess: 500,
    now: 2_000 + PERIOD,
    periodMs: PERIOD,
    ...c,
  });
  const autoDisabled: DomainEvent<'WebhookAutoDisabled'> = {
    type: 'WebhookAutoDisabled',
    data: {
      webhook_id: ID,
      owner_prn: OWNER,
      reason: ENDPOINT_FAILING,
      failing_since: 2_000,
      last_success: 500,
    },
  };

  it('disables a subscription whose every attempt has failed for the period', () => {
    given(subscriptions)(created())
      .when((s) => decideAutoDisable(command(), s))
      .thenEmits(autoDisabled);
  });

  it('not before the period is over', () => {
    given(subscriptions)(created())
      .when((s) => decideAutoDisable(command({ now: 2_000 + PERIOD - 1 }), s))
      .thenEmits();
  });

  it('counts the period from when it was enabled again, when that is later than the first failure', () => {
    const history = [created(), updated({ enabled: false }), updated({ enabled: true })]; // enabled at 1002
    given(subscriptions)(...history)
      .when((s) => decideAutoDisable(command({ failingSince: 500, now: 500 + PERIOD }), s))
      .thenEmits();
    given(subscriptions)(...history)
      .when((s) => decideAutoDisable(command({ failingSince: 500, now: 1_002 + PERIOD }), s))
      .thenEmits({ type: 'WebhookAutoDisabled', data: { ...autoDisabled.data, failing_since: 500 } });
  });

  it('leaves a subscription disabled or paused already as it is, and never disables with a period of 0', () => {
    given(subscriptions)(created(), autoDisabled)
      .when((s) => decideAutoDisable(command({ now: 2_000 + 2 * PERIOD }), s))
      .thenEmits();
    given(subscriptions)(created(), updated({ enabled: false }))
      .when((s) => decideAutoDisable(command(), s))
      .thenEmits();
    given(subscriptions)(created())
      .when((s) => decideAutoDisable(command({ periodMs: 0 }), s))
      .thenEmits();
  });

  it('refuses a deleted subscription', () => {
    given(subscriptions)(created(), deleted)
      .when((s) => decideAutoDisable(command(), s))
      .thenRefuses('not_found', /^No such subscription\.$/);
  });

  it('the state: disabled with its reason, kept by other changes; enabled again (PATCH), the reason is cleared', () => {
    const disabled = given(subscriptions)(created(), autoDisabled).state;
    assert.equal(disabled.enabled, false);
    assert.equal(disabled.disabledReason, ENDPOINT_FAILING);
    const [edited] = decidePatch({ fields: { description: 'fixed soon' } }, disabled);
    const stillDisabled = given(subscriptions)(created(), autoDisabled, edited!).state;
    assert.equal(stillDisabled.disabledReason, ENDPOINT_FAILING);
    assert.equal(stillDisabled.enabled, false);
    const [enabled] = decidePatch({ fields: { enabled: true } }, disabled);
    const again = given(subscriptions)(created(), autoDisabled, enabled!).state;
    assert.equal(again.enabled, true);
    assert.equal(again.disabledReason, '');
    assert.equal(again.enabledAt, 1_002);
    assert.equal(given(subscriptions)(created(), updated({ nick: 'x' })).state.enabledAt, 1_000);
  });
});

describe('subscriptions: retry policy (unit)', () => {
  it('the delay after each failed attempt, null once spent; the last delay repeats', () => {
    assert.deepEqual(
      Array.from({ length: 8 }, (_, i) => nextDelayS(null, i + 1)),
      [...DEFAULT_RETRY_POLICY.delays_s, null],
    );
    assert.deepEqual(
      Array.from({ length: 4 }, (_, i) => nextDelayS({ max_attempts: 4, delays_s: [5] }, i + 1)),
      [5, 5, 5, null],
    );
  });
});
