package journal

import (
	"fmt"
	"testing"
)

func TestLocate(t *testing.T) {
	tests := []struct {
		path string
		want Location
	}{
		{"", Location{}},
		{"x/y", Location{}},
		{".db", Location{}},
		{"sales", Location{}},
		{"sales.db", Location{Level: Database, DB: "sales"}},
		{"/sales.db/", Location{Level: Database, DB: "sales"}},
		{"sales.db/orders", Location{Level: Table, DB: "sales", Table: "orders"}},
		{"sales.db/orders/dt=2024-01-01", Location{Level: Partition, DB: "sales", Table: "orders", Partition: "dt=2024-01-01"}},
		{"sales.db/orders/dt=2024-01-01/hr=1/part-0", Location{Level: Data, DB: "sales", Table: "orders", Partition: "dt=2024-01-01/hr=1"}},
		{"sales.db/orders/part-0", Location{Level: Data, DB: "sales", Table: "orders"}},
		{"a.db/t/k=v/sub/f", Location{Level: Data, DB: "a", Table: "t", Partition: "k=v"}},
		{"sales.db/orders/_temporary/x", Location{Level: Data, DB: "sales", Table: "orders"}},
		{"sales.db/orders/=v", Location{Level: Data, DB: "sales", Table: "orders"}},
		{"sales.db/orders/k=", Location{Level: Data, DB: "sales", Table: "orders"}},
		{"sales.db/./orders/../orders", Location{Level: Table, DB: "sales", Table: "orders"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if got := Locate(tt.path); got != tt.want {
				t.Errorf("Locate(%q) = %+v, want %+v", tt.path, got, tt.want)
			}
		})
	}
}

func TestStamp(t *testing.T) {
	e := Event{Path: "sales.db/orders/dt=2024-01-01/part-0"}
	e.Stamp()
	if e.DB != "sales" || e.Table != "orders" || e.Partition != "dt=2024-01-01" {
		t.Errorf("Stamp: db %q table %q partition %q", e.DB, e.Table, e.Partition)
	}
}

func TestSum(t *testing.T) {
	// Expected values from `printf ... | xxhsum -H64`.
	tests := []struct{ in, want string }{
		{"hello", "26c7827d889f6da3"},
		{"", "ef46db3751d8e999"},
	}
	for _, tt := range tests {
		if got := Sum([]byte(tt.in)); got != tt.want {
			t.Errorf("Sum(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
	for _, v := range []uint64{0, 0xab, 0x0123456789abcdef, ^uint64(0), 0xf000000000000001} {
		if got, want := FormatSum(v), fmt.Sprintf("%016x", v); got != want {
			t.Errorf("FormatSum(%#x) = %s, want %s", v, got, want)
		}
	}
	if got := FormatSum(0xab); got != "00000000000000ab" {
		t.Errorf("FormatSum(0xab) = %s", got)
	}
}
