# Convenience targets; the scripts are the source of truth.
.PHONY: demo test build build-static build-gpu cross-test bench bench-pid1 bench-startup bench-earlysignal bench-latency bench-storage bench-checkpoint fuzz image crash

# The two build flavours (README, "Build flavours"): bin/lifeboat is static
# (CGO_ENABLED=0), bin/lifeboat-gpu is built with cgo against glibc, for
# NVML. LIFEBOAT_LDFLAGS (scripts/lib.sh) turn off the Go runtime's
# asynchronous preemption, so that lifeboat forwards SIGURG too.
build: build-static build-gpu

build-static:
	bash -c '. scripts/lib.sh && CGO_ENABLED=0 go build -ldflags "$$LIFEBOAT_LDFLAGS" -o bin/lifeboat ./cmd/lifeboat'

build-gpu:
	bash -c '. scripts/lib.sh && CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -ldflags "$$LIFEBOAT_LDFLAGS" -o bin/lifeboat-gpu ./cmd/lifeboat'

# Both flavours for linux/amd64 and linux/arm64, the arm64 ones tested under qemu.
cross-test:
	scripts/cross-test.sh

demo:
	scripts/demo.sh

test:
	scripts/test.sh

image:
	scripts/docker-build.sh

bench: bench-pid1 bench-startup bench-earlysignal bench-storage bench-checkpoint bench-latency

bench-pid1:
	bench/pid1.sh

bench-startup:
	bench/startup.sh

bench-earlysignal:
	bench/earlysignal.sh

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
	go test -run '^$$' -fuzz FuzzPickleStream -fuzztime $(FUZZTIME) ./format/

# The long crash-consistency run: 200 kill -9 trials per store kind.
crash:
	LIFEBOAT_CRASH_TRIALS=200 scripts/test.sh -run TestCrash ./e2e/
