# cmfs — see README.md.

GO      ?= go
GOPATH  := $(shell $(GO) env GOPATH)
export PATH := $(PATH):$(GOPATH)/bin:/root/go/bin

UNIT        := ./internal/... ./journal/... ./cmroot/... ./upkeep/... ./control/... ./protect/... ./fusefs/... ./slot/... ./repl/... ./source/... ./container/... ./peer/... ./ingest/... ./cluster/... ./statuspage/... ./cmd/... ./bench/...
INTEGRATION := ./integration/...

.PHONY: all build man completions install uninstall test test-deps unit check-deps integration bench bench-deps demo proto proto-deps vet fmt clean

all: build

# -buildvcs=auto: --version names the revision built, even where GOFLAGS
# turns VCS stamping off.
build:
	$(GO) build -buildvcs=auto -o bin/cmfs ./cmd/cmfs
	$(GO) build -buildvcs=auto -o bin/replicad ./cmd/replicad
	$(GO) build -buildvcs=auto -o bin/mount.fuse.cmfs ./cmd/mount.fuse.cmfs

# Where make install puts things: PREFIX/bin, PREFIX/share/man/man1,
# PREFIX/share/{bash-completion,zsh,fish}/…, PREFIX/lib/systemd/system,
# PREFIX/sbin (docs/architecture.md, "Installed files"). DESTDIR stages
# the tree for a package; make uninstall (same PREFIX and DESTDIR) removes
# exactly what the install's manifest lists.
PREFIX  ?= /usr/local
DESTDIR ?=

# The man pages are generated from the command trees (cobra's generator,
# internal/cli/manpage) by builds with -tags mangen, so that the shipped
# binaries do not carry it; dated by the last commit, so one revision
# always makes the same pages. Both generated sets are remade on every
# install: Go's build cache makes that a matter of seconds.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)

man: build
	$(GO) build -buildvcs=auto -tags mangen -o bin/mangen/cmfs ./cmd/cmfs
	$(GO) build -buildvcs=auto -tags mangen -o bin/mangen/replicad ./cmd/replicad
	rm -rf bin/man
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) bin/mangen/cmfs man-pages bin/man
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) bin/mangen/replicad man-pages bin/man

# Each binary's own completion command writes its scripts.
completions: build
	rm -rf bin/completion && mkdir -p bin/completion
	for p in cmfs replicad; do \
		bin/$$p completion bash >bin/completion/$$p.bash && \
		bin/$$p completion zsh >bin/completion/_$$p && \
		bin/$$p completion fish >bin/completion/$$p.fish || exit 1; \
	done

# dist/systemd/*.service and bin/mount.fuse.cmfs are installed when the
# tree has them and skipped when it does not (scripts/install.sh).
install: build man completions
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' bash scripts/install.sh install

uninstall:
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' bash scripts/install.sh uninstall

# What the tests need and the machine lacks is installed first (the same
# list .ci/run uses); then the unit tests (no FUSE, no root) with the race
# detector, then the integration tests: real mounts, real processes
# (bin/cmfs, bin/replicad: both built by build).
test: test-deps build unit integration

test-deps:
	bash scripts/deps.sh ci

unit: check-deps
	$(GO) test -race $(UNIT)

# The sidecar never imports the FUSE adapter (DESIGN: imports point
# downward): every import edge into go-fuse among what it is built from
# is printed, and any makes the check fail.
SIDECAR := ./cmd/replicad ./source ./repl ./ingest ./peer ./statuspage

check-deps:
	@edges=$$($(GO) list -deps -f '{{$$p := .ImportPath}}{{range .Imports}}{{$$p}} imports {{.}}{{"\n"}}{{end}}' $(SIDECAR) | grep ' imports github.com/hanwen/go-fuse' | grep -v '^github.com/hanwen/go-fuse' | sort -u); \
	if [ -n "$$edges" ]; then echo "check-deps: the sidecar imports go-fuse:" >&2; echo "$$edges" >&2; exit 1; fi

# gotestsum (a tool of go.mod) prints each test as it ends, so a long
# integration run shows its progress; -count=1: they mount and start
# processes, nothing to cache.
integration: build
	$(GO) tool gotestsum --format testname --format-hide-empty-pkg -- -count=1 -timeout 25m $(INTEGRATION)

# cmfsbench also runs cmfs as built at BENCH_BASE, as column cmfs@REV, and
# shows cmfs's ratio against it. c975bd5 is the last commit before cmfs
# flushed what an event names (issue: cmfs trust): before e8d872a (the
# flush) and d9edfbc (intents journaled for shell overwrites and creates)
# both; BENCH_BASE=d9edfbc measures the flush alone; BENCH_BASE= drops the
# column. A revision that is missing or does not build offline makes that
# column n/a, and the run goes on.
BENCH_BASE ?= c975bd5

# flushbench measures the commit path's ways of making a small change
# durable on the backing filesystem itself (about 2-3 minutes).

# containerbench runs push, compression, RSS, drain, the coordinator's
# failover with etcd (a row of n/a without the etcd binary) and the EC rows
# (twelve nodes; a 6 GiB container for the RSS row: about 25 GiB on disk).

bench: build bench-deps
	$(GO) run ./bench/cmd/cmfsbench $(if $(BENCH_BASE),-base $(BENCH_BASE))
	$(GO) run ./bench/cmd/flushbench
	CMFS_BENCH=1 $(GO) test -run TestBench -v ./journal/
	$(GO) run ./bench/cmd/replbench
	$(GO) run ./bench/cmd/containerbench --replicad bin/replicad
	$(GO) run ./bench/cmd/rmbench
	$(GO) run ./bench/cmd/ecbench

# What the benchmarks compare with and the machine may lack: rsync (for
# containerbench's report row), xfsprogs (mkfs.xfs, for cmfsbench's XFS
# row, run on an XFS image it makes on a loop device), e2fsprogs
# (mkfs.ext4, for its small-file rows, each column on an ext4 of its own)
# and fio (cmfsbench's random-write rows). Installed once; if one cannot be, its rows say so and
# the run goes on.
bench-deps:
	@command -v rsync >/dev/null 2>&1 || \
		{ apt-get install -y -q rsync >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q rsync >/dev/null 2>&1; }; } || \
		echo "bench-deps: rsync could not be installed; containerbench reports its row as n/a"
	@command -v mkfs.xfs >/dev/null 2>&1 || \
		{ apt-get install -y -q xfsprogs >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q xfsprogs >/dev/null 2>&1; }; } || \
		echo "bench-deps: xfsprogs could not be installed; cmfsbench reports its XFS row as n/a"
	@command -v mkfs.ext4 >/dev/null 2>&1 || \
		{ apt-get install -y -q e2fsprogs >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q e2fsprogs >/dev/null 2>&1; }; } || \
		echo "bench-deps: e2fsprogs could not be installed; cmfsbench reports its small-file rows as n/a (or run it with -small-fs dir)"
	@command -v fio >/dev/null 2>&1 || \
		{ apt-get install -y -q fio >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q fio >/dev/null 2>&1; }; } || \
		echo "bench-deps: fio could not be installed; cmfsbench reports its fio rows as n/a"

# The whole story in a temporary directory, in a quarter of a minute: a
# protected mount, a replica dumped, loaded and followed, a container
# replicated between two nodes, a three-node cluster healing a copy of a
# node killed (scripts/demo.sh). It first installs what it needs and the
# machine lacks (fuse3), as .ci/run does, from the same script.
demo: build
	bash scripts/deps.sh demo
	bash scripts/demo.sh

# The generators at the versions the checked-in code was made with
# (protoc-gen-go as go.mod pins google.golang.org/protobuf), and protoc
# from the distribution (3.21.12 on Debian 12).
PROTOC_GEN_GO      := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2

proto-deps:
	@command -v protoc >/dev/null 2>&1 || apt-get install -y -q protobuf-compiler || \
		{ apt-get update -q && apt-get install -y -q protobuf-compiler; }
	$(GO) install $(PROTOC_GEN_GO)
	$(GO) install $(PROTOC_GEN_GO_GRPC)

proto: proto-deps
	protoc -I api \
		--go_out=api/eventpb --go_opt=paths=source_relative \
		api/event.proto
	protoc -I api \
		--go_out=api/controlpb --go_opt=paths=source_relative \
		--go-grpc_out=api/controlpb --go-grpc_opt=paths=source_relative \
		api/control.proto
	protoc -I api \
		--go_out=api/replpb --go_opt=paths=source_relative \
		--go-grpc_out=api/replpb --go-grpc_opt=paths=source_relative \
		api/repl.proto
	protoc -I api \
		--go_out=api/containerpb --go_opt=paths=source_relative \
		--go-grpc_out=api/containerpb --go-grpc_opt=paths=source_relative \
		api/container.proto
	protoc -I api \
		--go_out=api/clusterpb --go_opt=paths=source_relative \
		--go-grpc_out=api/clusterpb --go-grpc_opt=paths=source_relative \
		api/cluster.proto

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

clean:
	rm -rf bin
