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
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
}

type raceReport struct {
	Ok     bool           `json:"ok"`
	Code   string         `json:"code"`
	Error  string         `json:"error"`
	Fields map[string]any `json:"fields"`
	Pid    int            `json:"pid"`
}

type runner struct {
	image   string
	home    string
	scale   float64
	values  map[string]any
	objects map[string]any
	jobs    map[string]chan outcome
	trace   []string
}

func newRunner(image, home string) *runner {
	scale := 1.0
	if s, err := strconv.ParseFloat(os.Getenv("BURROW_CONFORMANCE_TIME_SCALE"), 64); err == nil && s > 0 {
		scale = s
	}
	return &runner{image: image, home: home, scale: scale, values: map[string]any{},
		objects: map[string]any{}, jobs: map[string]chan outcome{}}
}

func secs(v any) time.Duration { return time.Duration(num(v) * float64(time.Second)) }

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case uint64:
		return float64(x)
	}
	return math.NaN()
}

func (r *runner) runCase(ctx context.Context, c confCase) error {
	limit := c.Timeout
	if limit == 0 {
		limit = 180
	}
	ctx, cancel := context.WithTimeout(ctx, secs(limit*r.scale))
	defer cancel()
	defer r.cleanup()
	for i, s := range c.Steps {
		where := fmt.Sprintf("%s step %d (%s)", c.ID, i+1, s["op"])
		text, _ := json.Marshal(s)
		r.trace = append(r.trace, where+": "+string(text))
		if err := r.runStep(ctx, s, where); err != nil {
			if ctx.Err() != nil {
				return failf("case %s did not finish within %.0f s: %v\n%s", c.ID, limit*r.scale, err, r.traceText())
			}
			return failf("%v\n--- steps so far ---\n%s", err, r.traceText())
		}
	}
	return nil
}

func (r *runner) traceText() string {
	t := r.trace
	if len(t) > 40 {
		t = t[len(t)-40:]
	}
	return strings.Join(t, "\n")
}

func (r *runner) cleanup() {
	for _, j := range r.jobs {
		<-j
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	page, err := burrow.ListSandboxes(ctx)
	if err != nil {
		return
	}
	for _, h := range page.Sandboxes {
		_ = h.Destroy(ctx)
	}
}

func (r *runner) runStep(ctx context.Context, s step, where string) error {
	op := s["op"].(string)
	if job, ok := s["background"].(string); ok {
		if _, exists := r.jobs[job]; exists {
			return failf("%s: job %s already running", where, job)
		}
		ch := make(chan outcome, 1)
		r.jobs[job] = ch
		go func() { ch <- r.invoke(ctx, s) }()
		return nil
	}
	switch op {
	case "sleep":
		time.Sleep(secs(s["seconds"]))
		return nil
	case "repeat":
		end := time.Now().Add(secs(s["seconds"]))
		interval := 0.5
		if v, ok := s["interval"]; ok {
			interval = num(v)
		}
		for n := 1; time.Now().Before(end); n++ {
			if err := r.runStep(ctx, s["do"].(step), fmt.Sprintf("%s run %d", where, n)); err != nil {
				return err
			}
			time.Sleep(secs(interval))
		}
		return nil
	case "race":
		return r.race(ctx, s, where)
	case "await":
		job := s["job"].(string)
		ch, ok := r.jobs[job]
		if !ok {
			return failf("%s: no background job %s", where, job)
		}
		delete(r.jobs, job)
		return r.conclude(ctx, s, <-ch, where)
	}
	var deadline time.Time
	if w, ok := s["within"]; ok {
		deadline = time.Now().Add(secs(num(w) * r.scale))
	}
	for {
		o := r.invoke(ctx, s)
		err := r.conclude(ctx, s, o, where)
		var cf *conformanceFailure
		if err == nil || !errors.As(err, &cf) || deadline.IsZero() || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func codeOf(err error) string {
	var e *burrow.Error
	if errors.As(err, &e) {
		return string(e.Code)
	}
	return ""
}

func describeErr(err error) string { return fmt.Sprintf("%T(code=%q): %v", err, codeOf(err), err) }

// checkError: every error of the core is an *burrow.Error that errors.Is
// matches with the sentinel of its code.
func checkError(err error, where string) error {
	code := codeOf(err)
	if code == "" {
		return failf("%s: an error that is not a *burrow.Error: %v", where, err)
	}
	known := false
	for _, c := range burrow.ErrorCodes() {
		if string(c) == code {
			known = true
			if !errors.Is(err, c) {
				return failf("%s: errors.Is(err, %s) does not hold", where, code)
			}
		} else if errors.Is(err, c) {
			return failf("%s: an error of code %s is also %s", where, code, c)
		}
	}
	if !known {
		return failf("%s: error with unknown code: %s", where, describeErr(err))
	}
	return nil
}

func (r *runner) conclude(ctx context.Context, s step, o outcome, where string) error {
	if o.err != nil {
		var cf *conformanceFailure
		if errors.As(o.err, &cf) {
			return o.err
		}
		if tol, ok := s["tolerate"].([]any); ok {
			for _, c := range tol {
				if c == codeOf(o.err) {
					return checkError(o.err, where)
				}
			}
		}
	}
	expect, _ := s["expect"].(map[string]any)
	if err := r.check(ctx, expect, o, where); err != nil {
		return err
	}
	if o.err != nil {
		return nil
	}
	if as, ok := s["as"].(string); ok {
		r.objects[as] = o.res.obj
	}
	if save, ok := s["save"].(map[string]any); ok {
		cache := map[any]burrow.SandboxInfo{}
		for name, field := range save {
			v := r.field(ctx, o.res, field.(string), cache)
			if v == missing {
				return failf("%s: cannot save %s: no field %s", where, name, field)
			}
			r.values[name] = v
		}
	}
	return nil
}

func (r *runner) check(ctx context.Context, expect map[string]any, o outcome, where string) error {
	if want, ok := expect["error"]; ok {
		if o.err == nil {
			return failf("%s: expected error %v, but the step succeeded (%s)", where, want, summary(o.res))
		}
		if codeOf(o.err) != want {
			return failf("%s: expected error %v, got %s", where, want, describeErr(o.err))
		}
		if err := checkError(o.err, where); err != nil {
			return err
		}
		for k, v := range expect {
			if k != "error" {
				if err := r.match(v, errorField(o.err, k), where+": error field "+k); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if o.err != nil {
		return failf("%s: unexpected error %s", where, describeErr(o.err))
	}
	cache := map[any]burrow.SandboxInfo{}
	for k, v := range expect {
		if err := r.match(v, r.field(ctx, o.res, k, cache), where+": field "+k); err != nil {
			return err
		}
	}
	return nil
}

func errorField(err error, key string) any {
	var e *burrow.Error
	if !errors.As(err, &e) {
		return missing
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	switch key {
	case "code":
		return string(e.Code)
	case "sandbox_id":
		return str(e.SandboxID)
	case "name":
		return str(e.Name)
	case "status":
		return str(string(e.Status))
	case "guest_code":
		if e.Guest == nil {
			return nil
		}
		return e.Guest.Code
	}
	return missing
}

var valueOps = map[string]bool{"var": true, "str_repeat": true}
var matchOps = map[string]bool{"ne": true, "one_of": true, "present": true}
var modifiers = map[string]bool{"add": true, "times": true}

func isOperator(v any) (map[string]any, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return nil, false
	}
	main := 0
	for k := range m {
		switch {
		case valueOps[k] || matchOps[k]:
			main++
		case modifiers[k]:
		default:
			return nil, false
		}
	}
	return m, main == 1
}

// value resolves {"var"} and {"str_repeat"} forms recursively.
func (r *runner) value(spec any) any {
	if m, ok := isOperator(spec); ok {
		if name, ok := m["var"].(string); ok {
			v, found := r.values[name]
			if !found {
				panic(failf("no saved value %s", name))
			}
			if add, ok := m["add"]; ok {
				return num(v) + num(add)
			}
			return v
		}
		if s, ok := m["str_repeat"].(string); ok {
			return strings.Repeat(s, int(num(m["times"])))
		}
	}
	switch x := spec.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, v := range x {
			out[k] = r.value(v)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, v := range x {
			out[i] = r.value(v)
		}
		return out
	}
	return spec
}

// norm is the language-neutral JSON form of a value.
func norm(v any) any {
	if v == missing {
		return missing
	}
	switch x := v.(type) {
	case []byte:
		return string(x)
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case uint32:
		return float64(x)
	case burrow.Status:
		return string(x)
	case burrow.ExitReason:
		return string(x)
	case map[string]string:
		out := map[string]any{}
		for k, s := range x {
			out[k] = s
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	}
	return v
}

func equal(want, got any) bool {
	if got == missing {
		return false
	}
	want, got = norm(want), norm(got)
	if wb, ok := want.(bool); ok {
		gb, ok := got.(bool)
		return ok && wb == gb
	}
	if wf, ok := want.(float64); ok {
		gf, ok := got.(float64)
		return ok && math.Abs(wf-gf) < 1e-9
	}
	return reflect.DeepEqual(want, got)
}

func show(v any) string {
	if v == missing {
		return "<absent>"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (r *runner) match(expected, actual any, what string) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if cf, ok := p.(*conformanceFailure); ok {
				err = cf
				return
			}
			panic(p)
		}
	}()
	actual = norm(actual)
	fail := func(reason string) error { return failf("%s: %s; actual %s", what, reason, show(actual)) }
	if m, ok := isOperator(expected); ok {
		switch {
		case m["ne"] != nil || hasKey(m, "ne"):
			other := r.value(m["ne"])
			if actual == missing || equal(other, actual) {
				return fail("expected anything but " + show(other))
			}
			return nil
		case hasKey(m, "one_of"):
			for _, o := range m["one_of"].([]any) {
				if equal(r.value(o), actual) {
					return nil
				}
			}
			return fail("expected one of " + show(r.value(m["one_of"])))
		case hasKey(m, "present"):
			present := actual != missing && actual != nil
			if present != m["present"].(bool) {
				if present {
					return fail("expected no value")
				}
				return fail("expected a value")
			}
			return nil
		}
		want := r.value(m)
		if !equal(want, actual) {
			return fail("expected " + show(want))
		}
		return nil
	}
	switch e := expected.(type) {
	case nil:
		if actual != nil && actual != missing {
			return fail("expected null or absent")
		}
		return nil
	case map[string]any:
		a, ok := actual.(map[string]any)
		if !ok {
			return fail("expected an object")
		}
		for k, v := range e {
			av, found := a[k]
			if !found {
				av = missing
			}
			if err := r.match(v, av, what+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		a, ok := actual.([]any)
		if !ok || len(a) != len(e) {
			return fail("expected " + show(e))
		}
		for i := range e {
			if err := r.match(e[i], a[i], fmt.Sprintf("%s[%d]", what, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if !equal(expected, actual) {
		return fail("expected " + show(expected))
	}
	return nil
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

// neutralConfig is a configuration in the cases' vocabulary (snake_case,
// seconds, null for unset).
func neutralConfig(c burrow.SandboxConfig) map[string]any {
	opt := func(v float64) any {
		if v == 0 {
			return nil
		}
		return v
	}
	str := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	m := map[string]any{
		"image": c.Image, "driver": str(string(c.Driver)), "runtime": string(c.Runtime),
		"cpus": opt(c.CPUs), "memory_mb": opt(float64(c.MemoryMB)), "pids_limit": opt(float64(c.PidsLimit)),
		"env": norm(c.Env), "workdir": str(c.Workdir), "labels": norm(c.Labels), "network": c.Network,
		"idle_timeout": opt(c.IdleTimeout.Seconds()), "idle_action": string(c.IdleAction),
		"max_duration": opt(c.MaxDuration.Seconds()), "startup_timeout": c.StartupTimeout.Seconds(),
		"demand_start": nil,
	}
	if c.DemandStart != nil {
		m["demand_start"] = *c.DemandStart
	}
	return m
}

func infoField(i burrow.SandboxInfo, key string) any {
	switch key {
	case "id":
		return i.ID
	case "name":
		return i.Name
	case "status":
		return string(i.Status)
	case "generation":
		return float64(i.Generation)
	case "detached":
		return i.Detached
	case "config":
		return neutralConfig(i.Config)
	case "exit_reason", "detail":
		if i.LastRun == nil {
			return nil
		}
		s := string(i.LastRun.ExitReason)
		if key == "detail" {
			s = i.LastRun.Detail
		}
		if s == "" {
			return nil
		}
		return s
	}
	return missing
}

type lifecycle interface {
	ID() string
	Name() string
	Info(context.Context) (burrow.SandboxInfo, error)
}

func (r *runner) field(ctx context.Context, res *result, path string, cache map[any]burrow.SandboxInfo) any {
	parts := strings.Split(path, ".")
	v := norm(r.topField(ctx, res, parts[0], cache))
	for _, p := range parts[1:] {
		m, ok := v.(map[string]any)
		if !ok {
			return missing
		}
		if v, ok = m[p]; !ok {
			return missing
		}
	}
	return v
}

func (r *runner) topField(ctx context.Context, res *result, key string, cache map[any]burrow.SandboxInfo) any {
	info := func(l lifecycle) any {
		i, ok := cache[l]
		if !ok {
			var err error
			if i, err = l.Info(ctx); err != nil {
				return missing
			}
			cache[l] = i
		}
		return infoField(i, key)
	}
	switch res.kind {
	case "sandbox":
		sb := res.obj.(*burrow.Sandbox)
		switch key {
		case "id":
			return sb.ID()
		case "name":
			return sb.Name()
		case "generation":
			return float64(sb.Generation())
		}
		return info(sb)
	case "handle":
		h := res.obj.(*burrow.SandboxHandle)
		switch key {
		case "id":
			return h.ID()
		case "name":
			return h.Name()
		}
		return info(h)
	case "info":
		return infoField(res.obj.(burrow.SandboxInfo), key)
	case "plan":
		p := res.obj.(burrow.ModifyPlan)
		if key != "changes" {
			return infoField(p.Info, key)
		}
		changes := []any{}
		for _, c := range p.Changes {
			var note any
			if c.Note != "" {
				note = c.Note
			}
			changes = append(changes, map[string]any{"field": c.Field, "applies": string(c.Applies), "note": note})
		}
		return changes
	case "exec":
		e := res.obj.(collected)
		switch key {
		case "stdout":
			return string(e.stdout)
		case "stderr":
			return string(e.stderr)
		case "exit_code":
			if e.status.ExitCode < 0 {
				return nil
			}
			return float64(e.status.ExitCode)
		case "signal":
			if e.status.Signal == 0 {
				return nil
			}
			return float64(e.status.Signal)
		case "timed_out":
			return e.status.TimedOut
		case "ok":
			return e.status.Success()
		}
	case "value":
		if key == "value" {
			return res.obj
		}
	case "list":
		names := []any{}
		switch l := res.obj.(type) {
		case []*burrow.SandboxHandle:
			for _, h := range l {
				names = append(names, h.Name())
			}
		case []burrow.DirEntry:
			for _, e := range l {
				names = append(names, e.Name)
			}
		}
		switch key {
		case "count":
			return float64(len(names))
		case "names":
			sort.Slice(names, func(a, b int) bool { return names[a].(string) < names[b].(string) })
			return names
		}
	}
	return missing
}

func summary(res *result) string {
	if res == nil {
		return "no result"
	}
	switch o := res.obj.(type) {
	case lifecycle:
		return res.kind + " " + o.ID()
	case collected:
		return fmt.Sprintf("exit %d, stdout %q", o.status.ExitCode, o.stdout)
	}
	s := fmt.Sprintf("%s %v", res.kind, res.obj)
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

func (r *runner) invoke(ctx context.Context, s step) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			if cf, ok := p.(*conformanceFailure); ok {
				o = outcome{err: cf}
				return
			}
			panic(p)
		}
	}()
	res, err := r.dispatch(ctx, s)
	return outcome{res: res, err: err}
}

func (r *runner) options(s step) []burrow.Option {
	o := map[string]any{"image": r.image}
	if opts, ok := r.value(s["options"]).(map[string]any); ok {
		for k, v := range opts {
			o[k] = v
		}
	}
	strs := func(v any) map[string]string {
		m := map[string]string{}
		for k, x := range v.(map[string]any) {
			m[k] = x.(string)
		}
		return m
	}
	out := []burrow.Option{burrow.WithImage(o["image"].(string))}
	for k, v := range o {
		switch k {
		case "cpus":
			out = append(out, burrow.WithCPUs(num(v)))
		case "memory_mb":
			out = append(out, burrow.WithMemory(uint64(num(v))))
		case "pids_limit":
			out = append(out, burrow.WithPidsLimit(uint64(num(v))))
		case "best_effort_limits":
			if v.(bool) {
				out = append(out, burrow.WithBestEffortLimits())
			}
		case "env":
			out = append(out, burrow.WithEnv(strs(v)))
		case "workdir":
			out = append(out, burrow.WithWorkdir(v.(string)))
		case "labels":
			out = append(out, burrow.WithLabels(strs(v)))
		case "network":
			if v.(bool) {
				out = append(out, burrow.WithNetwork())
			}
		case "idle_timeout":
			out = append(out, burrow.WithIdleTimeout(secs(v)))
		case "idle_action":
			out = append(out, burrow.WithIdleAction(burrow.IdleAction(v.(string))))
		case "max_duration":
			out = append(out, burrow.WithMaxDuration(secs(v)))
		case "startup_timeout":
			out = append(out, burrow.WithStartupTimeout(secs(v)))
		case "demand_start":
			out = append(out, burrow.WithDemandStart(v.(bool)))
		case "detached":
			if v.(bool) {
				out = append(out, burrow.WithDetached())
			}
		}
	}
	return out
}

// changes are the Modify changes of a `modify` step (durations in seconds;
// null clears, as the zero value of the SDK's Set* changes does).
func (r *runner) changes(s step) []burrow.Change {
	c, _ := r.value(s["changes"]).(map[string]any)
	orZero := func(v any) float64 {
		if v == nil {
			return 0
		}
		return num(v)
	}
	strs := func(v any) []string {
		var l []string
		for _, x := range v.([]any) {
			l = append(l, x.(string))
		}
		return l
	}
	var out []burrow.Change
	for k, v := range c {
		switch k {
		case "cpus":
			out = append(out, burrow.SetCPUs(orZero(v)))
		case "memory_mb":
			out = append(out, burrow.SetMemory(uint64(orZero(v))))
		case "env_set":
			for name, x := range v.(map[string]any) {
				out = append(out, burrow.SetEnv(name, x.(string)))
			}
		case "env_unset":
			out = append(out, burrow.UnsetEnv(strs(v)...))
		case "labels_set":
			for name, x := range v.(map[string]any) {
				out = append(out, burrow.SetLabel(name, x.(string)))
			}
		case "labels_unset":
			out = append(out, burrow.UnsetLabels(strs(v)...))
		case "idle_timeout":
			out = append(out, burrow.SetIdleTimeout(time.Duration(orZero(v)*float64(time.Second))))
		case "idle_action":
			out = append(out, burrow.SetIdleAction(burrow.IdleAction(v.(string))))
		case "max_duration":
			out = append(out, burrow.SetMaxDuration(time.Duration(orZero(v)*float64(time.Second))))
		default:
			panic(failf("unknown change %s", k))
		}
	}
	return out
}

func (r *runner) target(s step) any {
	name, _ := s["sandbox"].(string)
	obj, ok := r.objects[name]
	if !ok {
		panic(failf("no variable %s", name))
	}
	return obj
}

func asHandle(ctx context.Context, obj any) (*burrow.SandboxHandle, error) {
	if sb, ok := obj.(*burrow.Sandbox); ok {
		return sb.Handle(ctx)
	}
	return obj.(*burrow.SandboxHandle), nil
}

func (r *runner) dispatch(ctx context.Context, s step) (*result, error) {
	op := s["op"].(string)
	name, _ := r.value(s["name"]).(string)
	sandbox := func(sb *burrow.Sandbox, err error) (*result, error) { return &result{"sandbox", sb}, err }
	handle := func(h *burrow.SandboxHandle, err error) (*result, error) { return &result{"handle", h}, err }
	info := func(i burrow.SandboxInfo, err error) (*result, error) { return &result{"info", i}, err }
	none := func(err error) (*result, error) { return &result{kind: "none"}, err }
	switch op {
	case "create":
		if opts, _ := s["options"].(map[string]any); opts != nil && opts["replace"] == true {
			return sandbox(burrow.ReplaceSandbox(ctx, name, r.options(s)...))
		}
		return sandbox(burrow.CreateSandbox(ctx, name, r.options(s)...))
	case "connect_or_create":
		return sandbox(burrow.ConnectOrCreateSandbox(ctx, name, r.options(s)...))
	case "define":
		return handle(burrow.DefineSandbox(ctx, name, r.options(s)...))
	case "get":
		return handle(burrow.GetSandbox(ctx, name))
	case "get_by_id":
		return handle(burrow.GetSandboxByID(ctx, r.value(s["id"]).(string)))
	case "list":
		var filters []burrow.ListOption
		if st, ok := s["status"].([]any); ok {
			var ss []burrow.Status
			for _, x := range st {
				ss = append(ss, burrow.Status(x.(string)))
			}
			filters = append(filters, burrow.WithStatus(ss...))
		}
		if l, ok := r.value(s["labels"]).(map[string]any); ok {
			for k, v := range l {
				filters = append(filters, burrow.WithLabel(k, v.(string)))
			}
		}
		page, err := burrow.ListSandboxes(ctx, filters...)
		return &result{"list", page.Sandboxes}, err
	case "remove":
		if _, ok := s["name"]; ok {
			return none(burrow.RemoveSandbox(ctx, name))
		}
		h, err := asHandle(ctx, r.target(s))
		if err != nil {
			return nil, err
		}
		return none(h.Remove(ctx))
	case "wait":
		p := r.objects[s["process"].(string)].(*spawned)
		st, err := p.proc.Wait()
		return &result{"exec", collected{p.stdout.Bytes(), p.stderr.Bytes(), st}}, err
	case "connect_or_start":
		if _, ok := s["name"]; ok {
			h, err := burrow.GetSandbox(ctx, name)
			if err != nil {
				return nil, err
			}
			return sandbox(h.ConnectOrStart(ctx))
		}
	}

	t := r.target(s)
	l := t.(interface {
		lifecycle
		Status() burrow.Status
		Stop(context.Context, ...burrow.StopOption) error
		Kill(context.Context) error
		RequestDrain(context.Context) error
		Pause(context.Context) (burrow.SandboxInfo, error)
		Resume(context.Context) (burrow.SandboxInfo, error)
		WaitUntilStopped(context.Context) (burrow.SandboxInfo, error)
		WaitForStatus(context.Context, ...burrow.Status) (burrow.SandboxInfo, error)
		Touch(context.Context) error
		Modify(context.Context, ...burrow.Change) (burrow.ModifyPlan, error)
		Destroy(context.Context) error
		FollowLogs(context.Context, func(burrow.LogLine) bool, ...burrow.LogOption) error
	})
	// Stop, Kill, RequestDrain and Detach answer only an error: the record
	// a case checks is read after them.
	then := func(err error) (*result, error) {
		if err != nil {
			return nil, err
		}
		return info(l.Info(ctx))
	}
	withHandle := func(f func(*burrow.SandboxHandle) (*burrow.Sandbox, error)) (*result, error) {
		h, err := asHandle(ctx, t)
		if err != nil {
			return nil, err
		}
		return sandbox(f(h))
	}
	switch op {
	case "handle":
		return handle(asHandle(ctx, t))
	case "info":
		return info(l.Info(ctx))
	case "status":
		// A fresh read (Status() is the snapshot of the last record seen).
		i, err := l.Info(ctx)
		return &result{"value", string(i.Status)}, err
	case "config":
		i, err := l.Info(ctx)
		return &result{"value", neutralConfig(i.Config)}, err
	case "start":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.Start(ctx) })
	case "connect":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.Connect(ctx) })
	case "connect_or_start":
		return withHandle(func(h *burrow.SandboxHandle) (*burrow.Sandbox, error) { return h.ConnectOrStart(ctx) })
	case "restart":
		if sb, ok := t.(*burrow.Sandbox); ok {
			return info(sb.Restart(ctx))
		}
		return sandbox(t.(*burrow.SandboxHandle).Restart(ctx))
	case "stop":
		var opts []burrow.StopOption
		if g, ok := s["grace"]; ok {
			opts = append(opts, burrow.WithGrace(secs(g)))
		}
		return then(l.Stop(ctx, opts...))
	case "kill":
		return then(l.Kill(ctx))
	case "request_drain":
		return then(l.RequestDrain(ctx))
	case "pause":
		return info(l.Pause(ctx))
	case "resume":
		return info(l.Resume(ctx))
	case "wait_until_stopped":
		return info(l.WaitUntilStopped(ctx))
	case "touch":
		return none(l.Touch(ctx))
	case "modify":
		p, err := l.Modify(ctx, r.changes(s)...)
		return &result{"plan", p}, err
	case "wait_for_status":
		var ss []burrow.Status
		for _, x := range s["statuses"].([]any) {
			ss = append(ss, burrow.Status(x.(string)))
		}
		wctx := ctx
		if to, ok := s["timeout"]; ok {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, secs(num(to)*r.scale))
			defer cancel()
		}
		return info(l.WaitForStatus(wctx, ss...))
	case "destroy":
		return none(l.Destroy(ctx))
	case "follow_logs":
		// The stream ends by itself when the followed run ends; past the
		// step's bound the context ends it (a timeout error).
		limit := followTimeout
		if to, ok := s["timeout"]; ok {
			limit = num(to)
		}
		fctx, cancel := context.WithTimeout(ctx, secs(limit*r.scale))
		defer cancel()
		var opts []burrow.LogOption
		if src, ok := s["source"].(string); ok {
			opts = append(opts, burrow.WithSource(burrow.LogSource(src)))
		}
		texts := []any{}
		err := l.FollowLogs(fctx, func(line burrow.LogLine) bool {
			texts = append(texts, line.Text)
			return true
		}, opts...)
		return &result{"value", texts}, err
	}

	sb, ok := t.(*burrow.Sandbox)
	if !ok {
		return nil, failf("%s needs a live sandbox, %v is a handle", op, s["sandbox"])
	}
	path, _ := r.value(s["path"]).(string)
	fs := sb.FS()
	switch op {
	case "detach":
		if err := sb.Detach(ctx); err != nil {
			return nil, err
		}
		return info(sb.Info(ctx))
	case "ping":
		p, err := sb.Ping(ctx)
		return &result{"value", p.Latency.Seconds()}, err
	case "exec", "spawn":
		var argv []string
		switch a := r.value(s["argv"]).(type) {
		case string:
			argv = []string{"sh", "-c", a}
		case []any:
			argv = []string{}
			for _, x := range a {
				argv = append(argv, x.(string))
			}
		}
		var opts []burrow.ExecOption
		if env, ok := r.value(s["env"]).(map[string]any); ok {
			m := map[string]string{}
			for k, v := range env {
				m[k] = v.(string)
			}
			opts = append(opts, burrow.WithExecEnv(m))
		}
		if cwd, ok := r.value(s["cwd"]).(string); ok {
			opts = append(opts, burrow.WithDir(cwd))
		}
		if to, ok := s["timeout"]; ok {
			opts = append(opts, burrow.WithTimeout(secs(to)))
		}
		if op == "exec" {
			if in, ok := r.value(s["stdin"]).(string); ok {
				opts = append(opts, burrow.WithStdin(strings.NewReader(in)))
			}
			out, err := sb.Exec(ctx, argv, opts...)
			if err != nil {
				return nil, err
			}
			return &result{"exec", collected{out.Stdout, out.Stderr, out.ExitStatus}}, nil
		}
		p := &spawned{}
		opts = append(opts, burrow.WithStdout(&p.stdout), burrow.WithStderr(&p.stderr))
		// The process outlives this step: its context is the case's.
		proc, err := sb.Spawn(ctx, argv, opts...)
		p.proc = proc
		return &result{"process", p}, err
	case "fs_write":
		return none(fs.WriteFile(ctx, path, []byte(r.value(s["data"]).(string)), 0))
	case "fs_read":
		b, err := fs.ReadFile(ctx, path)
		return &result{"value", string(b)}, err
	case "fs_exists":
		b, err := fs.Exists(ctx, path)
		return &result{"value", b}, err
	case "fs_mkdir":
		if s["parents"] == true {
			return none(fs.MkdirAll(ctx, path))
		}
		return none(fs.Mkdir(ctx, path))
	case "fs_list":
		entries, err := fs.ReadDir(ctx, path)
		return &result{"list", entries}, err
	}
	return nil, failf("unknown op %s", op)
}

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

// -- the tests ----------------------------------------------------------------

var remoteMode = os.Getenv("BURROW_TEST_REMOTE") == "1"

// serve starts a `burrow serve` on a fresh home and points this process
// (and the race callers it starts) at it.
func serve(t *testing.T, home string) func() {
	bin := os.Getenv("BURROW_BIN")
	env := append(os.Environ(), "BURROW_HOME="+home, "BURROW_SERVE_LISTEN=127.0.0.1:0", "BURROW_SERVE_IDLE_TIMEOUT=0", "BURROW_URL=", "BURROW_TOKEN=")
	tokCmd := exec.Command(bin, "serve", "token", "create", "tests")
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
	return newRunner(testImage, home).runCase(context.Background(), c)
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
		follow_logs wait await sleep repeat race remove`) {
		known[op] = true
	}
	var walk func(s step, where string)
	walk = func(s step, where string) {
		if !known[s["op"].(string)] {
			t.Errorf("%s: an op this runner does not know: %v", where, s["op"])
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
