package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/watch"
)

// TestPipelineErrorsNameFlags: what pipeline.Open finds wrong (a
// *pipeline.FieldError naming an Options field, or watch.New's) reaches
// the user as a sentence naming the flag and its variable, with the exit
// code's kind (a usageError for a store inside --dir).
func TestPipelineErrorsNameFlags(t *testing.T) {
	so := &storeOptions{url: "file:///ckpt/store", uploadLimit: "fast"}
	for _, c := range []struct {
		err   error
		want  string
		usage bool
		is    error
	}{
		{&pipeline.FieldError{Field: pipeline.FieldDir, Err: pipeline.ErrNoDir},
			"--store is set but --dir is not: set --dir (LIFEBOAT_DIR) to the directory the trainer saves checkpoints into", false, nil},
		{&pipeline.FieldError{Field: pipeline.FieldDir, Value: "/ckpt", Err: pipeline.ErrHoldsStore},
			"--store (LIFEBOAT_STORE) file:///ckpt/store is inside --dir (LIFEBOAT_DIR) /ckpt: lifeboat would upload its own store as a checkpoint", true, nil},
		{&pipeline.FieldError{Field: pipeline.FieldDir, Value: "/ckpt", Err: errors.New("permission denied")},
			"--dir (LIFEBOAT_DIR) /ckpt: permission denied", false, nil},
		{&pipeline.FieldError{Field: pipeline.FieldUploadLimit, Value: "-1", Err: errors.New("negative")},
			`--upload-limit (LIFEBOAT_UPLOAD_LIMIT) is "fast"; give bytes per second such as 200MB or 1GiB`, false, nil},
		{&pipeline.FieldError{Field: pipeline.FieldUnsafeNoConditionalWrites, Value: "false", Err: fmt.Errorf("probe: %w", storage.ErrNoConditionalWrites)},
			"or set --s3-unsafe-no-conditional-writes (LIFEBOAT_S3_UNSAFE_NO_CONDITIONAL_WRITES) to run anyway", false, storage.ErrNoConditionalWrites},
		{&watch.FieldError{Field: watch.FieldDir, Value: "/ckpt", Err: watch.ErrNotDir},
			"--dir (LIFEBOAT_DIR) /ckpt is not a directory; point --dir at the directory the trainer saves checkpoints into", false, nil},
	} {
		err := pipelineError(c.err, so)
		var ue usageError
		if err == nil || !strings.Contains(err.Error(), c.want) || errors.As(err, &ue) != c.usage || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("pipelineError(%v) = %v (usage %v); want %q (usage %v)", c.err, err, errors.As(err, &ue), c.want, c.usage)
		}
	}
	if err := pipelineError(nil, so); err != nil {
		t.Errorf("pipelineError(nil) = %v", err)
	}
	other := errors.New("list checkpoints: access denied")
	if err := pipelineError(other, so); err != other {
		t.Errorf("pipelineError(%v) = %v; want it as it is", other, err)
	}
}
