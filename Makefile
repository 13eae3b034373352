# Convenience targets; the scripts are the source of truth.
.PHONY: demo test build bench bench-pid1 bench-startup bench-latency bench-storage bench-checkpoint fuzz image crash

# LIFEBOAT_LDFLAGS (scripts/lib.sh) turn off the Go runtime's asynchronous
# preemption, so that lifeboat forwards SIGURG too.
build:
	bash -c '. scripts/lib.sh && go build -ldflags "$$LIFEBOAT_LDFLAGS" -o bin/lifeboat ./cmd/lifeboat'

demo:
	scripts/demo.sh

test:
	scripts/test.sh

image:
	scripts/docker-build.sh

bench: bench-pid1 bench-startup bench-storage bench-checkpoint bench-latency

bench-pid1:
	bench/pid1.sh

bench-startup:
	bench/startup.sh

bench-storage:
	bench/storage.sh

bench-checkpoint:
	bench/checkpoint.sh

bench-latency:
	bench/latency.sh

# Long fuzzing runs (CI runs each target briefly as part of go test).
FUZZTIME ?= 5m
fuzz:
	go test -run '^$$' -fuzz FuzzDecodeManifest -fuzztime $(FUZZTIME) ./checkpoint/
	go test -run '^$$' -fuzz FuzzParseURL -fuzztime $(FUZZTIME) ./storage/
	go test -run '^$$' -fuzz FuzzParseRewrite -fuzztime $(FUZZTIME) ./signals/
	go test -run '^$$' -fuzz FuzzParseDevices -fuzztime $(FUZZTIME) ./limits/gpu/

# The long crash-consistency run: 200 kill -9 trials per store kind.
crash:
	LIFEBOAT_CRASH_TRIALS=200 scripts/test.sh -run TestCrash ./cmd/lifeboat
