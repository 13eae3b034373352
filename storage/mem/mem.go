// Package mem is an in-memory storage.Store for logic tests, and FaultStore,
// a wrapper whose function fields inject failures into any Store.
//
// The in-memory store keeps the Store contract (whole-object Put, create-only
// Put, ErrNotExist on missing keys, lexical List order) so logic that passes
// against it behaves the same against storage/fs and storage/s3. Its clock is
// injectable so tests can age objects without sleeping.
package mem

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

var (
	_ storage.Store   = (*Store)(nil)
	_ storage.Sweeper = (*Store)(nil)
)

type object struct {
	data    []byte
	modTime time.Time
	sum     string
}

// Store is an in-memory storage.Store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu        sync.Mutex
	objects   map[string]object
	leftovers map[string]storage.Leftover // by key: what Leave recorded
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store stamp ModTime with now() instead of time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{now: time.Now, objects: make(map[string]object)}
	for _, o := range opts {
		o(s)
	}
	return s
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Put implements storage.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("mem: put %s: %w", key, err))
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: %w", key, err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: read: %w", key, err)
	}
	if err := ctx.Err(); err != nil { // cancelled while reading: store nothing
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: %w", key, err)
	}
	if size >= 0 && int64(len(data)) != size {
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: read %d bytes, want %d", key, len(data), size)
	}
	h := sum(data)
	if opts.SHA256 != "" && opts.SHA256 != h {
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: sha256 %s, caller said %s: %w", key, h, opts.SHA256, storage.ErrChecksum)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; ok && opts.IfNotExists {
		return storage.ObjectInfo{}, fmt.Errorf("mem: put %s: %w", key, storage.ErrExists)
	}
	o := object{data: data, modTime: s.now(), sum: h}
	s.objects[key] = o
	return info(key, o), nil
}

func info(key string, o object) storage.ObjectInfo {
	return storage.ObjectInfo{Key: key, Size: int64(len(o.data)), ModTime: o.modTime, SHA256: o.sum}
}

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, storage.Permanent(fmt.Errorf("mem: get %s: %w", key, err))
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mem: get %s: %w", key, err)
	}
	s.mu.Lock()
	o, ok := s.objects[key]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("mem: get %s: %w", key, storage.ErrNotExist)
	}
	if offset < 0 || offset > int64(len(o.data)) {
		return nil, storage.Permanent(fmt.Errorf("mem: get %s: offset %d outside object of %d bytes", key, offset, len(o.data)))
	}
	b := o.data[offset:]
	if length >= 0 && length < int64(len(b)) {
		b = b[:length]
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// Stat implements storage.Store.
func (s *Store) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("mem: stat %s: %w", key, err))
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("mem: stat %s: %w", key, err)
	}
	s.mu.Lock()
	o, ok := s.objects[key]
	s.mu.Unlock()
	if !ok {
		return storage.ObjectInfo{}, fmt.Errorf("mem: stat %s: %w", key, storage.ErrNotExist)
	}
	return info(key, o), nil
}

// List implements storage.Store. fn runs without the store's lock held, so
// it may call back into the store.
func (s *Store) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	s.mu.Lock()
	var infos []storage.ObjectInfo
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, info(k, o))
		}
	}
	s.mu.Unlock()
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	for _, in := range infos {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mem: list %s: %w", prefix, err)
		}
		if err := fn(in); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements storage.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(key); err != nil {
		return storage.Permanent(fmt.Errorf("mem: delete %s: %w", key, err))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: delete %s: %w", key, err)
	}
	s.mu.Lock()
	delete(s.objects, key)
	s.mu.Unlock()
	return nil
}

// Leave records a leftover of an unfinished Put of key, holding size bytes
// and stamped with the store's clock, as a process killed in the middle of
// a Put to a store that keeps such things (a directory, S3) leaves one. A
// Put here is atomic and leaves nothing itself; Leave lets logic tests
// see what Sweep's callers do with leftovers.
func (s *Store) Leave(key string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leftovers == nil {
		s.leftovers = map[string]storage.Leftover{}
	}
	s.leftovers[key] = storage.Leftover{Name: key + " (unfinished)", Size: size, ModTime: s.now()}
}

// Leftovers returns how many leftovers Leave recorded that no Sweep has
// removed.
func (s *Store) Leftovers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leftovers)
}

// Sweep implements storage.Sweeper: it offers the leftovers Leave
// recorded under prefix, in key order, and removes those fn accepts.
func (s *Store) Sweep(ctx context.Context, prefix string, fn func(storage.Leftover) (bool, error)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: sweep %s: %w", prefix, err)
	}
	s.mu.Lock()
	var keys []string
	for k := range s.leftovers {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("mem: sweep %s: %w", prefix, err)
		}
		s.mu.Lock()
		l, ok := s.leftovers[k]
		s.mu.Unlock()
		if !ok {
			continue
		}
		remove, err := fn(l)
		if err != nil {
			return err
		}
		if remove {
			s.mu.Lock()
			delete(s.leftovers, k)
			s.mu.Unlock()
		}
	}
	return nil
}

// String implements storage.Store.
func (s *Store) String() string { return "mem://" }

// Len returns the number of objects stored.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.objects)
}

// Set replaces key's bytes behind the Store contract's back, keeping the
// object's ModTime and recording the new checksum: tests use it to flip bits
// or truncate objects the way a faulty disk would.
func (s *Store) Set(key string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.objects[key]
	if o.modTime.IsZero() {
		o.modTime = s.now()
	}
	o.data = bytes.Clone(data)
	o.sum = sum(data)
	s.objects[key] = o
}

// Bytes returns a copy of key's bytes, or nil if key is missing.
func (s *Store) Bytes(key string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return nil
	}
	return bytes.Clone(o.data)
}
