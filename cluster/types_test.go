package cluster_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/cluster"
	"github.com/cmfs-project/cmfs/container"
)

func TestParseReplication(t *testing.T) {
	tests := []struct {
		in   string
		want cluster.Replication
		ok   bool
	}{
		{"replica:3", cluster.Replication{Type: cluster.Ratis, N: 3}, true},
		{"replica:1", cluster.Replication{Type: cluster.Ratis, N: 1}, true},
		{"ec:rs-6-3-1024k", cluster.Replication{Type: cluster.EC, N: 6, Parity: 3, CellKiB: 1024}, true},
		{"replica:0", cluster.Replication{}, false},
		{"replica:x", cluster.Replication{}, false},
		{"replica:70000", cluster.Replication{}, false},
		{"ec:rs-6-3-1024", cluster.Replication{}, false},
		{"ec:rs-6-3", cluster.Replication{}, false},
		{"ec:rs-0-3-1024k", cluster.Replication{}, false},
		{"", cluster.Replication{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := cluster.ParseReplication(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("ParseReplication(%q) = %+v, %v; want %+v, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
			// The container package must agree on what is valid.
			if cerr := container.ValidateReplication(tt.in); (cerr == nil) != tt.ok && tt.in != "replica:70000" {
				t.Errorf("container.ValidateReplication(%q) = %v, cluster says ok=%v", tt.in, cerr, tt.ok)
			}
			if tt.ok && got.String() != tt.in {
				t.Errorf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

// TestParseState: every state a container descriptor can hold parses, by
// the container package's own names.
func TestParseState(t *testing.T) {
	for _, s := range []container.State{container.Open, container.Closing, container.Closed,
		container.Recovering, container.Unhealthy, container.Deleted} {
		got, err := cluster.ParseState(string(s))
		if err != nil || got.String() != string(s) {
			t.Errorf("ParseState(%q) = %v, %v", s, got, err)
		}
	}
	if _, err := cluster.ParseState("closed"); err == nil {
		t.Error(`ParseState("closed"): no error`)
	}
}

func TestDecideRefuses(t *testing.T) {
	ok := cluster.State{Nodes: threeRacks(nil)}
	tests := []struct {
		name  string
		state cluster.State
		cfg   func(*cluster.Config)
		want  string
	}{
		{"no time", ok, func(c *cluster.Config) { c.Now = time.Time{} }, "now is not set"},
		{"no limit", ok, func(c *cluster.Config) { c.NodeLimit = 0 }, "node limit 0"},
		{"negative redundancy", ok, func(c *cluster.Config) { c.MaintenanceRemainingRedundancy = -1 }, "maintenance remaining redundancy -1"},
		{"no timeout", ok, func(c *cluster.Config) { c.Timeout = 0 }, "timeout 0s"},
		{"node twice", cluster.State{Nodes: []cluster.Node{node("a1", "A"), node("a1", "B")}}, nil, "node a1: listed twice"},
		{"node without id", cluster.State{Nodes: []cluster.Node{node("", "A")}}, nil, "has no id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg()
			if tt.cfg != nil {
				tt.cfg(&c)
			}
			_, err := cluster.Decide(tt.state, c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
	if _, err := cluster.Decide(ok, cfg()); err != nil {
		t.Fatalf("a valid state and config: %v", err)
	}
}
