// Many processes, one sandbox: N copies of this program call
// ConnectOrCreateSandbox on the same name at once and all get the same id.
//
//	go run ./convergence IMAGE [N]
package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	image := "python"
	if len(os.Args) > 1 {
		image = os.Args[1]
	}
	if os.Getenv("CONVERGENCE_CHILD") == "1" {
		sb, err := burrow.ConnectOrCreateSandbox(ctx, "converge-go", burrow.WithImage(image), burrow.WithDetached())
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %d\n", sb.ID(), sb.Generation())
		return
	}
	n := 8
	if len(os.Args) > 2 {
		n, _ = strconv.Atoi(os.Args[2])
	}
	outs := make(chan string, n)
	for i := 0; i < n; i++ {
		cmd := exec.CommandContext(ctx, os.Args[0], image)
		cmd.Env = append(os.Environ(), "CONVERGENCE_CHILD=1")
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			log.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		go func() {
			line, _ := bufio.NewReader(stdout).ReadString('\n')
			_ = cmd.Wait()
			outs <- strings.TrimSpace(line)
		}()
	}
	answers := map[string]int{}
	for i := 0; i < n; i++ {
		answers[<-outs]++
	}
	fmt.Printf("%d processes converged on %v\n", n, answers)
	if h, err := burrow.GetSandbox(ctx, "converge-go"); err == nil {
		_ = h.Destroy(ctx)
	}
	if len(answers) != 1 {
		os.Exit(1)
	}
}
