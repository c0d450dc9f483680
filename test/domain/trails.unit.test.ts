// The trail aggregate's decisions (a device's steps), each command's rules in given/when/then form.
// No I/O.
import assert from 'node:assert/strict';
import type { DomainEvent } from '../../domain/events.ts';
import {
  decideCarryPublicity,
  decidePushStep,
  decideReportProgress,
  type PushStep,
  type ReportProgress,
  trails,
} from '../../domain/trails.ts';
import { given } from './decider.ts';

const ID = '0123456789abcdef01234567';
const OWNER = 'prn:::accounts:/a1';
const DEVICE = { id: ID, ownerPrn: OWNER, public: false, garbage: false };
const SHA = 'a'.repeat(64);

const pushed = (
  rev: number,
  extra: Partial<DomainEvent<'StepPushed'>['data']> = {},
): DomainEvent<'StepPushed'> => ({
  type: 'StepPushed',
  data: {
    device_id: ID,
    owner_prn: OWNER,
    rev,
    state: '{}',
    commit_msg: '',
    objects: [],
    public: false,
    ...extra,
  },
});
const marked = (rev: number, pub: boolean, garbage = false): DomainEvent<'StepPublicitySet'> => ({
  type: 'StepPublicitySet',
  data: { device_id: ID, rev, public: pub, garbage },
});

describe('trails: decisions (unit)', () => {
  describe('push a step', () => {
    const push = (c: Partial<PushStep> = {}): PushStep => ({
      device: DEVICE,
      rev: undefined,
      state: {},
      commitMsg: '',
      ...c,
    });

    it('the first step is rev 0; the state recorded as JSON with the objects it references', () => {
      given(trails)()
        .when((t) => decidePushStep(push({ state: { image: SHA, n: 1 }, commitMsg: 'boot' }), t))
        .thenEmits(
          pushed(0, { state: JSON.stringify({ image: SHA, n: 1 }), commit_msg: 'boot', objects: [SHA] }),
        );
    });

    it('rev defaults to the next one, and may be given as it', () => {
      given(trails)(pushed(0), pushed(1))
        .when((t) => decidePushStep(push(), t))
        .thenEmits(pushed(2));
      given(trails)(pushed(0))
        .when((t) => decidePushStep(push({ rev: 1 }), t))
        .thenEmits(pushed(1));
    });

    it('any other rev is refused, naming the next one', () => {
      given(trails)(pushed(0))
        .when((t) => decidePushStep(push({ rev: 0 }), t))
        .thenRefuses('conflict', /next step of this trail is rev 1\./);
      given(trails)()
        .when((t) => decidePushStep(push({ rev: 5 }), t))
        .thenRefuses('conflict', /rev 0\./);
    });

    it('a step is public as its device is', () => {
      given(trails)()
        .when((t) => decidePushStep(push({ device: { ...DEVICE, public: true } }), t))
        .thenEmits(pushed(0, { public: true }));
    });

    it('a deleted device takes no step', () => {
      given(trails)()
        .when((t) => decidePushStep(push({ device: { ...DEVICE, garbage: true } }), t))
        .thenRefuses('not_found', /No such device/);
    });
  });

  describe('report progress', () => {
    const report = (c: Partial<ReportProgress> = {}): ReportProgress => ({
      device: DEVICE,
      rev: 0,
      progress: 50,
      status: 'STARTED',
      statusMsg: 'half',
      ...c,
    });
    const reported: DomainEvent<'StepProgressReported'> = {
      type: 'StepProgressReported',
      data: {
        device_id: ID,
        owner_prn: OWNER,
        rev: 0,
        progress: 50,
        status: 'STARTED',
        status_msg: 'half',
        prev_progress: 0,
        prev_status: 'NEW',
      },
    };

    it('records the progress with what it was before', () => {
      given(trails)(pushed(0))
        .when((t) => decideReportProgress(report(), t))
        .thenEmits(reported);
      given(trails)(pushed(0), reported)
        .when((t) => decideReportProgress(report({ progress: 100, status: 'DONE', statusMsg: '' }), t))
        .thenEmits({
          type: 'StepProgressReported',
          data: {
            ...reported.data,
            progress: 100,
            status: 'DONE',
            status_msg: '',
            prev_progress: 50,
            prev_status: 'STARTED',
          },
        });
    });

    it('the same progress, status and message record nothing; another message does', () => {
      given(trails)(pushed(0), reported)
        .when((t) => decideReportProgress(report(), t))
        .thenEmits();
      given(trails)(pushed(0), reported)
        .when((t) => decideReportProgress(report({ statusMsg: 'still half' }), t))
        .thenEmits({
          type: 'StepProgressReported',
          data: { ...reported.data, status_msg: 'still half', prev_progress: 50, prev_status: 'STARTED' },
        });
    });

    it('no such step is not found', () => {
      given(trails)(pushed(0))
        .when((t) => decideReportProgress(report({ rev: 1 }), t))
        .thenRefuses('not_found', /No such step/);
    });
  });

  describe('carry the device’s flags to its steps', () => {
    const carry = (pub: boolean, garbage = false, rev?: number) => ({
      deviceId: ID,
      public: pub,
      garbage,
      rev,
    });

    it('marks every step whose flags differ from the device’s', () => {
      given(trails)(pushed(0), pushed(1, { public: true }), pushed(2))
        .when((t) => decideCarryPublicity(carry(true), t))
        .thenEmits(marked(0, true), marked(2, true));
      given(trails)(pushed(0), pushed(1, { public: true }))
        .when((t) => decideCarryPublicity(carry(true, true), t))
        .thenEmits(marked(0, true, true), marked(1, true, true));
    });

    it('steps that match already, or none, record nothing', () => {
      given(trails)(pushed(0), pushed(1, { public: true }), marked(0, true))
        .when((t) => decideCarryPublicity(carry(true), t))
        .thenEmits();
      given(trails)()
        .when((t) => decideCarryPublicity(carry(true), t))
        .thenEmits();
    });

    it('one step (the step callback): that one only; no such step is not found', () => {
      given(trails)(pushed(0), pushed(1))
        .when((t) => decideCarryPublicity(carry(true, false, 1), t))
        .thenEmits(marked(1, true));
      given(trails)(pushed(0), pushed(1, { public: true }))
        .when((t) => decideCarryPublicity(carry(true, false, 1), t))
        .thenEmits();
      given(trails)(pushed(0))
        .when((t) => decideCarryPublicity(carry(true, false, 3), t))
        .thenRefuses('not_found', /No such step/);
    });

    it('the fold records when the flags were last set', () => {
      const t = given(trails)(pushed(0), marked(0, true)).state;
      assert.deepEqual(
        [t.steps.get(0)?.public, t.steps.get(0)?.flagsModified, t.steps.get(0)?.created],
        [true, 1_001, 1_000],
      );
    });
  });
});
