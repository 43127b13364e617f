package backoff

import (
	"context"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	tests := []struct {
		name string
		b    Backoff
		want []time.Duration
	}{
		{"zero value", Backoff{NoJitter: true}, []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}},
		{"capped", Backoff{Min: time.Second, Max: 3 * time.Second, NoJitter: true}, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}},
		{"max below min", Backoff{Min: time.Second, Max: time.Millisecond, NoJitter: true}, []time.Duration{time.Second, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				if got := tt.b.Next(); got != want {
					t.Fatalf("wait %d: got %v, want %v", i+1, got, want)
				}
			}
			if got := tt.b.Failures(); got != len(tt.want) {
				t.Errorf("failures: got %d, want %d", got, len(tt.want))
			}
			tt.b.Reset()
			if got := tt.b.Next(); got != tt.want[0] || tt.b.Failures() != 1 {
				t.Errorf("after Reset: got %v (%d failures), want %v (1)", got, tt.b.Failures(), tt.want[0])
			}
		})
	}
}

func TestJitter(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	for i := range 50 {
		d := b.Next()
		step := min(100*time.Millisecond<<min(i, 10), time.Second)
		if d < step/2 || d > min(step*3/2, time.Second) {
			t.Fatalf("wait %d: %v, want within 0.5–1.5 × %v, at most 1s", i+1, d, step)
		}
	}
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Sleep with an ended context took %v", d)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
