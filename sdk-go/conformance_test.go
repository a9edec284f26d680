package burrow_test

// The language-neutral lifecycle cases (tests/conformance/cases.json), one
// subtest per case id, interpreted on top of this package: the Go twin of
// sdk-python/tests/conformance_runner.py and sdk-node's runner (the step
// vocabulary is in tests/conformance/README.md). A race with
// "processes": true runs each caller in its own process: this test binary
// again, with BURROW_GO_CHILD=race, released together by a barrier on
// stdin.
//
//	BURROW_DRIVER=vm BURROW_CONFORMANCE_TIME_SCALE=3   the vm driver
//	BURROW_TEST_REMOTE=1                                a `burrow serve` per case

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

type step = map[string]any

type confCase struct {
	ID        string   `json:"id"`
	Title     string   `json:"title"`
	Reference string   `json:"reference"`
	Steps     []step   `json:"steps"`
	Tags      []string `json:"tags"`
	Timeout   float64  `json:"timeout"`
}

type confDoc struct {
	Format string     `json:"format"`
	Cases  []confCase `json:"cases"`
}

func casesPath() string {
	if p := os.Getenv("BURROW_CONFORMANCE_CASES"); p != "" {
		return p
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "tests", "conformance", "cases.json")
}

func loadCases(t *testing.T) confDoc {
	t.Helper()
	data, err := os.ReadFile(casesPath())
	if err != nil {
		t.Fatalf("the cases file (set BURROW_CONFORMANCE_CASES): %v", err)
	}
	var doc confDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// errMissing marks a field that is not there (unlike nil, a value).
type missingT struct{}

var missing = missingT{}

// conformanceFailure is a step whose outcome did not meet its expectation.
type conformanceFailure struct{ msg string }

func (f *conformanceFailure) Error() string { return f.msg }

func failf(format string, a ...any) error { return &conformanceFailure{fmt.Sprintf(format, a...)} }

type result struct {
	kind string // sandbox, handle, info, plan, exec, value, list, process, none
	obj  any
}

type outcome struct {
	res *result
	err error
}

type collected struct {
	stdout, stderr []byte
	status         burrow.ExitStatus
	truncated      bool
}

type raceReport struct {
	Ok     bool           `json:"ok"`
	Code   string         `json:"code"`
	Error  string         `json:"error"`
	Fields map[string]any `json:"fields"`
	Pid    int            `json:"pid"`
}

// -- the tests ----------------------------------------------------------------

var remoteMode = os.Getenv("BURROW_TEST_REMOTE") == "1"

// serve starts a `burrow serve` on a fresh home and points this process
// (and the race callers it starts) at it.
func serve(t *testing.T, home string) func() {
	bin := os.Getenv("BURROW_BIN")
	env := append(os.Environ(), "BURROW_HOME="+home, "BURROW_SERVE_LISTEN=127.0.0.1:0", "BURROW_SERVE_IDLE_TIMEOUT=0", "BURROW_URL=", "BURROW_TOKEN=")
	tokCmd := exec.Command(bin, "serve", "token", "create", "tests", "--role", "admin")
	tokCmd.Env = env
	tok, err := tokCmd.Output()
	if err != nil {
		t.Fatalf("burrow serve token create: %v", err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	token := strings.TrimSpace(string(tok))
	logf, _ := os.Create(filepath.Join(home, "serve.log"))
	cmd.Stderr = logf
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok {
		_ = cmd.Process.Kill()
		t.Fatalf("burrow serve did not start: %q", line)
	}
	os.Setenv("BURROW_URL", url)
	os.Setenv("BURROW_TOKEN", token)
	return func() {
		defer func() {
			os.Unsetenv("BURROW_URL")
			os.Unsetenv("BURROW_TOKEN")
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		}()
		// The case really went through the server.
		req, _ := http.NewRequest("GET", url+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		m := regexp.MustCompile(`(?m)^burrow_api_requests_total (\d+)`).FindSubmatch(body)
		if m == nil || string(m[1]) == "0" {
			t.Fatalf("the server answered none of the case's requests")
		}
	}
}

func runOnFreshHome(t *testing.T, c confCase) error {
	dir, err := os.MkdirTemp("/tmp", "bgc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	home := dir
	if remoteMode {
		defer serve(t, dir)()
		home = ""
	} else {
		burrow.Configure(dir)
		defer burrow.Configure("")
	}
	if missing := lacking(t, c); len(missing) > 0 {
		// As the Rust kit reports such a case: unsupported, not passed.
		t.Skipf("unsupported by the backend (lacks %s)", strings.Join(missing, ", "))
	}
	return newRunner(testImage, home).runCase(context.Background(), c)
}

// lacking is the capabilities c needs that the backend lacks, as the
// package reports them.
func lacking(t *testing.T, c confCase) []string {
	caps, err := burrow.BackendCapabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	has := capabilityTags(caps)
	var missing []string
	for _, tag := range c.Tags {
		if ok, known := has[tag]; known && !ok {
			missing = append(missing, tag)
		}
	}
	return missing
}

// capabilityTags is caps by the cases' tag names.
func capabilityTags(caps burrow.Capabilities) map[string]bool {
	return map[string]bool{
		"pause": caps.Pause, "modify_live": caps.ModifyLive, "metrics": caps.Metrics,
		"logs": caps.Logs, "idle_reclaim": caps.IdleReclaim, "attached": caps.Attached,
		"persistent_layer": caps.PersistentLayer, "network_policy": caps.NetworkPolicy,
		"published_ports": caps.PublishedPorts, "secrets": caps.Secrets,
		"snapshots": caps.Snapshots, "full_snapshots": caps.FullSnapshots,
		"fork": caps.Fork, "pools": caps.Pools,
	}
}

// The package reports the backend's capabilities; an operation of one it
// lacks fails with ErrUnsupported and changes nothing.
func TestBackendCapabilities(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "bgc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if remoteMode {
		defer serve(t, dir)()
	} else {
		burrow.Configure(dir)
		defer burrow.Configure("")
	}
	ctx := context.Background()
	caps, err := burrow.BackendCapabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !remoteMode && os.Geteuid() == 0 {
		// The local engine run by root has every capability; full
		// snapshots (memory and processes) are the vm driver's alone.
		for tag, ok := range capabilityTags(caps) {
			if tag == "full_snapshots" {
				if ok && os.Getenv("BURROW_DRIVER") != "vm" {
					t.Errorf("full snapshots claimed without the vm driver")
				}
			} else if !ok {
				t.Errorf("root's local backend lacks %s", tag)
			}
		}
	}
	sb, err := burrow.CreateSandbox(ctx, "caps", burrow.WithImage(testImage))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if caps.Pause {
		if _, err := sb.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	} else if _, err := sb.Pause(ctx); !errors.Is(err, burrow.ErrUnsupported) {
		t.Fatalf("pause without the capability: %v, want ErrUnsupported", err)
	}
	info, err := sb.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != burrow.StatusRunning || info.Generation != 1 {
		t.Fatalf("after the pause: %s generation %d", info.Status, info.Generation)
	}
}

func TestConformanceCasesAreWellFormed(t *testing.T) {
	doc := loadCases(t)
	if doc.Format != "burrow-conformance/1" {
		t.Fatalf("format %q", doc.Format)
	}
	seen := map[string]bool{}
	known := map[string]bool{}
	for _, op := range strings.Fields(`create connect_or_create define get get_by_id list handle info status config
		start connect_or_start connect restart stop kill request_drain pause resume touch modify wait_for_status
		wait_until_stopped destroy detach ping exec spawn fs_write fs_read fs_exists fs_mkdir fs_list
		fs_write_stream fs_read_stream follow_logs wait await sleep repeat race remove snapshot get_snapshot
		list_snapshots remove_snapshot fork create_pool get_pool list_pools scale_pool remove_pool`) {
		known[op] = true
	}
	// The create options runner.options maps ("replace" is the op's).
	options := map[string]bool{}
	for _, k := range strings.Fields(`image cpus memory_mb pids_limit disk_mb best_effort_limits default_limits
		seccomp_allow env workdir labels network ports secrets idle_timeout idle_action max_duration
		startup_timeout demand_start detached replace`) {
		options[k] = true
	}
	var walk func(s step, where string)
	walk = func(s step, where string) {
		if !known[s["op"].(string)] {
			t.Errorf("%s: an op this runner does not know: %v", where, s["op"])
		}
		if opts, ok := s["options"].(map[string]any); ok {
			for k := range opts {
				if !options[k] {
					t.Errorf("%s: an option this runner does not know: %s", where, k)
				}
			}
		}
		if d, ok := s["do"].(step); ok {
			walk(d, where+" do")
		}
	}
	for _, c := range doc.Cases {
		if seen[c.ID] {
			t.Errorf("duplicate id %s", c.ID)
		}
		seen[c.ID] = true
		for i, s := range c.Steps {
			walk(s, fmt.Sprintf("%s step %d", c.ID, i+1))
		}
	}
}

func TestConformanceRunnerFailsWrongExpectations(t *testing.T) {
	doc := loadCases(t)
	find := func(id string) confCase {
		for _, c := range doc.Cases {
			if c.ID == id {
				var cp confCase
				b, _ := json.Marshal(c)
				_ = json.Unmarshal(b, &cp)
				return cp
			}
		}
		t.Fatalf("no case %s", id)
		return confCase{}
	}
	race := find("convergence.many_callers_one_sandbox")
	race.Steps[0]["expect"].(map[string]any)["starts"] = 2.0
	strict := find("create.strict_on_existing_name_is_already_exists")
	for _, s := range strict.Steps {
		if e, ok := s["expect"].(map[string]any); ok && e["error"] == "already_exists" {
			e["error"] = "not_found"
			break
		}
	}
	life := find("lifecycle.exec_fs_stop")
	for _, s := range life.Steps {
		if e, ok := s["expect"].(map[string]any); ok {
			if out, ok := e["stdout"].(string); ok {
				e["stdout"] = out + "?"
				break
			}
		}
	}
	for _, c := range []confCase{race, strict, life} {
		err := runOnFreshHome(t, c)
		var cf *conformanceFailure
		if !errors.As(err, &cf) {
			t.Errorf("%s with a wrong expectation: %v", c.ID, err)
		}
	}
}

func TestConformance(t *testing.T) {
	for _, c := range loadCases(t).Cases {
		t.Run(c.ID, func(t *testing.T) {
			if err := runOnFreshHome(t, c); err != nil {
				t.Fatal(err)
			}
		})
	}
}
