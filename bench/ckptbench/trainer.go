package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// trainerReport is what the trainer helper writes after its checkpoint.
type trainerReport struct {
	WriteSeconds float64 `json:"write_seconds"`
	Bytes        int64   `json:"bytes"`
	MaxRSSKiB    int64   `json:"max_rss_kib"`
}

// trainer is the helper mode run under `lifeboat run`: it announces its
// parent's pid (lifeboat's) in -ready, waits for SIGTERM, then writes -size
// incompressible bytes to -out under $LIFEBOAT_DIR, as a SIGTERM handler
// calling paddle.save would, reports how long the write took in -report,
// and exits 0.
func trainer(args []string) {
	fs := flag.NewFlagSet("trainer", flag.ExitOnError)
	out := fs.String("out", "backup/latest.pdparams", "checkpoint file, relative to $LIFEBOAT_DIR")
	size := fs.Int64("size", 1<<30, "bytes to write")
	seed := fs.Uint64("seed", 1, "seed of the byte stream")
	ready := fs.String("ready", "", "file to write lifeboat's pid into once SIGTERM is handled")
	report := fs.String("report", "", "file to write the trainerReport into")
	rate := fs.Float64("rate", 0, "bytes per second the save is written at, as a slower disk or a framework serialising from GPU memory would; 0: as fast as it goes")
	fs.Parse(args)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	check(writeAtomic(*ready, []byte(strconv.Itoa(os.Getppid()))))
	<-sigs

	t0 := time.Now()
	path := filepath.Join(os.Getenv("LIFEBOAT_DIR"), filepath.FromSlash(*out))
	check(os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	check(err)
	check(writePickle(&pacer{f: f, rate: *rate, t0: t0}, *size, *seed))
	check(f.Close())
	d := time.Since(t0)

	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b, err := json.Marshal(trainerReport{WriteSeconds: d.Seconds(), Bytes: *size, MaxRSSKiB: ru.Maxrss})
	check(err)
	check(writeAtomic(*report, b))
}

// writePickle writes a pickle of exactly size bytes (at least 12), as
// paddle.save would: PROTO 4, one BINBYTES8 whose payload is writeRandom's
// stream, and STOP, so lifeboat's format check passes and reads every byte.
func writePickle(f io.Writer, size int64, seed uint64) error {
	if size < 12 {
		return fmt.Errorf("a pickle needs at least 12 bytes, not %d", size)
	}
	head := []byte{0x80, 0x04, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(head[3:], uint64(size-12))
	if _, err := f.Write(head); err != nil {
		return err
	}
	if err := writeRandom(f, size-12, seed); err != nil {
		return err
	}
	_, err := f.Write([]byte{'.'})
	return err
}

// writeStateDict writes a pickle of about size bytes shaped like a
// state_dict: a dict of named tensors, alternately 4 KiB and 508 KiB of
// writeRandom's stream (a bias, a weight), so a format check walks many
// opcodes and skips many payloads.
func writeStateDict(f *os.File, size int64, seed uint64) error {
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write([]byte{0x80, 0x04, '}', '('}) // PROTO 4, EMPTY_DICT, MARK
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	src := rand.NewChaCha8(key)
	buf := make([]byte, 508<<10)
	for k := 0; size > 0; k++ {
		n, name := int64(4<<10), fmt.Sprintf("layers.%d.bias", k/2)
		if k%2 == 1 {
			n, name = 508<<10, fmt.Sprintf("layers.%d.weight", k/2)
		}
		n = min(n, size)
		w.Write([]byte{0x8c, byte(len(name))}) // SHORT_BINUNICODE
		w.WriteString(name)
		var hdr [9]byte
		hdr[0] = 0x8e // BINBYTES8
		binary.LittleEndian.PutUint64(hdr[1:], uint64(n))
		w.Write(hdr[:])
		src.Read(buf[:n])
		w.Write(buf[:n])
		size -= n
	}
	w.Write([]byte{'u', '.'}) // SETITEMS, STOP
	return w.Flush()
}

// writeRandom writes size bytes of a ChaCha8 stream seeded with seed:
// incompressible, the same for the same seed, different for another.
func writeRandom(f io.Writer, size int64, seed uint64) error {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	src := rand.NewChaCha8(key)
	buf := make([]byte, 4<<20)
	for size > 0 {
		b := buf[:min(int64(len(buf)), size)]
		src.Read(b)
		if _, err := f.Write(b); err != nil {
			return err
		}
		size -= int64(len(b))
	}
	return nil
}

// pacer writes to f front to back at most rate bytes per second since t0
// (rate 0: unpaced): after each write it sleeps until the bytes written so
// far are due.
type pacer struct {
	f       *os.File
	rate    float64
	t0      time.Time
	written int64
}

func (p *pacer) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.written += int64(n)
	if p.rate > 0 {
		due := p.t0.Add(time.Duration(float64(p.written) / p.rate * float64(time.Second)))
		time.Sleep(time.Until(due))
	}
	return n, err
}

// writeAtomic writes data to path through a temporary file and a rename, so
// a poller never reads a half-written file.
func writeAtomic(path string, data []byte) error {
	if path == "" {
		return fmt.Errorf("no file name given")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
