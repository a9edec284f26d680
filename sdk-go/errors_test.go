package burrow

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"
)

// The refusals of a burrow serve with tenants, from the core's error
// body: their sentinel (and no other) and the fields each one carries.
func TestTenantErrorsFromTheirBodies(t *testing.T) {
	decode := func(text string) *Error {
		t.Helper()
		var b errorBody
		if err := json.Unmarshal([]byte(text), &b); err != nil {
			t.Fatal(err)
		}
		return b.toError()
	}
	only := func(e *Error, want ErrorCode) {
		t.Helper()
		wrapped := fmt.Errorf("context: %w", e)
		for _, c := range ErrorCodes() {
			if errors.Is(wrapped, c) != (c == want) {
				t.Errorf("errors.Is(%s error, %s) = %v", want, c, c != want)
			}
		}
	}

	e := decode(`{"code":"forbidden","message":"m","operation":"pool.create","reason":"role viewer"}`)
	only(e, ErrForbidden)
	if e.Operation != "pool.create" || e.Reason != "role viewer" {
		t.Errorf("forbidden: %+v", e)
	}
	e = decode(`{"code":"quota_exceeded","message":"m","subject":"cpus","limit":8,"reason":"9 requested"}`)
	only(e, ErrQuotaExceeded)
	if e.Subject != "cpus" || e.Limit != 8 || e.Reason != "9 requested" || e.RetryAfter != 0 {
		t.Errorf("quota_exceeded: %+v", e)
	}
	e = decode(`{"code":"rate_limited","message":"m","retry_after_ms":1500}`)
	only(e, ErrRateLimited)
	if e.RetryAfter != 1500*time.Millisecond || e.Limit != 0 {
		t.Errorf("rate_limited: %+v", e)
	}
}
