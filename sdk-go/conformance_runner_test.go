package burrow_test

// The conformance runner (conformance_test.go): a case's steps, their
// outcomes and the matching of expectations.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

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
	// The pools first (their warm sandboxes are never listed), where the
	// backend has them.
	if pools, err := burrow.ListPools(ctx); err == nil {
		for _, p := range pools {
			_ = burrow.RemovePool(ctx, p.Name)
		}
	}
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
		"disk_mb": opt(float64(c.DiskMB)), "default_limits": !c.NoDefaultLimits, "seccomp_allow": anyList(c.SeccompAllow),
		"env": norm(c.Env), "workdir": str(c.Workdir), "labels": norm(c.Labels), "network": networkOf(c), "ports": anyList(c.Ports),
		"idle_timeout": opt(c.IdleTimeout.Seconds()), "idle_action": string(c.IdleAction),
		"max_duration": opt(c.MaxDuration.Seconds()), "startup_timeout": c.StartupTimeout.Seconds(),
		"demand_start": nil,
	}
	if c.DemandStart != nil {
		m["demand_start"] = *c.DemandStart
	}
	secrets := make([]any, 0, len(c.Secrets))
	for _, s := range c.Secrets {
		secrets = append(secrets, map[string]any{"name": s.Name, "hosts": anyList(s.Hosts), "headers": anyList(s.Headers), "placeholder": str(s.Placeholder)})
	}
	m["secrets"] = secrets
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
		case "truncated":
			return e.truncated
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

// networkOf is a configuration's network as the core's JSON has it: false,
// true, or the policy (its empty lists left out).
func networkOf(c burrow.SandboxConfig) any {
	if c.NetworkPolicy == nil {
		return c.Network
	}
	p := map[string]any{}
	if len(c.NetworkPolicy.Allow) > 0 {
		p["allow"] = anyList(c.NetworkPolicy.Allow)
	}
	if len(c.NetworkPolicy.Deny) > 0 {
		p["deny"] = anyList(c.NetworkPolicy.Deny)
	}
	return p
}

// anyList is a list of strings as JSON decodes one.
func anyList(l []string) []any {
	out := make([]any, 0, len(l))
	for _, s := range l {
		out = append(out, s)
	}
	return out
}
