package burrow_test

import (
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"testing"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// A policy is kept in the configuration and changed live; a bad rule is
// ErrInvalidConfig and changes nothing.
func TestNetworkPolicy(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	policy := burrow.NetworkPolicy{Allow: []string{"pypi.org", "tcp:*.github.com:443"}, Deny: []string{"udp:*"}}
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-net", burrow.WithImage(testImage), burrow.WithNetworkPolicy(policy)))
	defer func() { _ = sb.Destroy(ctx) }()
	info := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if !info.Config.Network || info.Config.NetworkPolicy == nil || !reflect.DeepEqual(*info.Config.NetworkPolicy, policy) {
		t.Fatalf("config network %v %+v, want %+v", info.Config.Network, info.Config.NetworkPolicy, policy)
	}
	plan := must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.SetNetworkPolicy(burrow.NetworkPolicy{Allow: []string{"files.pythonhosted.org"}})))
	if len(plan.Changes) != 1 || plan.Changes[0].Field != "network" || plan.Changes[0].Applies != burrow.AppliesLive {
		t.Fatalf("plan %+v", plan.Changes)
	}
	if _, err := sb.Modify(ctx, burrow.SetNetworkPolicy(burrow.NetworkPolicy{Allow: []string{"a..b"}})); !errors.Is(err, burrow.ErrInvalidConfig) {
		t.Fatalf("bad rule: %v, want ErrInvalidConfig", err)
	}
	info = must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if got := info.Config.NetworkPolicy; got == nil || !reflect.DeepEqual(got.Allow, []string{"files.pythonhosted.org"}) {
		t.Fatalf("policy after a refused change: %+v", got)
	}
	must[burrow.ModifyPlan](t)(sb.Modify(ctx, burrow.SetNetwork(false)))
	info = must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if info.Config.Network || info.Config.NetworkPolicy != nil {
		t.Fatalf("network after SetNetwork(false): %v %+v", info.Config.Network, info.Config.NetworkPolicy)
	}
	if _, err := burrow.CreateSandbox(ctx, "go-net-bad", burrow.WithImage(testImage), burrow.WithPort("80")); !errors.Is(err, burrow.ErrInvalidConfig) {
		t.Fatalf("bad port: %v, want ErrInvalidConfig", err)
	}
	if _, err := burrow.GetSandbox(ctx, "go-net-bad"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a refused create left %v", err)
	}
}

// A published port reaches a server in the sandbox; a taken host port is
// ErrPortUnavailable.
func TestPublishedPort(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	h := must[*burrow.SandboxHandle](t)(burrow.DefineSandbox(ctx, "go-port", burrow.WithImage(testImage), burrow.WithPort(port+":8000")))
	defer func() { _ = h.Destroy(ctx) }()
	if _, err := h.Start(ctx); !errors.Is(err, burrow.ErrPortUnavailable) {
		t.Fatalf("start on a taken port: %v, want ErrPortUnavailable", err)
	}
	_ = l.Close()
	sb := must[*burrow.Sandbox](t)(h.Start(ctx))
	if got := must[burrow.SandboxInfo](t)(sb.Info(ctx)).Config.Ports; !reflect.DeepEqual(got, []string{"127.0.0.1:" + port + ":8000"}) {
		t.Fatalf("ports %v", got)
	}
	shell(t, ctx, sb, "setsid nc -ll -p 8000 -e echo hi </dev/null >/dev/null 2>&1 &")
	var got []byte
	for end := time.Now().Add(20 * time.Second); len(got) == 0 && time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+port); err == nil {
			got, _ = io.ReadAll(c)
			_ = c.Close()
		}
	}
	if string(got) != "hi\n" {
		t.Fatalf("published port read %q", got)
	}
}
