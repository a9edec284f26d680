// Package burrow runs sandboxes (containers or QEMU microVMs) that converge
// by name, sleep when idle and wake on the next call. It is the Go face of
// the burrow engine: every call goes through cgo to the Rust binding core
// (libburrow), which owns every validation, lifecycle rule and error.
//
// A sandbox is created, or converged on by name from many callers at once:
//
//	sb, err := burrow.ConnectOrCreateSandbox(ctx, "worker",
//		burrow.WithImage("python"), burrow.WithMemory(1024))
//	out, err := sb.Exec(ctx, []string{"python3", "-c", "print(40 + 2)"})
//
// A *Sandbox is bound to one sandbox id and one run; it never acts on
// another sandbox that took the name since (ErrSandboxReplaced). A
// *SandboxHandle (GetSandbox, ListSandboxes) is bound to one id whatever its
// status; ConnectOrStart gives a *Sandbox of its current run, StartSandbox
// starts a stopped sandbox by name:
//
//	handle, err := burrow.GetSandbox(ctx, "worker")
//	fmt.Println(handle.Status()) // "running" | "stopped" | ...
//	_ = sb.Stop(ctx)
//	sb, err = burrow.StartSandbox(ctx, "worker")
//
// Status() is a snapshot without a call (the status the value was made
// with, or that the last record it read had); Info reads a fresh record.
//
// Every call takes a context: cancelling it cancels the call in the engine
// and kills what it ran in the guest; a deadline that passes is an *Error
// of code ErrTimeout that also matches context.DeadlineExceeded.
//
// Errors are *Error values; errors.Is matches the sentinel of their code
// (ErrNotFound, ErrAlreadyExists, ErrSandboxReplaced, ErrInvalidState, ...)
// and errors.As gives their fields.
//
// Where sandboxes live: $BURROW_URL selects a `burrow serve`; otherwise the
// local engine on $BURROW_HOME (or Configure). A sandbox created without
// WithDetached stops when this process exits, however it exits (the
// engine's supervisor watches its owner).
//
// Building: the package links the static library libburrow.a, built by
// cargo from the burrow repository (`cargo build --release -p burrow-c`),
// found through CGO_LDFLAGS=-L<dir>; see the repository's sdk-go/README.md.
package burrow
