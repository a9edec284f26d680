package burrow_test

// The conformance runner's races: callers in goroutines, or in processes
// (this test binary again, BURROW_GO_CHILD=race).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"sync"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// followTimeout is how long a follow_logs step waits for its stream to end
// (seconds, scaled) unless the step says.
const followTimeout = 60.0

// spawned is a process with its output collected.
type spawned struct {
	proc           *burrow.Process
	stdout, stderr lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf...)
}

// -- race -----------------------------------------------------------------

func (r *runner) generation(ctx context.Context, do step) float64 {
	var i burrow.SandboxInfo
	var err error
	if name, ok := r.value(do["name"]).(string); ok {
		var h *burrow.SandboxHandle
		if h, err = burrow.GetSandbox(ctx, name); err == nil {
			i, err = h.Info(ctx)
		}
	} else {
		i, err = r.target(do).(lifecycle).Info(ctx)
	}
	if err != nil {
		return 0
	}
	return float64(i.Generation)
}

func (r *runner) raceCall(ctx context.Context, do step, keys []string) raceReport {
	o := r.invoke(ctx, do)
	if o.err != nil {
		rep := raceReport{Code: codeOf(o.err), Error: describeErr(o.err)}
		if checkError(o.err, "") != nil {
			rep.Code = "wrong_class"
		}
		return rep
	}
	fields := map[string]any{}
	cache := map[any]burrow.SandboxInfo{}
	for _, k := range keys {
		v := r.field(ctx, o.res, k, cache)
		if v == missing {
			v = nil
		}
		fields[k] = v
	}
	return raceReport{Ok: true, Fields: fields}
}

type raceTask struct {
	Do    step     `json:"do"`
	Keys  []string `json:"keys"`
	Image string   `json:"image"`
	Home  string   `json:"home"`
}

// raceCaller is one caller of a race across processes: it reads its task
// on stdin, says "ready", waits for "go", runs the step once and prints
// its report.
func raceCaller() int {
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return 2
	}
	var task raceTask
	if err := json.Unmarshal([]byte(line), &task); err != nil {
		return 2
	}
	if task.Home != "" {
		burrow.Configure(task.Home)
	}
	r := newRunner(task.Image, task.Home)
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return 2
	}
	rep := r.raceCall(context.Background(), task.Do, task.Keys)
	rep.Pid = os.Getpid()
	out, _ := json.Marshal(rep)
	fmt.Println(string(out))
	return 0
}

func raceInProcesses(ctx context.Context, n int, task raceTask) ([]raceReport, error) {
	text, _ := json.Marshal(task)
	type child struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}
	children := make([]child, n)
	defer func() {
		for _, c := range children {
			if c.cmd != nil && c.cmd.Process != nil {
				_ = c.cmd.Process.Kill()
				_ = c.cmd.Wait()
			}
		}
	}()
	for i := range children {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "BURROW_GO_CHILD=race")
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		children[i] = child{cmd, in, bufio.NewReader(out)}
		if _, err := in.Write(append(text, '\n')); err != nil {
			return nil, err
		}
	}
	for _, c := range children {
		if l, err := c.out.ReadString('\n'); err != nil || l != "ready\n" {
			return nil, fmt.Errorf("a race caller was not ready: %q %v", l, err)
		}
	}
	for _, c := range children {
		_, _ = c.in.Write([]byte("go\n")) // the barrier
	}
	reports := make([]raceReport, n)
	for i, c := range children {
		l, err := c.out.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("a race caller did not report: %v", err)
		}
		if err := json.Unmarshal([]byte(l), &reports[i]); err != nil {
			return nil, err
		}
		_ = c.cmd.Wait()
	}
	return reports, nil
}

func (r *runner) race(ctx context.Context, s step, where string) error {
	do := s["do"].(step)
	n := int(num(s["callers"]))
	expect, _ := s["expect"].(map[string]any)
	keySet := map[string]bool{"id": true, "generation": true}
	if each, ok := expect["each"].(map[string]any); ok {
		for k := range each {
			keySet[k] = true
		}
	}
	save, _ := s["save"].(map[string]any)
	for _, f := range save {
		keySet[f.(string)] = true
	}
	var keys []string
	for k := range keySet {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	before := r.generation(ctx, do)
	rctx, cancel := context.WithTimeout(ctx, secs(120*r.scale))
	defer cancel()
	var reports []raceReport
	if s["processes"] == true {
		resolved := r.value(do).(map[string]any)
		if op := resolved["op"]; op == "create" || op == "connect_or_create" {
			opts, _ := resolved["options"].(map[string]any)
			if opts == nil {
				opts = map[string]any{}
			}
			if _, ok := opts["image"]; !ok {
				opts["image"] = r.image
			}
			resolved["options"] = opts
		}
		var err error
		if reports, err = raceInProcesses(rctx, n, raceTask{resolved, keys, r.image, r.home}); err != nil {
			return failf("%s: %v", where, err)
		}
		pids := map[int]bool{}
		for _, rep := range reports {
			pids[rep.Pid] = true
		}
		if len(pids) != n || pids[os.Getpid()] || pids[0] {
			return failf("%s: the callers did not run in %d other processes: %v", where, n, pids)
		}
	} else {
		reports = make([]raceReport, n)
		var wg sync.WaitGroup
		for i := range reports {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				reports[i] = r.raceCall(rctx, do, keys)
			}(i)
		}
		wg.Wait()
	}
	after := r.generation(ctx, do)
	shownB, _ := json.Marshal(reports)
	shown := string(shownB)
	if len(shown) > 3000 {
		shown = shown[:3000]
	}
	counts := map[string]any{}
	for _, rep := range reports {
		k := "ok"
		if !rep.Ok {
			k = rep.Code
			if k == "" {
				k = "unexpected_error"
			}
			if k == "wrong_class" {
				return failf("%s: an error of the wrong type: %s", where, rep.Error)
			}
		}
		counts[k] = num(counts[k]) + 1
		if math.IsNaN(counts[k].(float64)) {
			counts[k] = 1.0
		}
	}
	want := map[string]any{"ok": float64(n)}
	if w, ok := expect["outcomes"].(map[string]any); ok {
		want = map[string]any{}
		for k, v := range w {
			if num(v) != 0 {
				want[k] = num(v)
			}
		}
	}
	if !reflect.DeepEqual(want, counts) {
		return failf("%s: outcomes %v, expected %v: %s", where, counts, want, shown)
	}
	var oks []map[string]any
	for _, rep := range reports {
		if rep.Ok {
			oks = append(oks, rep.Fields)
		}
	}
	if expect["same_id"] == true {
		ids := map[any]bool{}
		for _, f := range oks {
			ids[f["id"]] = true
		}
		if len(ids) != 1 {
			return failf("%s: callers got different ids %v: %s", where, ids, shown)
		}
		if name, ok := r.value(do["name"]).(string); ok {
			h, err := burrow.GetSandbox(ctx, name)
			if err != nil || !ids[h.ID()] {
				return failf("%s: callers got %v, the name is held by another (%v)", where, ids, err)
			}
		}
	}
	if st, ok := expect["starts"]; ok && after-before != num(st) {
		return failf("%s: %v starts (generation %v -> %v), expected %v: %s", where, after-before, before, after, st, shown)
	}
	if each, ok := expect["each"].(map[string]any); ok {
		for i, f := range oks {
			for k, v := range each {
				av, found := f[k]
				if !found {
					av = missing
				}
				if err := r.match(v, av, fmt.Sprintf("%s: caller %d field %s", where, i, k)); err != nil {
					return err
				}
			}
		}
	}
	for name, f := range save {
		if len(oks) == 0 {
			return failf("%s: nothing to save %s from: no caller succeeded", where, name)
		}
		r.values[name] = oks[0][f.(string)]
	}
	return nil
}
