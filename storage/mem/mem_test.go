package mem_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return mem.New() })
}

func TestFaultStorePassesThrough(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return &mem.FaultStore{Inner: mem.New()} })
}

func TestFaultStoreInjects(t *testing.T) {
	ctx := context.Background()
	boom := errors.New("boom")
	f := &mem.FaultStore{Inner: mem.New()}
	f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		if strings.HasPrefix(key, "bad/") {
			return storage.ObjectInfo{}, boom
		}
		return f.Inner.Put(ctx, key, r, size, opts)
	}
	if _, err := f.Put(ctx, "bad/x", strings.NewReader("x"), 1, storage.PutOptions{}); !errors.Is(err, boom) {
		t.Fatalf("Put bad/x = %v, want boom", err)
	}
	if _, err := f.Put(ctx, "good/x", strings.NewReader("x"), 1, storage.PutOptions{}); err != nil {
		t.Fatalf("Put good/x = %v", err)
	}
	if _, err := f.Stat(ctx, "good/x"); err != nil {
		t.Fatalf("Stat good/x = %v", err)
	}
}
