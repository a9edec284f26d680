package burrow_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// testImage is the busybox image the tests run ($BURROW_TEST_IMAGE).
var testImage = os.Getenv("BURROW_TEST_IMAGE")

// The test binary is also the child process of the tests that need other
// processes (an owner to kill, race callers): $BURROW_GO_CHILD says which.
func TestMain(m *testing.M) {
	if role := os.Getenv("BURROW_GO_CHILD"); role != "" {
		os.Exit(child(role))
	}
	if testImage == "" {
		fmt.Fprintln(os.Stderr, "BURROW_TEST_IMAGE must name the busybox image")
		os.Exit(2)
	}
	// The examples (and any call outside a test's own home) use a home of
	// this run: Configure("") falls back to $BURROW_HOME.
	dir, err := os.MkdirTemp("/tmp", "bgh")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Setenv("BURROW_HOME", dir)
	code := m.Run()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if page, err := burrow.ListSandboxes(ctx); err == nil {
		for _, h := range page.Sandboxes {
			_ = h.Destroy(ctx)
		}
	}
	cancel()
	os.RemoveAll(dir)
	os.Exit(code)
}

func child(role string) int {
	switch role {
	case "owner":
		return owner()
	case "race":
		return raceCaller()
	}
	fmt.Fprintln(os.Stderr, "unknown child role", role)
	return 2
}

// owner creates an attached sandbox, prints its id and waits to be killed.
func owner() int {
	burrow.Configure(os.Getenv("BURROW_GO_HOME"))
	sb, err := burrow.CreateSandbox(context.Background(), os.Getenv("BURROW_GO_NAME"), burrow.WithImage(testImage))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(sb.ID())
	time.Sleep(time.Hour)
	return 0
}

// home gives the test a fresh burrow home.
func home(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "bgo")
	if err != nil {
		t.Fatal(err)
	}
	burrow.Configure(dir)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The pools first: their warm sandboxes are never listed.
		if pools, err := burrow.ListPools(ctx); err == nil {
			for _, p := range pools {
				_ = burrow.RemovePool(ctx, p.Name)
			}
		}
		if page, err := burrow.ListSandboxes(ctx); err == nil {
			for _, h := range page.Sandboxes {
				_ = h.Destroy(ctx)
			}
		}
		burrow.Configure("")
		_ = os.RemoveAll(dir)
	})
	return dir
}
