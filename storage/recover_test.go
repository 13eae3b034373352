package storage_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

func TestRecover(t *testing.T) {
	ctx := context.Background()
	boom := func() { panic("client bug") }
	s := storage.Recover(&mem.FaultStore{
		Inner: mem.New(),
		OnPut: func(context.Context, string, io.Reader, int64, storage.PutOptions) (storage.ObjectInfo, error) {
			boom()
			return storage.ObjectInfo{}, nil
		},
		OnStat:   func(context.Context, string) (storage.ObjectInfo, error) { boom(); return storage.ObjectInfo{}, nil },
		OnList:   func(context.Context, string, func(storage.ObjectInfo) error) error { boom(); return nil },
		OnDelete: func(context.Context, string) error { boom(); return nil },
		OnGet:    func(context.Context, string, int64, int64) (io.ReadCloser, error) { boom(); return nil, nil },
	})
	checks := map[string]error{}
	_, checks["put"] = s.Put(ctx, "k", bytes.NewReader(nil), 0, storage.PutOptions{})
	_, checks["get"] = s.Get(ctx, "k", 0, -1)
	_, checks["stat"] = s.Stat(ctx, "k")
	checks["list"] = s.List(ctx, "", func(storage.ObjectInfo) error { return nil })
	checks["delete"] = s.Delete(ctx, "k")
	for op, err := range checks {
		if err == nil || !strings.Contains(err.Error(), "panic in the store client: client bug") || !strings.Contains(err.Error(), op) {
			t.Errorf("%s: %v, want the panic as an error naming the operation", op, err)
		}
	}
	// A healthy store passes through.
	ok := storage.Recover(mem.New())
	if _, err := ok.Put(ctx, "a/b", strings.NewReader("x"), 1, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := ok.Get(ctx, "a/b", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "x" || ok.String() != mem.New().String() {
		t.Errorf("pass-through read %q, String %q", b, ok.String())
	}
}
