package burrow_test

import (
	"errors"
	"testing"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// A fork of a running sandbox makes started copies with its files, named
// in order; a bad count and a taken name are refused and leave no copy; a
// stopped parent is ErrInvalidState.
func TestFork(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	parent := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-fork", burrow.WithImage(testImage)))
	must[*burrow.ExecResult](t)(parent.Exec(ctx, []string{"sh", "-c", "echo from-go > /kept && rm /bin/false"}))
	if caps := must[burrow.Capabilities](t)(burrow.BackendCapabilities(ctx)); !caps.Fork {
		t.Fatalf("capabilities %+v", caps)
	}
	copies := must[[]*burrow.Sandbox](t)(parent.Fork(ctx, burrow.WithForkCount(2)))
	if len(copies) != 2 || copies[0].Name() != "go-fork-fork-1" || copies[1].Name() != "go-fork-fork-2" ||
		copies[0].ID() == parent.ID() || copies[0].ID() == copies[1].ID() {
		t.Fatalf("copies %v", copies)
	}
	for _, c := range copies {
		out := must[*burrow.ExecResult](t)(c.Exec(ctx, []string{"sh", "-c", "cat /kept; test -e /bin/false || echo gone"}))
		if string(out.Stdout) != "from-go\ngone\n" {
			t.Fatalf("%s: %q", c.Name(), out.Stdout)
		}
	}
	must[*burrow.ExecResult](t)(copies[0].Exec(ctx, []string{"sh", "-c", "echo mine > /kept"}))
	if out := must[*burrow.ExecResult](t)(parent.Exec(ctx, []string{"cat", "/kept"})); string(out.Stdout) != "from-go\n" {
		t.Fatalf("the parent: %q", out.Stdout)
	}
	h := must[*burrow.SandboxHandle](t)(burrow.GetSandbox(ctx, "go-fork"))
	named := must[[]*burrow.SandboxHandle](t)(h.Fork(ctx, burrow.WithForkNames("go-fork-named")))
	if len(named) != 1 || named[0].Name() != "go-fork-named" {
		t.Fatalf("named %v", named)
	}
	if _, err := parent.Fork(ctx, burrow.WithForkCount(0)); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("a count of 0: %v", err)
	}
	if _, err := parent.Fork(ctx, burrow.WithForkNames("go-fork-free", "go-fork-named")); !errors.Is(err, burrow.ErrAlreadyExists) {
		t.Fatalf("a taken name: %v", err)
	}
	if _, err := burrow.GetSandbox(ctx, "go-fork-free"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a copy of a failed fork: %v", err)
	}
	for _, c := range copies {
		if err := c.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := named[0].Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := parent.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Fork(ctx); !errors.Is(err, burrow.ErrInvalidState) {
		t.Fatalf("a stopped parent: %v", err)
	}
	if err := parent.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
}
