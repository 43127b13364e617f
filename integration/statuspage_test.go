package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmfs-project/cmfs/internal/wait"
)

// The status page (serve --http) is tested the way an operator sees it:
// headless Chromium loads it from a real replicad serve, its script
// polls /status.json, and the DOM Chromium dumps must show the real
// state. Chromium is Debian's `chromium` package (.ci/run installs it);
// without it the test is skipped, except under CI.

var statusAddr = regexp.MustCompile(`status http://(\S+)/`)

// requireChromium returns the path of chromium, or skips t without it
// (fails it under CI=true).
func requireChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	why := "chromium not found: install it (Debian: apt-get install --no-install-recommends chromium) to test the status page in a browser"
	if os.Getenv("CI") == "true" {
		t.Fatalf("cannot run: %s (CI=true makes this skip a failure)", why)
	}
	t.Skip(why)
	return ""
}

// chromium runs headless Chromium on url with args (--dump-dom,
// --screenshot=...), with --virtual-time-budget so that the page's
// script has polled a few times before the DOM is taken, and returns its
// stdout.
func chromium(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	all := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000", "--window-size=1280,1600"}, args...)
	cmd := exec.CommandContext(ctx, bin, append(all, url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// pageSnapshot is what the test reads of /status.json.
type pageSnapshot struct {
	Warehouse *struct {
		LastEvent uint64 `json:"last_event"`
		Events    []struct {
			ID   uint64 `json:"id"`
			Path string `json:"path"`
		} `json:"events"`
		Ingest *struct {
			Last uint64 `json:"last"`
		} `json:"ingest"`
	} `json:"warehouse"`
	Containers *struct {
		ByState map[string]int `json:"by_state"`
	} `json:"containers"`
	Cluster *struct {
		Error string `json:"error"`
		Nodes []struct {
			ID     string `json:"id"`
			Health string `json:"health"`
		} `json:"nodes"`
		ByClass    map[string]int `json:"by_class"`
		Containers []struct {
			ID    string `json:"id"`
			Class string `json:"class"`
		} `json:"containers"`
	} `json:"cluster"`
}

// statusJSON reads http://addr/status.json.
func statusJSON(t *testing.T, addr string) (pageSnapshot, string) {
	t.Helper()
	var s pageSnapshot
	resp, err := http.Get("http://" + addr + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status.json: %s: %s", resp.Status, b.String())
	}
	if err := json.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatalf("GET /status.json: %v: %s", err, b.String())
	}
	return s, b.String()
}

// TestStatusPage: a coordinator node serving a mounted warehouse with
// --ingest and --http, and a second node that joined it (ingest fills
// replica:2 containers, so the put's replica:1 container is never the
// one ingest closes when idle). A file written
// through the mount and a container put and closed with the CLI must
// show on the coordinator's page as Chromium renders it: the event and
// its path, the container's id and state (CLOSED) and class (HEALTHY),
// both nodes HEALTHY, and more than one refresh. The member's
// /status.json shows the same cluster, asked of the coordinator over
// gRPC. A screenshot of the page goes to the test's artifact directory
// (kept with go test -artifacts).
func TestStatusPage(t *testing.T) {
	bin := requireChromium(t)
	m := mount(t)
	writeFile(t, m.path("sales.db/orders/dt=1/part-0"), []byte("the status page's first row\n"))
	c := startNode(t, "dn1", "--state", m.State, "--ingest", "--ingest-idle", "1s", "--ingest-replication", "replica:2",
		"--coordinator", "--heartbeat", "200ms", "--rm-interval", "200ms", "--http", "127.0.0.1:0")
	page := statusAddr.FindStringSubmatch(readFile2(c.p.stdout))
	if page == nil {
		t.Fatalf("serve --http printed no status address: %s", readFile2(c.p.stdout))
	}
	member := startNode(t, "dn2", "--join", c.Addr, "--heartbeat", "200ms", "--http", "127.0.0.1:0")
	memberPage := statusAddr.FindStringSubmatch(readFile2(member.p.stdout))
	if memberPage == nil {
		t.Fatalf("member's serve --http printed no status address: %s", readFile2(member.p.stdout))
	}
	id := c.fillReplication(t, "replica:1", randomFile(t, t.TempDir(), "block", 64<<10))

	// The page polls; wait until what it will show has settled: the
	// coordinator classified the container, both nodes heartbeat, and
	// ingest read the event.
	var s pageSnapshot
	var raw string
	wait.For(t, 30*time.Second, "status.json to show container "+id+" HEALTHY on two nodes, and the event ingested", func() bool {
		s, raw = statusJSON(t, page[1])
		if s.Warehouse == nil || s.Warehouse.Ingest == nil || s.Cluster == nil || s.Warehouse.LastEvent == 0 ||
			s.Warehouse.Ingest.Last < s.Warehouse.LastEvent || len(s.Cluster.Nodes) != 2 {
			return false
		}
		for _, n := range s.Cluster.Nodes {
			if n.Health != "HEALTHY" {
				return false
			}
		}
		for _, ct := range s.Cluster.Containers {
			if ct.ID == id {
				return ct.Class == "HEALTHY"
			}
		}
		return false
	})
	if s.Containers.ByState["CLOSED"] < 1 {
		t.Errorf("status.json containers by state %v: want container %s CLOSED", s.Containers.ByState, id)
	}

	dom := chromium(t, bin, "http://"+page[1]+"/", "--dump-dom")
	for _, want := range []string{
		fmt.Sprintf(`<tr data-container="%s" data-state="CLOSED">`, id),
		fmt.Sprintf(`<tr data-container="%s" data-class="HEALTHY">`, id),
		`<tr data-node="dn1" data-health="HEALTHY">`,
		`<tr data-node="dn2" data-health="HEALTHY">`,
		`<li class="good" data-name="HEALTHY">HEALTHY `,
		fmt.Sprintf(`<tr data-event="%d">`, s.Warehouse.LastEvent),
		`sales.db/orders/dt=1/part-0`,
		`<span id="conn" class="conn ok">live</span>`,
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page as Chromium renders it lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`<span id="polls">(\d+)</span>`).FindStringSubmatch(dom); m == nil {
		t.Error("the page has no refresh count")
	} else if n, _ := strconv.Atoi(m[1]); n < 2 {
		t.Errorf("the page refreshed %d times in 5 s of virtual time, want at least 2", n)
	}
	if t.Failed() {
		t.Logf("status.json: %s\nDOM: %s", raw, dom)
	}

	shot := filepath.Join(t.ArtifactDir(), "status.png")
	chromium(t, bin, "http://"+page[1]+"/", "--screenshot="+shot)
	if b, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("screenshot %s: %v, %d bytes, want a PNG", shot, err, len(b))
	}
	t.Logf("screenshot of the status page: %s (removed after the test unless go test -artifacts -outputdir DIR)", shot)

	ms, mraw := statusJSON(t, memberPage[1])
	if ms.Cluster == nil || ms.Cluster.Error != "" || len(ms.Cluster.Nodes) != 2 || ms.Cluster.ByClass["HEALTHY"] < 1 {
		t.Errorf("the member's status.json: want the coordinator's two nodes and container %s HEALTHY: %s", id, mraw)
	}
	if ms.Warehouse != nil {
		t.Errorf("the member serves no warehouse, yet its status.json has one: %s", mraw)
	}

	// A source alone (no --volume) has the warehouse part only.
	src := startProc(t, replicadPath(t), "serve", "--state", m.State, "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0")
	var srcPage []string
	wait.For(t, 15*time.Second, "the source alone to listen", func() bool {
		srcPage = statusAddr.FindStringSubmatch(readFile2(src.stdout))
		return srcPage != nil || src.exited()
	})
	if srcPage == nil {
		t.Fatalf("serve --state --http: %s %s", readFile2(src.stdout), src.stderrNow())
	}
	ss, sraw := statusJSON(t, srcPage[1])
	if w := ss.Warehouse; w == nil || w.LastEvent != s.Warehouse.LastEvent || len(w.Events) == 0 || w.Events[0].Path != "sales.db/orders/dt=1/part-0" {
		t.Errorf("the source's status.json: want event %d on sales.db/orders/dt=1/part-0 first: %s", s.Warehouse.LastEvent, sraw)
	}
	if ss.Containers != nil || ss.Cluster != nil || ss.Warehouse.Ingest != nil {
		t.Errorf("the source alone shows containers, a cluster or ingest: %s", sraw)
	}
}
