// The unique-name aggregate (stream unique-<kind>-<value>): who holds a name (a nick, an email, a
// PRN, an app's nick among its owner's apps), and the decisions to take and give one back. The
// name's own stream serialises competing claims. Pure: infra/eventstore/aggregate.ts runs these
// against the store (claimName, releaseName, nameOwner).
import { DomainError } from './errors.ts';
import type { DomainEvent, FoldedEvent } from './events.ts';

export interface NameState {
  /** The holder's id; undefined while the name is free. */
  owner: string | undefined;
}

export const nameStream = (kind: string, value: string) => `unique-${kind}-${value}`;

export const names = {
  snapshot: { kind: 'name-claim', shape: 1 },
  initial: (): NameState => ({ owner: undefined }),
  evolve(s: NameState, e: FoldedEvent): NameState {
    switch (e.type) {
      case 'NameClaimed':
        return { owner: e.data.owner_id };
      case 'NameReleased':
        return { owner: undefined };
      default:
        return s;
    }
  },
};

/** Someone else holds the name: a conflict, which the commands that claim names word their own
 * way (instanceof tells it from other refusals). */
export class NameTakenError extends DomainError {
  readonly kind: string;
  constructor(kind: string, value: string) {
    super('conflict', `${kind} '${value}' is taken`);
    this.kind = kind;
  }
}

export interface NameCommand {
  kind: string;
  value: string;
  owner: string;
}

/** Take a name: claiming one already held by the same owner changes nothing. */
export function decideClaimName(c: NameCommand, s: NameState): DomainEvent<'NameClaimed'>[] {
  if (s.owner === c.owner) return [];
  if (s.owner !== undefined) throw new NameTakenError(c.kind, c.value);
  return [{ type: 'NameClaimed', data: { kind: c.kind, value: c.value, owner_id: c.owner } }];
}

/** Give a name back: only its holder can; anyone else's release changes nothing. */
export function decideReleaseName(c: NameCommand, s: NameState): DomainEvent<'NameReleased'>[] {
  if (s.owner !== c.owner) return [];
  return [{ type: 'NameReleased', data: { kind: c.kind, value: c.value } }];
}
