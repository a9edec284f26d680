// hget: the guest's HTTPS client in core/cli/tests/secrets.rs. GETs a URL
// with an Authorization header, trusting the system's store (Go reads
// /etc/ssl/certs/ca-certificates.crt), and prints the body; on an error it
// prints it to stderr and exits 1.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	req, err := http.NewRequest("GET", os.Args[1], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if len(os.Args) > 2 {
		req.Header.Set("Authorization", os.Args[2])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	os.Stdout.Write(body)
}
