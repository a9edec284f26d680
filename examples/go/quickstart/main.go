// The Go quickstart: a sandbox, a command, a file, a stop.
//
//	go run ./quickstart IMAGE
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

func main() {
	image := "python"
	if len(os.Args) > 1 {
		image = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	sb, err := burrow.ReplaceSandbox(ctx, "quickstart-go", burrow.WithImage(image), burrow.WithMemory(256),
		// Enforced where the host can (root, or a delegated cgroup), else run without.
		burrow.WithBestEffortLimits())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (%s) is %s\n", sb.Name(), sb.ID(), sb.Status())

	out, err := sb.Exec(ctx, []string{"echo", "hello from the sandbox"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(out.Stdout))

	if err := sb.FS().WriteFile(ctx, "/tmp/note.txt", []byte("some text"), 0o644); err != nil {
		log.Fatal(err)
	}
	note, err := sb.FS().ReadFile(ctx, "/tmp/note.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read back: %s\n", note)

	if err := sb.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stopped: %s (%s)\n", info.Status, info.LastRun.ExitReason)
	if err := sb.Destroy(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := burrow.GetSandbox(ctx, "quickstart-go"); errors.Is(err, burrow.ErrNotFound) {
		fmt.Println("destroyed")
	}
}
