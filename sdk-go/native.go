package burrow

/*
#cgo CFLAGS: -I${SRCDIR}/include
#cgo LDFLAGS: -lburrow -lm -ldl -lpthread
#include <stdint.h>
#include <stdlib.h>
#include "burrow.h"

extern void burrowGoDone(void *context, BurrowResult result);

// The Go callback as a BurrowCallback; the context is a cgo.Handle.
static uint64_t burrow_go_call(const BurrowObject *target, const char *op,
                               const uint8_t *data, size_t len, uintptr_t handle) {
	return burrow_call_async(target, op, data, len, burrowGoDone, (void *)handle);
}
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"runtime/cgo"
	"unsafe"
)

// object is an object of the core (a sandbox, a handle, a process, a
// followed log), freed when the Go value becomes unreachable.
type object struct {
	ptr     *C.BurrowObject
	cleanup runtime.Cleanup
}

func newObject(ptr *C.BurrowObject) *object {
	o := &object{ptr: ptr}
	o.cleanup = runtime.AddCleanup(o, func(p *C.BurrowObject) { C.burrow_object_free(p) }, ptr)
	return o
}

// release frees the object now instead of when it becomes unreachable (a
// file stream closed early: the core drops it, abandoning the transfer).
// The object must not be used again.
func (o *object) release() {
	o.cleanup.Stop()
	C.burrow_object_free(o.ptr)
	o.ptr = nil
}

// reply is what the library's callback hands back.
type reply struct {
	json string
	obj  *C.BurrowObject
}

//export burrowGoDone
func burrowGoDone(ctx unsafe.Pointer, r C.BurrowResult) {
	h := cgo.Handle(uintptr(ctx))
	ch := h.Value().(chan reply)
	h.Delete()
	ch <- reply{json: C.GoString(r.json), obj: r.object}
	C.burrow_result_free(r)
}

// op is one call of the core: its name and arguments (see the binding
// core's ModuleOp, SandboxOp, ProcessOp and LogOp).
type op map[string]any

// call runs op on target (nil: the module) with the byte argument data,
// until it ends or ctx is done. Cancelling ctx cancels the call in the
// core (a command it runs in the guest is killed).
func call(ctx context.Context, target *object, o op, data []byte) (json.RawMessage, *object, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, ctxError(ctx, err)
	}
	text, err := json.Marshal(o)
	if err != nil {
		return nil, nil, fmt.Errorf("burrow: encoding the call: %w", err)
	}
	cop := C.CString(string(text))
	defer C.free(unsafe.Pointer(cop))
	var tptr *C.BurrowObject
	if target != nil {
		tptr = target.ptr
	}
	var dptr *C.uint8_t
	if data != nil {
		buf := data
		if len(buf) == 0 {
			buf = []byte{0} // empty data is a non-NULL pointer to no bytes
		}
		dptr = (*C.uint8_t)(unsafe.Pointer(&buf[0]))
		defer runtime.KeepAlive(buf)
	}
	ch := make(chan reply, 1)
	h := cgo.NewHandle(ch)
	// The library copies its inputs before it returns.
	id := C.burrow_go_call(tptr, cop, dptr, C.size_t(len(data)), C.uintptr_t(h))
	runtime.KeepAlive(target)
	var r reply
	if id == 0 {
		r = <-ch // the callback has already run, with the error
	} else {
		select {
		case r = <-ch:
		case <-ctx.Done():
			if C.burrow_cancel(id) {
				h.Delete()
				return nil, nil, ctxError(ctx, ctx.Err())
			}
			r = <-ch // it had ended: its callback runs or ran
		}
	}
	return decode(r)
}

// decode turns a reply into a value, a new object, or the core's error.
func decode(r reply) (json.RawMessage, *object, error) {
	var obj *object
	if r.obj != nil {
		obj = newObject(r.obj)
	}
	var res struct {
		Ok    json.RawMessage `json:"ok"`
		Error *errorBody      `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.json), &res); err != nil {
		return nil, nil, fmt.Errorf("burrow: a malformed answer of the core: %w", err)
	}
	if res.Error != nil {
		return nil, nil, res.Error.toError()
	}
	return res.Ok, obj, nil
}

// ctxError is the error of a call whose context ended: a deadline is a
// timeout of the core's kind (errors.Is matches both ErrTimeout and
// context.DeadlineExceeded); a cancellation is the context's error.
func ctxError(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: ErrTimeout, Message: "the context's deadline passed before the call ended", cause: err}
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return err
}

// Configure sets the burrow home of the local backend for the calls that
// follow ("" : $BURROW_HOME, else the default). $BURROW_URL still selects a
// `burrow serve`.
func Configure(home string) {
	if home == "" {
		C.burrow_configure(nil)
		return
	}
	c := C.CString(home)
	defer C.free(unsafe.Pointer(c))
	C.burrow_configure(c)
}

// InFlight is the number of this process's calls still running in the
// core (diagnostics: a cancelled call must not linger).
func InFlight() int {
	return int(C.burrow_in_flight())
}

// coreErrorCodes is the core's list of error codes.
func coreErrorCodes() []string {
	s := C.burrow_error_codes()
	defer C.burrow_string_free(s)
	var codes []string
	_ = json.Unmarshal([]byte(C.GoString(s)), &codes)
	return codes
}

// cDescribe is the object as the core describes it (JSON).
func cDescribe(o *object) string {
	s := C.burrow_object_describe(o.ptr)
	defer C.burrow_string_free(s)
	runtime.KeepAlive(o)
	return C.GoString(s)
}

// liveObjects is the number of objects the library handed out and that
// are not freed yet (the leak test's measure).
func liveObjects() int {
	return int(C.burrow_objects_live())
}
