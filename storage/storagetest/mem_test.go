package storagetest_test

import (
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

func TestMem(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return mem.New() })
}
