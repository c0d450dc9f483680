// Generated from schemas/events/*.avsc (the current version of each) by `npm run schemas:types`
// (schemas/typescript.ts): do not edit. test/schemas/event-types.unit.test.ts fails when this file
// and the schemas differ.

export interface Scope {
  id: string;
  description: string;
  required: boolean;
  service: string;
}

export interface AppFields {
  nick: string;
  name: string;
  logo: string;
  redirect_uris: Array<string>;
  scopes: Array<Scope>;
  exposed_scopes: Array<Scope>;
}

export interface RetryPolicy {
  max_attempts: number;
  delays_s: Array<number>;
}

/** A user granted a service scopes; the code (stream code-<sha256>) is redeemed once. */
export interface AccessCodeIssued {
  account_id: string;
  account_prn: string;
  service: string;
  scopes: Array<string>;
  expires: number;
}

/** The service swapped the code for a delegated token. */
export interface AccessCodeRedeemed {
  service: string;
}

/** An account was registered; USER accounts start pending until their email is verified. */
export interface AccountRegistered {
  account_id: string;
  prn: string;
  /** USER, DEVICE or SERVICE. */
  type: string;
  nick: string;
  email: string;
  /** scrypt; never leaves the server. */
  password_hash: string;
  /** Names the browser challenge of the two-step registration. */
  challenge: string;
  redirect_uris: Array<string>;
  /** True when registered already verified (by an admin). */
  active: boolean;
}

/** The email was verified; the account may log in. */
export interface AccountVerified {
  account_id: string;
  nonce: string;
}

/** The app was deleted; its tokens stop being issued. */
export interface AppDeleted {
  app_id: string;
  /** So that read models can drop it from the owner's list. */
  owner_prn: string;
}

/** A third-party application was registered. */
export interface AppRegistered {
  app_id: string;
  prn: string;
  owner_id: string;
  owner_prn: string;
  owner_nick: string;
  /** public or confidential. */
  type: string;
  /** Confidential apps only; never leaves the server. */
  secret_hash: null | string;
  fields: AppFields;
}

/** PUT /apps/{id} replaced the app fields. */
export interface AppUpdated {
  app_id: string;
  fields: AppFields;
}

/** A user claimed an unowned device with its challenge. */
export interface DeviceClaimed {
  device_id: string;
  owner_id: string;
  owner_prn: string;
  owner_nick: string;
  nick: string;
  previous_nick: string;
}

/** A device was created by its owner, registered with a CSR, or registered itself (unowned, to be claimed). */
export interface DeviceCreated {
  device_id: string;
  prn: string;
  /** Empty while unowned. */
  owner_id: string;
  owner_prn: string;
  owner_nick: string;
  nick: string;
  /** AES-256-GCM sealed device secret; the key never leaves the server. */
  secret_sealed: string;
  /** Claims an unowned device. */
  challenge: string;
  user_meta: Record<string, string>;
  device_meta: Record<string, string>;
  /** PEM of the certificate issued from an IDevID CSR. */
  certificate: null | string;
}

/** The device was deleted: marked garbage, its nick given back. */
export interface DeviceMarkedGarbage {
  device_id: string;
  owner_prn: string;
  /** The nick it gave back; empty in events written before v2. */
  nick: string;
}

/** The device reported metadata: the keys whose values changed and the keys removed. */
export interface DeviceMetaUpdated {
  device_id: string;
  owner_prn: string;
  changed: Record<string, string>;
  removed: Array<string>;
}

/** The public flag was carried to every step (by the callback or the pipeline). */
export interface DevicePublicProcessed {
  device_id: string;
  public: boolean;
  steps_marked_public: number;
  steps_marked_non_public: number;
}

/** The public flag was set (only when it flips). */
export interface DevicePublicSet {
  device_id: string;
  owner_prn: string;
  public: boolean;
}

/** The owner gave the device a new nick. */
export interface DeviceRenamed {
  device_id: string;
  owner_prn: string;
  nick: string;
  previous_nick: string;
}

/** The device's login secret was replaced (by its owner or itself): the logins made with the old one end. */
export interface DeviceSecretRotated {
  device_id: string;
  owner_prn: string;
  secret_sealed: string;
}

/** A unique name (nick, email, app nick) is taken by an owner; stream unique-<kind>-<value>. */
export interface NameClaimed {
  kind: string;
  value: string;
  owner_id: string;
}

/** A unique name is free again (the claim that took it was abandoned or its owner renamed). */
export interface NameReleased {
  kind: string;
  value: string;
}

/** The password was set anew (with a reset token: that nonce is spent). */
export interface PasswordChanged {
  account_id: string;
  password_hash: string;
  reset_nonce: null | string;
}

/** A password reset link goes out (the mailer follows these events). */
export interface PasswordResetRequested {
  account_id: string;
  email: string;
  nonce: string;
  expires: number;
}

/** The profile fields, as replaced by PUT /profiles/. */
export interface ProfileUpdated {
  account_id: string;
  /** bio, company, fullName, github, gitlab, location, picture, twitter, website. */
  profile: Record<string, string>;
  meta: Record<string, string>;
  ovmode: null | Record<string, string>;
}

/** A spent refresh token was presented again: the whole family is revoked. */
export interface RefreshFamilyRevoked {
  reason: string;
}

/** A refresh token family starts at login (stream refresh-<family>). */
export interface RefreshTokenIssued {
  family: string;
  account_id: string;
  token_hash: string;
  expires: number;
  /** Impersonation: the target account id. */
  acting_as: null | string;
}

/** A refresh token was used and replaced; the one used is spent. */
export interface RefreshTokenRotated {
  token_hash: string;
  expires: number;
}

/** A registration not verified within its window gave its nick and email up to a new one; its challenge works no more. */
export interface RegistrationExpired {
  account_id: string;
  nick: string;
  email: string;
}

/** The device reported progress on a step. */
export interface StepProgressReported {
  device_id: string;
  owner_prn: string;
  rev: number;
  progress: number;
  status: string;
  status_msg: string;
  prev_progress: number;
  prev_status: string;
}

/** A step was marked public or not, and garbage or not, to match its device. */
export interface StepPublicitySet {
  device_id: string;
  rev: number;
  public: boolean;
  garbage: boolean;
}

/** A new step (revision) of a device trail (stream trail-<device id>). */
export interface StepPushed {
  device_id: string;
  owner_prn: string;
  rev: number;
  /** The step state as JSON. */
  state: string;
  commit_msg: string;
  /** sha256 of every object the state references. */
  objects: Array<string>;
  public: boolean;
}

/** The owner replaced the user metadata; the keys added or changed and the keys removed. */
export interface UserMetaReplaced {
  device_id: string;
  owner_prn: string;
  meta: Record<string, string>;
  changed_keys: Array<string>;
  removed_keys: Array<string>;
}

/** The challenge was passed: a verification email goes out (the mailer follows these events). */
export interface VerificationEmailRequested {
  account_id: string;
  email: string;
  /** The emailed token is an HMAC of this nonce; only the server can make it. */
  nonce: string;
  /** ms since the epoch. */
  expires: number;
}

/** The hub disabled a subscription whose every attempt had failed for the failure period (HUB_WEBHOOK_DISABLE_AFTER_S); its deliveries stop until the owner enables it again. */
export interface WebhookAutoDisabled {
  webhook_id: string;
  owner_prn: string;
  /** Why, as the subscription's disabled_reason shows it: endpoint_failing. */
  reason: string;
  /** When the first of the failed attempts since the last success ended, ms. */
  failing_since: number;
  /** When an attempt last succeeded, ms; null when none is known. */
  last_success: null | number;
}

/** A webhook subscription was created (stream webhook-<id>). */
export interface WebhookCreated {
  webhook_id: string;
  owner_prn: string;
  nick: string;
  url: string;
  description: string;
  event_types: Array<string>;
  enabled: boolean;
  devices: Array<string>;
  user_meta_keys: Array<string>;
  device_meta_keys: Array<string>;
  custom_headers: Record<string, string>;
  retry_policy: null | RetryPolicy;
  /** Deliveries per second at most; null: unlimited (and in events written before v2). */
  rate_limit: null | number;
  /** AES-256-GCM sealed signing secret. */
  secret_sealed: string;
}

/** A subscription was deleted; its deliveries stop. */
export interface WebhookDeleted {
  webhook_id: string;
  owner_prn: string;
}

/** A recovery's deliveries were selected and queued as delivery jobs of kind recover. */
export interface WebhookRecoveryQueued {
  recovery_id: string;
  webhook_id: string;
  owner_prn: string;
  /** The deliveries queued: one per event of the window that failed and has not succeeded since. */
  total: number;
}

/** A bulk recovery of a subscription's failed deliveries in a window was asked for (stream recovery-<id>). */
export interface WebhookRecoveryRequested {
  recovery_id: string;
  webhook_id: string;
  owner_prn: string;
  /** The window's start, inclusive, ms since the epoch. */
  since_ms: number;
  /** The window's end, exclusive, ms since the epoch: the time of the request when none was sent. */
  until_ms: number;
}

/** The signing secret was rotated: the new one signs first, the previous one still signs until the next rotation. */
export interface WebhookSecretRotated {
  webhook_id: string;
  owner_prn: string;
  secret_sealed: string;
  previous_sealed: string;
}

/** A subscription was replaced or patched: every field as it now is. */
export interface WebhookUpdated {
  webhook_id: string;
  owner_prn: string;
  nick: string;
  url: string;
  description: string;
  event_types: Array<string>;
  enabled: boolean;
  devices: Array<string>;
  user_meta_keys: Array<string>;
  device_meta_keys: Array<string>;
  custom_headers: Record<string, string>;
  retry_policy: null | RetryPolicy;
  /** Deliveries per second at most; null: unlimited (and in events written before v2). */
  rate_limit: null | number;
}

/** The data of every event of the store, by its type. */
export interface EventData {
  AccessCodeIssued: AccessCodeIssued;
  AccessCodeRedeemed: AccessCodeRedeemed;
  AccountRegistered: AccountRegistered;
  AccountVerified: AccountVerified;
  AppDeleted: AppDeleted;
  AppRegistered: AppRegistered;
  AppUpdated: AppUpdated;
  DeviceClaimed: DeviceClaimed;
  DeviceCreated: DeviceCreated;
  DeviceMarkedGarbage: DeviceMarkedGarbage;
  DeviceMetaUpdated: DeviceMetaUpdated;
  DevicePublicProcessed: DevicePublicProcessed;
  DevicePublicSet: DevicePublicSet;
  DeviceRenamed: DeviceRenamed;
  DeviceSecretRotated: DeviceSecretRotated;
  NameClaimed: NameClaimed;
  NameReleased: NameReleased;
  PasswordChanged: PasswordChanged;
  PasswordResetRequested: PasswordResetRequested;
  ProfileUpdated: ProfileUpdated;
  RefreshFamilyRevoked: RefreshFamilyRevoked;
  RefreshTokenIssued: RefreshTokenIssued;
  RefreshTokenRotated: RefreshTokenRotated;
  RegistrationExpired: RegistrationExpired;
  StepProgressReported: StepProgressReported;
  StepPublicitySet: StepPublicitySet;
  StepPushed: StepPushed;
  UserMetaReplaced: UserMetaReplaced;
  VerificationEmailRequested: VerificationEmailRequested;
  WebhookAutoDisabled: WebhookAutoDisabled;
  WebhookCreated: WebhookCreated;
  WebhookDeleted: WebhookDeleted;
  WebhookRecoveryQueued: WebhookRecoveryQueued;
  WebhookRecoveryRequested: WebhookRecoveryRequested;
  WebhookSecretRotated: WebhookSecretRotated;
  WebhookUpdated: WebhookUpdated;
}

export type EventType = keyof EventData;

/** An event as a decision returns it: `DomainEvent<"DeviceRenamed" | …>` is the union of those
 * types, each with its data, so that `switch (e.type)` narrows `e.data`. */
export type DomainEvent<T extends EventType = EventType> = {
  [K in T]: { type: K; data: EventData[K]; id?: string };
}[T];

/** An event as `evolve` folds it: with the time it was recorded (ms). */
export type FoldedEvent<T extends EventType = EventType> = DomainEvent<T> & { created: number };
