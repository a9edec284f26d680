package burrow_test

import (
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
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

// A secret reaches its host, never the sandbox: the guest's variable holds
// a placeholder, the loopback server gets the value, the record has no
// value; without a network or with a bad host it is ErrInvalidConfig.
func TestSecret(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	const value = "go_secret_value_5d2a"
	heads := make(chan string, 4)
	l := must[net.Listener](t)(net.Listen("tcp", "127.0.0.1:0"))
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				head := ""
				for !strings.Contains(head, "\r\n\r\n") {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					head += string(buf[:n])
				}
				heads <- head
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}()
		}
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	caps := must[burrow.Capabilities](t)(burrow.BackendCapabilities(ctx))
	if !caps.Secrets {
		t.Fatal("the local backend has secrets")
	}
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-secret", burrow.WithImage(testImage),
		burrow.WithNetworkPolicy(burrow.NetworkPolicy{Allow: []string{"127.0.0.1"}}),
		burrow.WithSecret("TOKEN", value, "127.0.0.1")))
	defer func() { _ = sb.Destroy(ctx) }()
	info := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if len(info.Config.Secrets) != 1 || info.Config.Secrets[0].Name != "TOKEN" || !strings.HasPrefix(info.Config.Secrets[0].Placeholder, "BURROW_SECRET_") {
		t.Fatalf("secrets %+v", info.Config.Secrets)
	}
	out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c",
		"echo $TOKEN; wget -q -O - --header \"Authorization: Bearer $TOKEN\" http://10.0.2.2:" + port + "/"}))
	if got, want := string(out.Stdout), info.Config.Secrets[0].Placeholder+"\nok"; got != want {
		t.Fatalf("guest saw %q, want %q", got, want)
	}
	select {
	case head := <-heads:
		if !strings.Contains(head, "Authorization: Bearer "+value+"\r\n") {
			t.Fatalf("the server got %q", head)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the server")
	}
	if _, err := burrow.CreateSandbox(ctx, "go-secret-bad", burrow.WithImage(testImage), burrow.WithSecret("TOKEN", value, "127.0.0.1")); !errors.Is(err, burrow.ErrInvalidConfig) {
		t.Fatalf("no network: %v, want ErrInvalidConfig", err)
	}
	if _, err := burrow.CreateSandbox(ctx, "go-secret-bad", burrow.WithImage(testImage), burrow.WithNetwork(), burrow.WithSecret("TOKEN", value, "bad host")); !errors.Is(err, burrow.ErrInvalidConfig) {
		t.Fatalf("bad host: %v, want ErrInvalidConfig", err)
	}
	if _, err := burrow.GetSandbox(ctx, "go-secret-bad"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a refused sandbox exists: %v", err)
	}
}

// A secret's headers round-trip through the create and the record, and
// its value reaches the loopback server in them only: a placeholder in
// Authorization, which it does not name, is refused with nothing sent.
// A header that routes the request, or too many, is ErrInvalidConfig
// (the core's check).
func TestSecretInHeaders(t *testing.T) {
	home(t)
	ctx := ctxT(t)
	const value = "go_header_value_81f4"
	heads := make(chan string, 4)
	l := must[net.Listener](t)(net.Listen("tcp", "127.0.0.1:0"))
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				head := ""
				for !strings.Contains(head, "\r\n\r\n") {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					head += string(buf[:n])
				}
				heads <- head
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
			}()
		}
	}()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	sb := must[*burrow.Sandbox](t)(burrow.CreateSandbox(ctx, "go-secret-headers", burrow.WithImage(testImage),
		burrow.WithNetworkPolicy(burrow.NetworkPolicy{Allow: []string{"127.0.0.1"}}),
		burrow.WithSecretInHeaders("KEY", value, []string{"127.0.0.1"}, []string{"X-Api-Key"}),
		burrow.WithSecret("TOKEN", "go_default_value_81f5", "127.0.0.1")))
	defer func() { _ = sb.Destroy(ctx) }()
	info := must[burrow.SandboxInfo](t)(sb.Info(ctx))
	if s := info.Config.Secrets; len(s) != 2 || s[0].Name != "KEY" || len(s[0].Headers) != 1 || s[0].Headers[0] != "X-Api-Key" || len(s[1].Headers) != 0 {
		t.Fatalf("secrets %+v", s)
	}
	get := func(header, path string) string {
		out := must[*burrow.ExecResult](t)(sb.Exec(ctx, []string{"sh", "-c",
			"wget -q -O - --header \"" + header + ": $KEY\" http://10.0.2.2:" + port + "/" + path}))
		return string(out.Stdout)
	}
	if got := get("X-Api-Key", "named"); got != "ok" {
		t.Fatalf("guest saw %q", got)
	}
	select {
	case head := <-heads:
		if !strings.Contains(head, "\r\nX-Api-Key: "+value+"\r\n") {
			t.Fatalf("the server got %q", head)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no request reached the server")
	}
	if got := get("Authorization", "unnamed"); got == "ok" {
		t.Fatal("a placeholder in a header the secret does not name went through")
	}
	// (A request that reached the server was kept before its answer.)
	select {
	case head := <-heads:
		t.Fatalf("a refused request reached the server: %q", head)
	default:
	}
	many := make([]string, 17)
	for i := range many {
		many[i] = "X-" + strconv.Itoa(i)
	}
	for _, headers := range [][]string{{"Host"}, many} {
		if _, err := burrow.CreateSandbox(ctx, "go-secret-bad", burrow.WithImage(testImage), burrow.WithNetwork(),
			burrow.WithSecretInHeaders("KEY", value, []string{"127.0.0.1"}, headers)); !errors.Is(err, burrow.ErrInvalidConfig) {
			t.Fatalf("headers %v: %v, want ErrInvalidConfig", headers, err)
		}
	}
	if _, err := burrow.GetSandbox(ctx, "go-secret-bad"); !errors.Is(err, burrow.ErrNotFound) {
		t.Fatalf("a refused sandbox exists: %v", err)
	}
}
