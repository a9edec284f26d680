package burrow

import (
	"fmt"
	"time"
)

// ErrorCode is a code of the core's errors. Every code is also a sentinel
// error: errors.Is(err, burrow.ErrNotFound) holds for an *Error of that
// code.
type ErrorCode string

// Error makes every code a sentinel error; its text is the code.
func (c ErrorCode) Error() string { return string(c) }

// The core's error codes (docs/lifecycle.md, "Errors"), one sentinel each.
const (
	// ErrSandboxReplaced: the name now holds another sandbox than the one
	// this value is bound to (Error.ActualID is the new one).
	ErrSandboxReplaced ErrorCode = "sandbox_replaced"
	// ErrAlreadyExists: a strict create found the name taken (or a snapshot
	// or a pool of that name exists).
	ErrAlreadyExists ErrorCode = "already_exists"
	// ErrNotFound: no sandbox of that name or id.
	ErrNotFound ErrorCode = "not_found"
	// ErrInvalidState: the operation is not allowed in the sandbox's status
	// (Error.Status).
	ErrInvalidState ErrorCode = "invalid_state"
	// ErrInvalidName: the name is not a valid sandbox name.
	ErrInvalidName ErrorCode = "invalid_name"
	// ErrInvalidConfig: the configuration is invalid.
	ErrInvalidConfig ErrorCode = "invalid_config"
	// ErrInvalidImage: the image cannot be used.
	ErrInvalidImage ErrorCode = "invalid_image"
	// ErrInvalidArgument: an argument of the call is invalid.
	ErrInvalidArgument ErrorCode = "invalid_argument"
	// ErrStarting: the sandbox is being started by another caller.
	ErrStarting ErrorCode = "starting"
	// ErrStartFailed: the start failed (the run is recorded as crashed).
	ErrStartFailed ErrorCode = "start_failed"
	// ErrTimeout: a bound passed (a wait, a call's deadline).
	ErrTimeout ErrorCode = "timeout"
	// ErrRuntimeUnavailable: the isolation runtime is missing or refused.
	ErrRuntimeUnavailable ErrorCode = "runtime_unavailable"
	// ErrGuest: the guest agent refused the request (Error.Guest).
	ErrGuest ErrorCode = "guest"
	// ErrProtocol: a malformed message between burrow's own parts.
	ErrProtocol ErrorCode = "protocol"
	// ErrStore: the state store failed.
	ErrStore ErrorCode = "store"
	// ErrIO: an operating-system error.
	ErrIO ErrorCode = "io"
	// ErrUnauthorized: the server refused the token.
	ErrUnauthorized ErrorCode = "unauthorized"
	// ErrUnsupported: the backend does not support the operation.
	ErrUnsupported ErrorCode = "unsupported"
	// ErrPortUnavailable: a published port's host address is taken (or
	// not this host's); the start did not happen.
	ErrPortUnavailable ErrorCode = "port_unavailable"
	// ErrSnapshotInUse: a snapshot cannot be removed while sandboxes
	// created from it exist; nothing was removed.
	ErrSnapshotInUse ErrorCode = "snapshot_in_use"
	// ErrForbidden: a burrow serve accepted the token, but its role or
	// tenant may not do this operation (Error.Operation); nothing was
	// changed.
	ErrForbidden ErrorCode = "forbidden"
	// ErrQuotaExceeded: the call would exceed a quota of the caller's
	// tenant (Error.Subject is the quota, Error.Limit its limit); nothing
	// was changed.
	ErrQuotaExceeded ErrorCode = "quota_exceeded"
	// ErrRateLimited: too many requests from this token; the call was not
	// served and may be sent again after Error.RetryAfter.
	ErrRateLimited ErrorCode = "rate_limited"
)

// ErrorCodes lists every code this package knows, in the core's order
// (the tests check it against the core's own list).
func ErrorCodes() []ErrorCode {
	return []ErrorCode{
		ErrSandboxReplaced, ErrAlreadyExists, ErrNotFound, ErrInvalidState,
		ErrInvalidName, ErrInvalidConfig, ErrInvalidImage, ErrInvalidArgument,
		ErrStarting, ErrStartFailed, ErrTimeout, ErrRuntimeUnavailable, ErrGuest,
		ErrProtocol, ErrStore, ErrIO, ErrUnauthorized, ErrUnsupported,
		ErrPortUnavailable, ErrSnapshotInUse, ErrForbidden, ErrQuotaExceeded,
		ErrRateLimited,
	}
}

// Error is an error of the burrow core. errors.Is(err, burrow.ErrXxx)
// matches its code; errors.As(err, &e) with e an *Error gives its fields.
type Error struct {
	// Code is the core's code.
	Code ErrorCode
	// Message is the core's text (for people; match on Code).
	Message string
	// SandboxID is the sandbox concerned, when there is one.
	SandboxID string
	// Name is the sandbox's name, when there is one.
	Name string
	// Status is the sandbox's status, for ErrInvalidState.
	Status Status
	// ActualID is the sandbox that holds the name now, for
	// ErrSandboxReplaced and ErrAlreadyExists.
	ActualID string
	// Operation is the refused operation, for ErrInvalidState and
	// ErrForbidden.
	Operation string
	// Subject and Reason say what is invalid and why, for the invalid_*
	// codes (for ErrQuotaExceeded, Subject is the quota: "sandboxes",
	// "cpus", ...).
	Subject, Reason string
	// After is the bound that passed, for ErrTimeout.
	After time.Duration
	// Guest is the guest agent's own error, for ErrGuest.
	Guest *GuestFailure
	// Path is the file concerned, when there is one.
	Path string
	// Sandboxes names the sandboxes that use a snapshot, for
	// ErrSnapshotInUse.
	Sandboxes []string
	// Limit is the quota's limit, in its own unit, for ErrQuotaExceeded.
	Limit uint64
	// RetryAfter is how long to wait before sending the call again, for
	// ErrRateLimited.
	RetryAfter time.Duration

	cause error
}

// GuestFailure is the guest agent's error: its code (such as "not_found")
// and message.
type GuestFailure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("burrow: %s (%s)", e.Message, e.Code)
}

// Is matches the sentinel of the error's code.
func (e *Error) Is(target error) bool {
	c, ok := target.(ErrorCode)
	return ok && c == e.Code
}

// Unwrap is the cause: context.DeadlineExceeded for a call whose
// context's deadline passed.
func (e *Error) Unwrap() error { return e.cause }

// errorBody is the core's error body.
type errorBody struct {
	Code         string        `json:"code"`
	Message      string        `json:"message"`
	Name         string        `json:"name"`
	ID           string        `json:"id"`
	ActualID     string        `json:"actual_id"`
	Status       Status        `json:"status"`
	Operation    string        `json:"operation"`
	Subject      string        `json:"subject"`
	Reason       string        `json:"reason"`
	AfterMs      int64         `json:"after_ms"`
	Guest        *GuestFailure `json:"guest"`
	Path         string        `json:"path"`
	Sandboxes    []string      `json:"sandboxes"`
	Limit        uint64        `json:"limit"`
	RetryAfterMs int64         `json:"retry_after_ms"`
}

func (b *errorBody) toError() *Error {
	return &Error{
		Code:       ErrorCode(b.Code),
		Message:    b.Message,
		SandboxID:  b.ID,
		Name:       b.Name,
		Status:     b.Status,
		ActualID:   b.ActualID,
		Operation:  b.Operation,
		Subject:    b.Subject,
		Reason:     b.Reason,
		After:      time.Duration(b.AfterMs) * time.Millisecond,
		Guest:      b.Guest,
		Path:       b.Path,
		Sandboxes:  b.Sandboxes,
		Limit:      b.Limit,
		RetryAfter: time.Duration(b.RetryAfterMs) * time.Millisecond,
	}
}
