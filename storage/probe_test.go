package storage_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// ignoresCondition is a store whose create-only writes are plain writes,
// as behind a server or proxy that drops If-None-Match. It counts Puts.
func ignoresCondition(inner storage.Store, puts *int) *mem.FaultStore {
	return &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		*puts++
		opts.IfNotExists = false
		return inner.Put(ctx, key, r, size, opts)
	}}
}

// counting counts a store's Puts and passes them on unchanged.
func counting(inner storage.Store, puts *int) *mem.FaultStore {
	return &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		*puts++
		return inner.Put(ctx, key, r, size, opts)
	}}
}

func keys(t *testing.T, s storage.Store) []string {
	t.Helper()
	var ks []string
	if err := s.List(context.Background(), "", func(o storage.ObjectInfo) error { ks = append(ks, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	return ks
}

// TestProbeConditionalWrites: a store that enforces create-only writes
// passes and is recorded, so the next probe (another rank) writes nothing;
// a store that ignores the condition is refused with a permanent
// ErrNoConditionalWrites and leaves no probe key behind.
func TestProbeConditionalWrites(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	t.Run("enforced", func(t *testing.T) {
		inner := mem.New(mem.WithClock(clock))
		var puts int
		s := counting(inner, &puts)
		p, err := storage.ProbeConditionalWrites(ctx, s, clock)
		if err != nil || p.Cached || !p.Checked.Equal(now) {
			t.Fatalf("first probe: %+v, %v; want a fresh pass", p, err)
		}
		if got := keys(t, inner); len(got) != 1 || got[0] != storage.ProbeRecordKey {
			t.Fatalf("store holds %q after the probe, want only the record", got)
		}
		before := puts
		p, err = storage.ProbeConditionalWrites(ctx, s, clock)
		if err != nil || !p.Cached || puts != before {
			t.Fatalf("second probe: %+v, %v, %d puts; want the record's answer and no write", p, err, puts-before)
		}
		// A record older than ProbeMaxAge, or from the future, is probed again.
		for _, at := range []time.Time{now.Add(storage.ProbeMaxAge + time.Second), now.Add(-time.Hour)} {
			later := func() time.Time { return at }
			before = puts
			p, err = storage.ProbeConditionalWrites(ctx, s, later)
			if err != nil || p.Cached || puts == before {
				t.Fatalf("probe at %v of a record written at %v: %+v, %v; want a new probe", at, now, p, err)
			}
		}
	})

	t.Run("ignored", func(t *testing.T) {
		inner := mem.New()
		var puts int
		_, err := storage.ProbeConditionalWrites(ctx, ignoresCondition(inner, &puts), clock)
		if !errors.Is(err, storage.ErrNoConditionalWrites) || !storage.IsPermanent(err) {
			t.Fatalf("probe of a store that ignores the condition: %v; want a permanent ErrNoConditionalWrites", err)
		}
		if !strings.Contains(err.Error(), "If-None-Match") {
			t.Errorf("error %q does not name the missing feature", err)
		}
		if got := keys(t, inner); len(got) != 0 {
			t.Fatalf("a failed probe left %q in the store", got)
		}
	})

	t.Run("store error", func(t *testing.T) {
		boom := errors.New("connection refused")
		s := &mem.FaultStore{Inner: mem.New(), OnStat: func(context.Context, string) (storage.ObjectInfo, error) {
			return storage.ObjectInfo{}, boom
		}}
		if _, err := storage.ProbeConditionalWrites(ctx, s, clock); !errors.Is(err, boom) || errors.Is(err, storage.ErrNoConditionalWrites) {
			t.Fatalf("probe of an unreachable store: %v; want its error", err)
		}
	})
}
