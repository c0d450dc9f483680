// The bulk recovery aggregate's decisions in given/when/then form: a request records its window
// once (the same window again is the same recovery), refuses a window that is empty or reaches
// into the future, and its deliveries are recorded as queued once.
import assert from 'node:assert/strict';
import type { DomainEvent } from '../../domain/events.ts';
import {
  decideQueued,
  decideRequest,
  type RequestRecovery,
  recoveries,
  recoveryId,
} from '../../domain/recoveries.ts';
import { given } from './decider.ts';

const SUB = '0123456789abcdef01234567';
const OWNER = 'prn:::accounts:/a1';
const NOW = 10_000_000;
const request = (c: Partial<RequestRecovery> = {}): RequestRecovery => ({
  webhookId: SUB,
  ownerPrn: OWNER,
  since: NOW - 3_600_000,
  now: NOW,
  ...c,
});
const requested = (until = NOW, since = NOW - 3_600_000, id = recoveryId(SUB, since, undefined)) =>
  ({
    type: 'WebhookRecoveryRequested',
    data: { recovery_id: id, webhook_id: SUB, owner_prn: OWNER, since_ms: since, until_ms: until },
  }) satisfies DomainEvent<'WebhookRecoveryRequested'>;

describe('recoveries: decisions (unit)', () => {
  it('the id is the window: the same subscription and window the same id; until left out a window of its own', () => {
    assert.equal(recoveryId(SUB, 1000, 2000), recoveryId(SUB, 1000, 2000));
    assert.match(recoveryId(SUB, 1000, 2000), /^rcv_[a-f0-9]{24}$/);
    const others = [
      recoveryId(SUB, 1000, 2001),
      recoveryId(SUB, 999, 2000),
      recoveryId(SUB, 1000, undefined),
    ];
    others.push(recoveryId('1123456789abcdef01234567', 1000, 2000));
    assert.equal(new Set([recoveryId(SUB, 1000, 2000), ...others]).size, 5);
  });

  it('a request records its window, up to now when until is left out', () => {
    given(recoveries)()
      .when((s) => decideRequest(request(), s))
      .thenEmits(requested());
    const until = NOW - 60_000;
    given(recoveries)()
      .when((s) => decideRequest(request({ until }), s))
      .thenEmits(requested(until, NOW - 3_600_000, recoveryId(SUB, NOW - 3_600_000, until)));
  });

  it('the same request again finds the recovery: nothing new', () => {
    given(recoveries)(requested())
      .when((s) => decideRequest(request({ now: NOW + 5000 }), s))
      .thenEmits();
  });

  it('refuses an empty window and one reaching into the future', () => {
    given(recoveries)()
      .when((s) => decideRequest(request({ since: NOW }), s))
      .thenRefuses('invalid', /^since must be before until\.$/);
    given(recoveries)()
      .when((s) => decideRequest(request({ until: NOW - 3_600_000 }), s))
      .thenRefuses('invalid', /^since must be before until\.$/);
    given(recoveries)()
      .when((s) => decideRequest(request({ until: NOW + 1 }), s))
      .thenRefuses('invalid', /^until may not be in the future\.$/);
  });

  it('its deliveries are recorded as queued once; an unknown recovery is refused', () => {
    const queued: DomainEvent<'WebhookRecoveryQueued'> = {
      type: 'WebhookRecoveryQueued',
      data: { recovery_id: requested().data.recovery_id, webhook_id: SUB, owner_prn: OWNER, total: 3 },
    };
    given(recoveries)(requested())
      .when((s) => decideQueued({ total: 3 }, s))
      .thenEmits(queued);
    given(recoveries)(requested(), queued)
      .when((s) => decideQueued({ total: 4 }, s))
      .thenEmits();
    given(recoveries)()
      .when((s) => decideQueued({ total: 1 }, s))
      .thenRefuses('not_found');
  });

  it('the state: the window, when it was asked for, and how many were queued', () => {
    const { state } = given(recoveries)(requested());
    assert.deepEqual(
      [state.since, state.until, state.requested, state.total],
      [NOW - 3_600_000, NOW, 1000, null],
    );
  });
});
