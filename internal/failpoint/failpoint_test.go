package failpoint

import (
	"slices"
	"testing"
)

func TestSetAndHit(t *testing.T) {
	a := Register("test/a")
	Register("test/b")
	var got []string
	reset := Set(func(name string) { got = append(got, name) })
	Hit(a)
	Hit("test/b")
	reset()
	Hit(a)
	if want := []string{"test/a", "test/b"}; !slices.Equal(got, want) {
		t.Errorf("hits %v, want %v", got, want)
	}
	if names := Names(); !slices.Contains(names, "test/a") || !slices.Contains(names, "test/b") {
		t.Errorf("Names() = %v", names)
	}
}

func TestFromEnvRefuses(t *testing.T) {
	Register("test/c")
	for _, spec := range []string{"test/nope", "test/c:0", "test/c:x"} {
		t.Setenv(EnvVar, spec)
		if err := FromEnv(); err == nil {
			t.Errorf("FromEnv with %s=%q: no error", EnvVar, spec)
		}
	}
	t.Setenv(EnvVar, "")
	if err := FromEnv(); err != nil {
		t.Errorf("FromEnv with nothing armed: %v", err)
	}
}
