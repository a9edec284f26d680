// The error classes: one per code of the core (re-exported by index.ts).

import type { Status } from "./types";

/** The core's error body. */
export interface ErrorBody {
  code: string;
  message: string;
  name?: string;
  id?: string;
  actual_id?: string;
  status?: Status;
  operation?: string;
  subject?: string;
  reason?: string;
  after_ms?: number;
  guest?: { code: string; message: string };
  path?: string;
  sandboxes?: string[];
  limit?: number;
  retry_after_ms?: number;
}

/**
 * An error of the burrow core; one subclass per code. `name` is the class
 * name (as for every `Error`); the sandbox's name is `sandboxName`.
 */
export class BurrowError extends Error {
  /** The code of this class. */
  static readonly CODE: string = "";
  readonly code: string;
  readonly sandboxId?: string;
  readonly sandboxName?: string;
  readonly status?: Status;
  readonly actualId?: string;
  readonly operation?: string;
  readonly subject?: string;
  readonly reason?: string;
  /** A timeout's bound, in seconds (as every duration of this API). */
  readonly after?: number;
  /** The same bound in milliseconds (the core's `after_ms`). */
  readonly afterMs?: number;
  /** For `snapshot_in_use`: the names of the sandboxes that use it. */
  readonly sandboxes?: string[];
  /** For `quota_exceeded`: the quota's limit, in its own unit (`subject` is the quota). */
  readonly limit?: number;
  /** For `rate_limited`: how long to wait before trying again, in seconds. */
  readonly retryAfter?: number;
  /** The same wait in milliseconds (the core's `retry_after_ms`). */
  readonly retryAfterMs?: number;
  readonly body: ErrorBody;

  constructor(body: ErrorBody) {
    super(body.message);
    this.name = new.target.name;
    this.body = body;
    this.code = body.code;
    this.sandboxId = body.id;
    this.sandboxName = body.name;
    this.status = body.status;
    this.actualId = body.actual_id;
    this.operation = body.operation;
    this.subject = body.subject;
    this.reason = body.reason;
    this.afterMs = body.after_ms;
    this.after = body.after_ms === undefined ? undefined : body.after_ms / 1000;
    this.sandboxes = body.sandboxes;
    this.limit = body.limit;
    this.retryAfterMs = body.retry_after_ms;
    this.retryAfter = body.retry_after_ms === undefined ? undefined : body.retry_after_ms / 1000;
  }
}

function errorClass(code: string, className: string): typeof BurrowError {
  const cls = {
    [className]: class extends BurrowError {
      static readonly CODE = code;
    },
  }[className];
  return cls;
}

export const SandboxReplacedError = errorClass("sandbox_replaced", "SandboxReplacedError");
export const SandboxAlreadyExistsError = errorClass("already_exists", "SandboxAlreadyExistsError");
export const SandboxNotFoundError = errorClass("not_found", "SandboxNotFoundError");
export const InvalidStateError = errorClass("invalid_state", "InvalidStateError");
export const InvalidNameError = errorClass("invalid_name", "InvalidNameError");
export const InvalidConfigError = errorClass("invalid_config", "InvalidConfigError");
export const InvalidImageError = errorClass("invalid_image", "InvalidImageError");
export const InvalidArgumentError = errorClass("invalid_argument", "InvalidArgumentError");
export const StartingError = errorClass("starting", "StartingError");
export const StartFailedError = errorClass("start_failed", "StartFailedError");
export const TimeoutError = errorClass("timeout", "TimeoutError");
export const RuntimeUnavailableError = errorClass("runtime_unavailable", "RuntimeUnavailableError");
export const GuestError = errorClass("guest", "GuestError");
export const ProtocolError = errorClass("protocol", "ProtocolError");
export const StoreError = errorClass("store", "StoreError");
export const BurrowIOError = errorClass("io", "BurrowIOError");
export const UnauthorizedError = errorClass("unauthorized", "UnauthorizedError");
export const UnsupportedError = errorClass("unsupported", "UnsupportedError");
/** A published port's host address is taken (or not this host's): the start did not happen. */
export const PortUnavailableError = errorClass("port_unavailable", "PortUnavailableError");
/** A snapshot cannot be removed: sandboxes created from it still exist. Nothing was removed. */
export const SnapshotInUseError = errorClass("snapshot_in_use", "SnapshotInUseError");
/** A `burrow serve` accepted the token, but its role or tenant may not do this (`operation`). Nothing was changed. */
export const ForbiddenError = errorClass("forbidden", "ForbiddenError");
/** The call would exceed a quota of the caller's tenant (`subject`, `limit`). Nothing was changed. */
export const QuotaExceededError = errorClass("quota_exceeded", "QuotaExceededError");
/** Too many requests from this token: not served; try again after `retryAfter` seconds. */
export const RateLimitedError = errorClass("rate_limited", "RateLimitedError");

/** Every error class by its code (the core's list, checked by the tests). */
export const ERROR_CLASSES: Readonly<Record<string, typeof BurrowError>> = Object.freeze(
  Object.fromEntries(
    [
      SandboxReplacedError,
      SandboxAlreadyExistsError,
      SandboxNotFoundError,
      InvalidStateError,
      InvalidNameError,
      InvalidConfigError,
      InvalidImageError,
      InvalidArgumentError,
      StartingError,
      StartFailedError,
      TimeoutError,
      RuntimeUnavailableError,
      GuestError,
      ProtocolError,
      StoreError,
      BurrowIOError,
      UnauthorizedError,
      UnsupportedError,
      PortUnavailableError,
      SnapshotInUseError,
      ForbiddenError,
      QuotaExceededError,
      RateLimitedError,
    ].map((c) => [c.CODE, c]),
  ),
);
