package burrow

import (
	"context"
	"encoding/json"
	"time"
)

// PoolInfo is a warm pool as it stands (CreatePool): sandboxes of one
// configuration kept started and unclaimed. A create of that configuration
// (but for its labels, environment, timeouts, idle action and demand
// start) claims one of them instead of starting; a define never does.
type PoolInfo struct {
	Name string
	// Config is what its sandboxes run.
	Config SandboxConfig
	// Size is how many warm sandboxes it keeps.
	Size int
	// Warm is how many are running and unclaimed now; Starting, how many
	// are still starting.
	Warm, Starting int
	// Claims counts the creates that claimed one of its sandboxes; Misses,
	// the creates of its configuration that found none warm and started
	// cold.
	Claims, Misses uint64
	// LastRefill is how long its last refill took to start its sandboxes
	// (nil before the first).
	LastRefill *time.Duration
	CreatedAt  time.Time
}

type wirePool struct {
	Name         string     `json:"name"`
	Config       wireConfig `json:"config"`
	Size         int        `json:"size"`
	Warm         int        `json:"warm"`
	Starting     int        `json:"starting"`
	Claims       uint64     `json:"claims"`
	Misses       uint64     `json:"misses"`
	LastRefillMs *int64     `json:"last_refill_ms"`
	CreatedAtMs  int64      `json:"created_at_ms"`
}

func (w *wirePool) info() PoolInfo {
	p := PoolInfo{
		Name: w.Name, Config: w.Config.config(), Size: w.Size, Warm: w.Warm,
		Starting: w.Starting, Claims: w.Claims, Misses: w.Misses,
		CreatedAt: msTime(w.CreatedAtMs),
	}
	if w.LastRefillMs != nil {
		d := time.Duration(*w.LastRefillMs) * time.Millisecond
		p.LastRefill = &d
	}
	return p
}

func modulePool(ctx context.Context, o op) (PoolInfo, error) {
	raw, _, err := call(ctx, nil, o, nil)
	if err != nil {
		return PoolInfo{}, err
	}
	var w wirePool
	if err := json.Unmarshal(raw, &w); err != nil {
		return PoolInfo{}, malformed(err)
	}
	return w.info(), nil
}

// CreatePool defines the warm pool name: size sandboxes (0 to 64) of the
// configuration opts make (those of CreateSandbox; WithDetached does not
// apply, warm sandboxes belong to no process), and returns once they run.
// A CreateSandbox or ConnectOrCreateSandbox of that configuration (but for
// its labels, environment, idle timeout and action, max duration, demand
// start and startup timeout) then claims one of them, running, under its
// own name, labels and environment; the pool refills in the background.
// DefineSandbox never claims. A taken name is ErrAlreadyExists, a bad one
// ErrInvalidName, a size over 64 ErrInvalidArgument, labels, ports or
// secrets (each sandbox's own) ErrInvalidConfig; a refused definition
// changes nothing.
func CreatePool(ctx context.Context, name string, size int, opts ...Option) (PoolInfo, error) {
	o := op{}
	for _, f := range opts {
		f(o)
	}
	delete(o, "detached")
	o["op"], o["name"], o["size"] = "create_pool", name, size
	return modulePool(ctx, o)
}

// GetPool reads one pool, its sandboxes counted (ErrNotFound if there is
// none).
func GetPool(ctx context.Context, name string) (PoolInfo, error) {
	return modulePool(ctx, op{"op": "get_pool", "name": name})
}

// ListPools lists every pool, by name. Their warm sandboxes are never
// listed by ListSandboxes.
func ListPools(ctx context.Context) ([]PoolInfo, error) {
	raw, _, err := call(ctx, nil, op{"op": "list_pools"}, nil)
	if err != nil {
		return nil, err
	}
	var ws []wirePool
	if err := json.Unmarshal(raw, &ws); err != nil {
		return nil, malformed(err)
	}
	out := make([]PoolInfo, 0, len(ws))
	for i := range ws {
		out = append(out, ws[i].info())
	}
	return out, nil
}

// ScalePool sets how many warm sandboxes the pool keeps (0 to 64) and
// returns once it has started or removed sandboxes to match.
func ScalePool(ctx context.Context, name string, size int) (PoolInfo, error) {
	return modulePool(ctx, op{"op": "scale_pool", "name": name, "size": size})
}

// RemovePool removes the pool and its warm sandboxes; sandboxes claimed
// from it are ordinary sandboxes, and stay.
func RemovePool(ctx context.Context, name string) error {
	_, _, err := call(ctx, nil, op{"op": "remove_pool", "name": name}, nil)
	return err
}
