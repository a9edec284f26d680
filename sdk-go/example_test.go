package burrow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// The image of the examples: a small root filesystem with a shell.
var exampleImage = os.Getenv("BURROW_TEST_IMAGE")

func Example() {
	ctx := context.Background()
	sb, err := burrow.CreateSandbox(ctx, "example", burrow.WithImage(exampleImage))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Destroy(ctx)
	out, err := sb.Exec(ctx, []string{"echo", "hello"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(out.Stdout))
	// Output: hello
}

func ExampleConnectOrCreateSandbox() {
	ctx := context.Background()
	a, _ := burrow.ConnectOrCreateSandbox(ctx, "shared", burrow.WithImage(exampleImage))
	b, _ := burrow.ConnectOrCreateSandbox(ctx, "shared", burrow.WithImage(exampleImage))
	fmt.Println(a.ID() == b.ID(), a.Generation(), b.Generation())
	_ = a.Destroy(ctx)
	// Output: true 1 1
}

func ExampleGetSandbox() {
	ctx := context.Background()
	if _, err := burrow.GetSandbox(ctx, "nobody-here"); errors.Is(err, burrow.ErrNotFound) {
		var e *burrow.Error
		errors.As(err, &e)
		fmt.Println(e.Code, e.Name)
	}
	// Output: not_found nobody-here
}

func ExampleSandbox_Spawn() {
	ctx := context.Background()
	sb, _ := burrow.CreateSandbox(ctx, "spawner", burrow.WithImage(exampleImage))
	defer sb.Destroy(ctx)
	var out strings.Builder
	p, _ := sb.Spawn(ctx, []string{"tr", "a-z", "A-Z"},
		burrow.WithStdin(strings.NewReader("shout\n")), burrow.WithStdout(&out))
	status, _ := p.Wait()
	fmt.Print(out.String())
	fmt.Println(status.ExitCode)
	// Output:
	// SHOUT
	// 0
}
