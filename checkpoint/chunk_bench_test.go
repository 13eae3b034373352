package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/restic/chunker"
)

// The chunking benchmarks decide fixed-size against content-defined chunking
// (docs/FORMAT.md, "Chunking"). Each case chunks and hashes a modified copy
// of a 128 MiB random file (tensor bytes do not compress) and reports, next
// to throughput, the share of bytes that would be uploaded because their
// chunk is not in the original's chunk set:
//
//	go test -run '^$' -bench Chunking -benchtime 3x ./checkpoint/
//
// new/total is that share; new/changed divides it by the bytes that really
// changed (1 is ideal, larger means neighbouring bytes are re-uploaded).

const benchFileSize = 128 << 20

type benchChunker struct {
	name  string
	split func(data []byte, fn func(chunk []byte))
}

func fixedSplit(size int) func([]byte, func([]byte)) {
	return func(data []byte, fn func([]byte)) {
		for len(data) > 0 {
			n := min(size, len(data))
			fn(data[:n])
			data = data[n:]
		}
	}
}

func cdcSplit(averageBits int) func([]byte, func([]byte)) {
	return func(data []byte, fn func([]byte)) {
		c := chunker.New(bytes.NewReader(data), chunker.Pol(0x3DA3358B4DC173))
		c.SetAverageBits(averageBits)
		buf := make([]byte, chunker.MaxSize)
		off := 0
		for {
			ch, err := c.Next(buf)
			if err != nil {
				return
			}
			fn(data[off : off+int(ch.Length)])
			off += int(ch.Length)
		}
	}
}

type benchCase struct {
	name    string
	modify  func(orig []byte, r *rand.Rand) []byte
	changed int // bytes that really differ
}

func BenchmarkChunking(b *testing.B) {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	orig := make([]byte, benchFileSize)
	fillRandom(r, orig)

	inplaceLen := benchFileSize / 10
	cases := []benchCase{
		{name: "unchanged", modify: func(o []byte, _ *rand.Rand) []byte { return o }},
		{name: "inplace-10pct", changed: inplaceLen, modify: func(o []byte, r *rand.Rand) []byte {
			m := bytes.Clone(o)
			off := 4*benchFileSize/10 + 12345
			fillRandom(r, m[off:off+inplaceLen])
			return m
		}},
		{name: "insert-64B-at-1KiB", changed: 64, modify: func(o []byte, r *rand.Rand) []byte {
			ins := make([]byte, 64)
			fillRandom(r, ins)
			return append(append(append([]byte{}, o[:1024]...), ins...), o[1024:]...)
		}},
	}
	chunkers := []benchChunker{
		{"fixed-1MiB", fixedSplit(1 << 20)},
		{"fixed-4MiB", fixedSplit(4 << 20)},
		{"fixed-8MiB", fixedSplit(8 << 20)},
		{"cdc-restic-1MiB", cdcSplit(20)},
		{"cdc-restic-4MiB", cdcSplit(22)},
	}
	for _, ck := range chunkers {
		base := make(map[[32]byte]bool)
		ck.split(orig, func(c []byte) { base[sha256.Sum256(c)] = true })
		for _, tc := range cases {
			mod := tc.modify(orig, r)
			b.Run(fmt.Sprintf("%s/%s", ck.name, tc.name), func(b *testing.B) {
				b.SetBytes(int64(len(mod)))
				var newBytes, chunks int
				for b.Loop() {
					newBytes, chunks = 0, 0
					ck.split(mod, func(c []byte) {
						chunks++
						if !base[sha256.Sum256(c)] {
							newBytes += len(c)
						}
					})
				}
				b.ReportMetric(float64(newBytes)/float64(len(mod)), "new/total")
				if tc.changed > 0 {
					b.ReportMetric(float64(newBytes)/float64(tc.changed), "new/changed")
				}
				b.ReportMetric(float64(chunks), "chunks")
			})
		}
	}
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}
