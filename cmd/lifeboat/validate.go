package main

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/notice"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/storage/s3"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Every options struct has a validate method that checks each value as
// given (flag or variable) before anything starts: no store is opened, no
// trainer spawned, nothing written. Its error is a usageError (exit 2), one
// sentence naming the flag and its environment twin. Checks that need the
// world (a store that answers, a GPU NVML sees) come later and are runtime
// failures.

// bad is a usageError for flag name: "--name (LIFEBOAT_NAME) is VALUE; WHAT".
func bad(name string, value any, what string) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = strconv.Quote(s)
	}
	return usageError{fmt.Errorf("--%s (%s) is %s; %s", name, envName(name), v, what)}
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// positive says d must be above 0.
func positive(name string, d time.Duration) error {
	if d <= 0 {
		return bad(name, d, "it must be positive, for example 2s")
	}
	return nil
}

// notNegative says d must be 0 or more.
func notNegative(name string, d time.Duration, zero string) error {
	if d < 0 {
		return bad(name, d, "it must be 0 ("+zero+") or more")
	}
	return nil
}

func (o *commonOptions) validate() error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(o.logLevel)); err != nil {
		return bad("log-level", o.logLevel, "use debug, info, warn or error")
	}
	switch strings.ToLower(o.logFormat) {
	case "", "auto", "json", "text":
		return nil
	}
	return bad("log-format", o.logFormat, "use auto, json or text")
}

// validate checks the store's flags and the AWS_* variables they stand
// for, without opening it.
func (o *storeOptions) validate() error {
	if o.url != "" {
		if _, err := o.location(); err != nil {
			return usageError{fmt.Errorf("--store (LIFEBOAT_STORE): %w", err)}
		}
	}
	if o.endpoint != "" {
		if err := checkEndpoint(o.endpoint); err != nil {
			return bad("s3-endpoint", redactURL(o.endpoint), err.Error())
		}
	} else if o.scheme() == "s3" {
		for _, v := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
			if e := os.Getenv(v); e != "" {
				if err := checkEndpoint(e); err != nil {
					return usageError{fmt.Errorf("%s=%q (the default of --s3-endpoint, LIFEBOAT_S3_ENDPOINT): %v", v, redactURL(e), err)}
				}
				break
			}
		}
	}
	switch s3.BucketLookup(o.lookup) {
	case s3.LookupAuto, s3.LookupPath, s3.LookupDNS:
	default:
		return bad("s3-bucket-lookup", o.lookup, "use auto, path or dns")
	}
	if strings.ContainsFunc(o.region, func(r rune) bool { return r <= ' ' || r == '/' }) {
		return bad("s3-region", o.region, "a region is a name such as us-east-1")
	}
	if o.caFile != "" {
		if what := checkCAFile(o.caFile); what != "" {
			return bad("s3-ca-file", o.caFile, what)
		}
	} else if o.scheme() == "s3" {
		if f := os.Getenv("AWS_CA_BUNDLE"); f != "" {
			if what := checkCAFile(f); what != "" {
				return usageError{fmt.Errorf("AWS_CA_BUNDLE=%q (the default of --s3-ca-file, LIFEBOAT_S3_CA_FILE): %s", f, what)}
			}
		}
	}
	if o.uploadLimit != "" {
		if n, err := parseBytes(o.uploadLimit); err != nil || n <= 0 {
			return bad("upload-limit", o.uploadLimit, "give bytes per second such as 200MB or 1GiB")
		}
	}
	return firstErr(positive("s3-connect-timeout", o.connectTimeout), positive("s3-response-timeout", o.responseTimeout),
		positive("s3-stall-timeout", o.stallTimeout))
}

// checkCAFile says what is wrong with a PEM file of CAs, or "".
func checkCAFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		return "it cannot be read: " + unwrapPathError(err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return "it holds no PEM certificate"
	}
	return ""
}

// checkEndpoint says what is wrong with an S3 endpoint URL, or nil.
func checkEndpoint(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("it is not a URL: give scheme://host[:port], e.g. http://minio:9000")
	case u.User != nil:
		return errors.New("credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("it must start with http:// or https://")
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return errors.New("give scheme://host[:port] only, e.g. http://minio:9000")
	}
	return nil
}

// redactURL hides the password of a URL's user information, also in a
// string that does not parse as a URL.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		if _, has := u.User.Password(); has || u.User != nil {
			u.User = url.User("xxxxx")
			return u.String()
		}
		return raw
	}
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return raw[:i+3] + "xxxxx" + rest[at:]
		}
	}
	return raw
}

// unwrapPathError drops the path an *os.PathError repeats.
func unwrapPathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func (o *checkpointOptions) validate() error {
	if o.keep < 0 {
		return bad("keep", o.keep, "it must be 0 (keep all) or more")
	}
	if o.workers < 0 {
		return bad("workers", o.workers, "it must be 0 (the defaults) or more")
	}
	if err := firstErr(positive("settle", o.settle), positive("scan-interval", o.interval)); err != nil {
		return err
	}
	if o.marker == "" || strings.Contains(o.marker, "/") || o.marker == "." || o.marker == ".." {
		return bad("marker", o.marker, "give a file name such as "+strconv.Quote(watch.DefaultMarker))
	}
	re, err := regexp.Compile(o.stepPattern)
	if err != nil {
		return bad("step-pattern", o.stepPattern, "it is not a regular expression: "+err.Error())
	}
	if re.NumSubexp() < 1 {
		return bad("step-pattern", o.stepPattern, `it needs a group that captures the step, e.g. step-(\d+)`)
	}
	o.pattern = re
	if o.restore != "auto" && o.restore != "never" {
		return bad("restore", o.restore, "use auto or never")
	}
	if o.verifyFormat != "auto" && o.verifyFormat != "off" {
		return bad("verify-format", o.verifyFormat, "use auto or off")
	}
	o.excludes = splitList(o.exclude)
	for _, g := range o.excludes {
		if _, err := path.Match(g, ""); err != nil {
			return bad("exclude", o.exclude, fmt.Sprintf("%q is not a glob; use shell globs such as *.log", g))
		}
	}
	o.all, err = allRanks(o.restoreRanks)
	return err
}

func (o *rankOptions) validate() error {
	if o.rank < -1 {
		return bad("rank", o.rank, "it must be 0 or more")
	}
	if o.worldSize < -1 || o.worldSize == 0 {
		return bad("world-size", o.worldSize, "it must be 1 or more")
	}
	if o.rank >= 0 && o.worldSize >= 1 && o.rank >= o.worldSize {
		return usageError{fmt.Errorf("--rank (LIFEBOAT_RANK) is %d; it must be below --world-size (LIFEBOAT_WORLD_SIZE), %d", o.rank, o.worldSize)}
	}
	return nil
}

func (o *memoryOptions) validate() error {
	switch o.mode {
	case "auto", "on", "off":
	default:
		return bad("memory-cgroup", o.mode, "use auto, on or off")
	}
	return validReserve(o.reserve)
}

// validReserve checks --memory-reserve.
func validReserve(v string) error {
	if n, err := parseBytes(v); err != nil || n < 0 {
		return bad("memory-reserve", v, "give a size such as 64MiB")
	}
	return nil
}

// validate checks the GPU flags' syntax; whether the devices exist is
// NVML's to say when the plan is made.
func (o *gpuOptions) validate(watchdog bool) error {
	if o.gpus != "" {
		if _, err := gpu.ParseDevices(o.gpus); err != nil {
			return bad("gpus", o.gpus, strings.TrimPrefix(err.Error(), "gpu: "))
		}
	}
	if o.memoryLimit != "" {
		if _, _, err := gpu.MemoryPlan(o.memoryLimit, 0, nil); err != nil && !errors.Is(err, gpu.ErrMemoryUnknown) {
			return bad("gpu-memory-limit", o.memoryLimit, "give MiB (8192), a fraction of the device's memory (0.5) or auto")
		}
	}
	if !watchdog {
		return nil
	}
	if _, err := gpu.ParsePolicy(o.memoryPolicy); err != nil {
		return bad("gpu-memory-policy", o.memoryPolicy, "use warn, term or kill")
	}
	return positive("gpu-watch-interval", o.watchInterval)
}

// validate checks the metrics and notice flags (withNotices: run's).
func (o *observeOptions) validate(withNotices bool) error {
	if o.metricsAddr != "" {
		if _, port, err := net.SplitHostPort(o.metricsAddr); err != nil || port == "" {
			return bad("metrics-addr", o.metricsAddr, "give host:port or :port, e.g. :9090")
		}
	}
	if !withNotices {
		return nil
	}
	if _, err := notice.ParseSources(o.notices); err != nil {
		parts := strings.Split(o.notices, ",")
		for i, p := range parts {
			if u, ok := strings.CutPrefix(p, "url:"); ok {
				parts[i] = "url:" + redactURL(u)
			}
		}
		return bad("notices", strings.Join(parts, ","), "use aws, gcp and/or url:http://... (comma-separated)")
	}
	if _, err := signals.Parse(o.noticeSignal); err != nil {
		return bad("notice-signal", o.noticeSignal, "give a signal name such as USR1 or TERM")
	}
	return positive("notice-interval", o.noticeInterval)
}

func (o *runOptions) validate() error {
	if err := firstErr(o.common.validate(), positive("grace", o.grace)); err != nil {
		return err
	}
	if _, err := signals.ParseList(o.stopSignals); err != nil {
		return bad("stop-signals", o.stopSignals, "give signal names such as TERM,INT: "+err.Error())
	}
	r := signals.Rewrite{}
	for _, spec := range o.rewrite {
		if err := r.ParseRewrite(spec); err != nil {
			return bad("rewrite", spec, "give FROM:TO, e.g. TERM:USR1")
		}
	}
	if o.preemptExitCode != "child" {
		if n, err := strconv.Atoi(o.preemptExitCode); err != nil || n < 0 || n > 255 {
			return bad("preempt-exit-code", o.preemptExitCode, `use a number 0..255 or "child"`)
		}
	}
	if err := notNegative("max-runtime", o.maxRuntime, "no limit"); err != nil {
		return err
	}
	if o.restart != "never" && o.restart != "on-failure" {
		return bad("restart", o.restart, "use never or on-failure")
	}
	if o.maxRestarts < 0 {
		return bad("max-restarts", o.maxRestarts, "it must be 0 or more")
	}
	if o.restartBackoff < 0 {
		return bad("restart-backoff", o.restartBackoff, "it must be 0 or more")
	}
	if o.store.url != "" && o.checkpoint.dir == "" {
		return usageError{errors.New("--store is set but --dir is not: set --dir (LIFEBOAT_DIR) to the directory the trainer saves checkpoints into")}
	}
	return firstErr(o.store.validate(), o.checkpoint.validate(), o.ranks.validate(), o.observe.validate(true),
		o.memory.validate(), o.gpu.validate(true))
}

func (o *sidecarOptions) validate() error {
	if err := firstErr(o.common.validate(), positive("grace", o.grace)); err != nil {
		return err
	}
	if o.store.url == "" || o.checkpoint.dir == "" {
		return usageError{errors.New("--store (LIFEBOAT_STORE) and --dir (LIFEBOAT_DIR) are required: where checkpoints go, and the directory the trainer saves into")}
	}
	if o.flushWait < 0 || o.flushWait >= o.grace {
		return bad("flush-wait", o.flushWait, fmt.Sprintf("it must be 0 or more and below --grace (%s)", o.grace))
	}
	return firstErr(o.store.validate(), o.checkpoint.validate(), o.ranks.validate(), o.observe.validate(false))
}

func (o *restoreOptions) validate() error {
	if o.step < -1 {
		return bad("step", o.step, "it must be 0 or more (omit it for the newest complete step)")
	}
	if o.workers < 0 {
		return bad("workers", o.workers, "it must be 0 (the default) or more")
	}
	return firstErr(o.common.validate(), positive("progress-interval", o.interval), o.store.validate(), o.ranks.validate())
}

func (o *verifyOptions) validate() error {
	if o.subset != "" {
		if _, err := checkpoint.ParseSubset(o.subset); err != nil {
			return bad("read-data-subset", o.subset, `give all (read every chunk), none (presence and sizes only) or n/t with 1 <= n <= t (for example 1/5)`)
		}
	}
	return firstErr(o.common.validate(), o.store.validate())
}

func (o *pruneOptions) validate() error {
	if o.keep < 1 {
		return bad("keep", o.keep, "keep at least 1")
	}
	return firstErr(o.common.validate(), o.store.validate())
}

func (o *lsOptions) validate() error {
	return firstErr(o.common.validate(), o.store.validate())
}

func (o *doctorOptions) validate() error {
	return firstErr(o.common.validate(), o.store.validate(), o.gpu.validate(false), validReserve(o.reserve))
}
