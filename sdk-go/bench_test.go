package burrow_test

import (
	"context"
	"sort"
	"testing"
	"time"

	burrow "github.com/burrow-dev/burrow/sdk-go"
)

// BenchmarkPing is the per-call overhead of the Go binding: Ping of one
// running sandbox (scripts/bench-ping.sh runs it beside the same call from
// Rust and from Node). It reports the median as median-us/op, the figure
// the other sides print.
func BenchmarkPing(b *testing.B) {
	ctx := context.Background()
	sb, err := burrow.ReplaceSandbox(ctx, "bench-ping-go", burrow.WithImage(testImage))
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(ctx)
	for i := 0; i < 50; i++ {
		if _, err := sb.Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
	times := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		if _, err := sb.Ping(ctx); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(t))
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "median-us/op")
}
