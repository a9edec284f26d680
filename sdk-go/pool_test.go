package burrow_test

import (
	"errors"
	"reflect"
	"testing"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// A create of a pool's configuration claims one of its running sandboxes
// (the creator's name, labels and environment); a define never does; the
// counts, a scale, a removal and the typed errors of bad definitions.
func TestPools(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	caps := must[burrow.Capabilities](t)(burrow.BackendCapabilities(ctx))
	if !caps.Pools {
		t.Fatal("the local backend has pools")
	}
	pool := must[burrow.PoolInfo](t)(burrow.CreatePool(ctx, "go-pool", 1, burrow.WithImage(testImage),
		burrow.WithEnv(map[string]string{"POOLED": "yes"})))
	if pool.Name != "go-pool" || pool.Size != 1 || pool.Warm != 1 || pool.Starting != 0 ||
		pool.Claims != 0 || pool.Misses != 0 || pool.LastRefill == nil || pool.CreatedAt.IsZero() ||
		!reflect.DeepEqual(pool.Config.Env, map[string]string{"POOLED": "yes"}) || pool.Config.StartupTimeout == 0 {
		t.Fatalf("pool %+v", pool)
	}
	// Warm sandboxes are nobody's: not listed.
	if page := must[burrow.SandboxPage](t)(burrow.ListSandboxes(ctx)); len(page.Sandboxes) != 0 {
		t.Fatalf("listed %d sandboxes", len(page.Sandboxes))
	}

	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-claimed", burrow.WithImage(testImage),
		burrow.WithEnv(map[string]string{"POOLED": "yes", "TASK": "7"}), burrow.WithLabels(map[string]string{"team": "go"})))
	info := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if info.Name != "go-claimed" || info.Status != burrow.StatusRunning || info.Config.Labels["team"] != "go" {
		t.Fatalf("claimed %+v", info)
	}
	out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c", "echo $POOLED $TASK"}))
	if string(out.Stdout) != "yes 7\n" {
		t.Fatalf("the claimed sandbox's env: %q", out.Stdout)
	}
	if p := must[burrow.PoolInfo](t)(burrow.GetPool(ctx, "go-pool")); p.Claims != 1 || p.Misses != 0 {
		t.Fatalf("after a claim %+v", p)
	}
	defined := must[*burrow.SandboxHandle](t)(burrow.DefineSandbox(ctx, "go-defined", burrow.WithImage(testImage),
		burrow.WithEnv(map[string]string{"POOLED": "yes"})))
	if i := must[burrow.SandboxInfo](t)(defined.Info(ctx)); i.Status != burrow.StatusCreated {
		t.Fatalf("a define claimed: %s", i.Status)
	}

	for _, c := range []struct {
		name string
		size int
		opts []burrow.Option
		want burrow.ErrorCode
	}{
		{"go-pool", 1, nil, burrow.ErrAlreadyExists},
		{"no/slash/x", 1, nil, burrow.ErrInvalidName},
		{"go-big", 65, nil, burrow.ErrInvalidArgument},
		{"go-labelled", 1, []burrow.Option{burrow.WithLabels(map[string]string{"k": "v"})}, burrow.ErrInvalidConfig},
	} {
		opts := append([]burrow.Option{burrow.WithImage(testImage)}, c.opts...)
		if _, err := burrow.CreatePool(ctx, c.name, c.size, opts...); !errors.Is(err, c.want) {
			t.Fatalf("pool %s of %d: %v, want %s", c.name, c.size, err, c.want)
		}
	}
	if _, err := burrow.ScalePool(ctx, "go-pool", 65); !errors.Is(err, burrow.ErrInvalidArgument) {
		t.Fatalf("a scale past 64: %v", err)
	}
	if _, err := burrow.ScalePool(ctx, "go-nope", 1); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("an unknown pool: %v", err)
	}
	if all := must[[]burrow.PoolInfo](t)(burrow.ListPools(ctx)); len(all) != 1 || all[0].Name != "go-pool" {
		t.Fatalf("listed %+v", all)
	}

	scaled := must[burrow.PoolInfo](t)(burrow.ScalePool(ctx, "go-pool", 0))
	if scaled.Size != 0 || scaled.Warm != 0 || scaled.Starting != 0 {
		t.Fatalf("scaled %+v", scaled)
	}
	if err := burrow.RemovePool(ctx, "go-pool"); err != nil {
		t.Fatal(err)
	}
	if _, err := burrow.GetPool(ctx, "go-pool"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a removed pool: %v", err)
	}
	// The claimed sandbox is an ordinary one now.
	if i := must[burrow.SandboxInfo](t)(sb.Info(ctx)); i.Status != burrow.StatusRunning {
		t.Fatalf("the claimed sandbox after the removal: %s", i.Status)
	}
}
