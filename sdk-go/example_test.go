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

func ExampleStartSandbox() {
	ctx := context.Background()
	sb, err := burrow.CreateSandbox(ctx, "restartable", burrow.WithImage(exampleImage))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = sb.Stop(ctx)
	fmt.Println(sb.Status()) // the record the stop answered, no call
	again, err := burrow.StartSandbox(ctx, "restartable")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer again.Destroy(ctx)
	fmt.Println(again.ID() == sb.ID(), again.Status(), again.Generation())
	// Output:
	// stopped
	// true running 2
}

func ExampleListSandboxes() {
	ctx := context.Background()
	sb, err := burrow.CreateSandbox(ctx, "listed", burrow.WithImage(exampleImage),
		burrow.WithLabels(map[string]string{"example": "list"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Destroy(ctx)
	page, _ := burrow.ListSandboxes(ctx, burrow.WithLabel("example", "list"))
	for _, handle := range page.Sandboxes {
		fmt.Printf("%s: %s\n", handle.Name(), handle.Status())
	}
	// Output: listed: running
}

func ExampleSandbox_Modify() {
	ctx := context.Background()
	sb, err := burrow.CreateSandbox(ctx, "resized", burrow.WithImage(exampleImage))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Destroy(ctx)
	plan, _ := sb.Modify(ctx, burrow.ModifyOptions{CPUs: 2, MemoryMiB: 256})
	fmt.Println(plan.Info.Config.CPUs, plan.Info.Config.MemoryMB)
	// Output: 2 256
}
